"""The controller node as ``raftka server`` builds it (FileStorage, GrpcTransport, the
Controller service on the raft listener), started in-process and called over gRPC."""

from __future__ import annotations

import socket
from pathlib import Path

import grpc

from raft.node_config import NodeConfig, Voter
from raftka.metadata.server import start_controller
from raftka.raft.storage.meta import format_storage, new_cluster_id
from raftka.v1 import controller_pb2 as pb
from raftka.v1 import controller_pb2_grpc, metadata_pb2
from tests.metadata_sim.quorum import eventually
from tests.unit.metadata_controller_support import E, run

TIMEOUT_S = 5.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_controller_serves_over_grpc_and_restarts_from_its_log(tmp_path: Path) -> None:
    port = free_port()
    config = NodeConfig(
        node_id=1,
        data_dir=tmp_path / "data",
        voters=(Voter(1, "127.0.0.1", port),),
        listener=f"127.0.0.1:{port}",
    )
    cluster_id = new_cluster_id()
    format_storage(config.data_dir, cluster_id, 1, initial_cluster=True)

    async def body() -> None:
        started = await start_controller(config)
        await eventually(lambda: started.controller.is_active, "the controller to activate")
        async with grpc.aio.insecure_channel(config.listener) as channel:
            stub = controller_pb2_grpc.ControllerStub(channel)
            registered = await stub.BrokerRegistration(
                pb.BrokerRegistrationRequest(
                    broker_id=101,
                    incarnation_id="i",
                    listeners=[metadata_pb2.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9092)],
                ),
                timeout=TIMEOUT_S,
            )
            beat = pb.BrokerHeartbeatRequest(
                broker_id=101,
                broker_epoch=registered.broker_epoch,
                current_metadata_offset=registered.broker_epoch,
            )
            assert not (await stub.BrokerHeartbeat(beat, timeout=TIMEOUT_S)).is_fenced
            created = await stub.CreateTopics(
                pb.CreateTopicsRequest(
                    topics=[pb.CreatableTopic(name="t", num_partitions=2, replication_factor=1)]
                ),
                timeout=TIMEOUT_S,
            )
            assert created.topics[0].error == E.NONE
            bad = await stub.CreateTopics(
                pb.CreateTopicsRequest(
                    topics=[pb.CreatableTopic(name="t!", num_partitions=1, replication_factor=1)]
                ),
                timeout=TIMEOUT_S,
            )
            assert bad.topics[0].error == E.INVALID_TOPIC_EXCEPTION
            cluster = await stub.DescribeCluster(pb.DescribeClusterRequest(), timeout=TIMEOUT_S)
            assert (cluster.cluster_id, cluster.controller_id) == (cluster_id, 1)
        await started.shutdown()

        restarted = await start_controller(config)
        await eventually(lambda: restarted.controller.is_active, "the restarted controller to activate")
        async with grpc.aio.insecure_channel(config.listener) as channel:
            stub = controller_pb2_grpc.ControllerStub(channel)
            listing = await stub.ListTopics(pb.ListTopicsRequest(), timeout=TIMEOUT_S)
            assert [(t.name, t.partitions) for t in listing.topics] == [("t", 2)]
        await restarted.shutdown()

    run(body)
