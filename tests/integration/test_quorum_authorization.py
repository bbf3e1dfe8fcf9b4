"""On a live ``raftka cluster up --tls`` cluster whose controllers form a dynamic quorum
(KIP-853), a certificate of the cluster's CA that holds no ACL (a broker's) cannot add or
remove a voter, nor describe the quorum, and even a super user cannot make a broker a
voter: the voter set stays the three controllers (issue 29, finding 1)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from raftka.command import local
from raftka.security.tls import TlsFiles, aio_channel
from raftka.v1 import raft_pb2, raft_pb2_grpc
from tests.integration.metadata_cluster import UP_TIMEOUT_S, MetadataCluster
from tests.integration.test_controller_membership import format_dynamic, leader_row, voters

pytestmark = pytest.mark.integration
TIMEOUT_S = 30.0


async def refusal(address: str, tls: TlsFiles, method: str, request: object) -> str:
    """The gate's PERMISSION_DENIED message; fails if the call got past it."""
    async with aio_channel(address, tls) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await getattr(raft_pb2_grpc.RaftStub(channel), method)(request, timeout=TIMEOUT_S)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED, refused.value
    return refused.value.details() or ""


def test_a_certificate_without_acls_cannot_change_the_voters(tmp_path: Path) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.raftka("cluster", "up", "--tls", "--output", "json", timeout_s=UP_TIMEOUT_S)
        cluster.down()
        format_dynamic(cluster)
        cluster.up()
        before = voters(cluster)
        leader_id, leader_directory = leader_row(cluster)
        leader = cluster.node(leader_id).address
        state = local.load(cluster.dir)
        certs = state.certs_dir()
        broker = cluster.nodes("broker")[0]
        broker_tls = TlsFiles(
            certs / "ca.crt", certs / f"broker-{broker.id}.crt", certs / f"broker-{broker.id}.key"
        )
        remove = raft_pb2.RemoveRaftVoterRequest(
            cluster_id=state.cluster_id, voter_id=leader_id, voter_directory_id=leader_directory
        )
        add = raft_pb2.AddRaftVoterRequest(
            cluster_id=state.cluster_id,
            voter_id=broker.id,
            voter_directory_id="A" * 22,
            endpoints=[broker.address],
        )

        async def attempts() -> None:
            assert "may not ALTER the cluster" in await refusal(leader, broker_tls, "RemoveRaftVoter", remove)
            assert "can never be a voter" in await refusal(leader, broker_tls, "AddRaftVoter", add)
            assert "can never be a voter" in await refusal(leader, state.client_tls(), "AddRaftVoter", add)
            await refusal(leader, broker_tls, "DescribeQuorum", raft_pb2.DescribeQuorumRequest())

        asyncio.run(attempts())
        assert voters(cluster) == before
        assert {node_id for node_id, _ in before} == {n.id for n in cluster.nodes("controller")}
    finally:
        cluster.close()
