"""Consumer groups on real processes (``raftka cluster up``): the broker coordinating a
group is SIGKILLed; the group moves to another broker, which carries it on from its last
recorded rebalance (the members keep their generation unless one timed out meanwhile),
its members own every partition once more, and the committed offsets are what they were."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.consumer import AsyncConsumer
from raftka.client.group_admin import GroupAdmin
from raftka.client.producer import AsyncProducer
from raftka.client.types import NewTopic
from raftka.v1 import broker_pb2
from raftka.wire.client import BrokerClient
from tests.integration.metadata_cluster import MetadataCluster

pytestmark = pytest.mark.integration
TOPIC = "orders"
PARTITIONS = 6
SESSION_TIMEOUT_MS = 2_000  # the controller's: a killed broker is fenced (and its groups move) quickly


@pytest.fixture
def cluster(tmp_path: Path):  # noqa: ANN201
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up_configured(
            controller__controller={"session_timeout_ms": SESSION_TIMEOUT_MS},
            broker__broker={"heartbeat_interval_ms": 300, "group_initial_rebalance_delay_ms": 0},
        )
        yield cluster
    finally:
        cluster.close()


def test_a_groups_coordinator_dies_and_the_group_moves_with_its_offsets(cluster: MetadataCluster) -> None:
    bootstrap = [n.data_address for n in cluster.nodes("broker")]
    with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30)) as admin:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})])[0].check()

    async def scenario() -> None:
        producer = AsyncProducer(bootstrap, linger_ms=0)
        await producer.wait_ready(TOPIC)
        for i in range(60):
            await producer.send(TOPIC, b"v%d" % i, key=b"k%d" % i)
        await producer.close()
        members = [
            AsyncConsumer(
                bootstrap,
                group_id="g",
                auto_offset_reset="earliest",
                session_timeout_ms=6_000,
                heartbeat_interval_ms=200,
                request_timeout_ms=3_000,
            )  # fmt: skip
            for _ in range(2)
        ]
        for member in members:
            member.subscribe([TOPIC])
        admin = GroupAdmin(bootstrap)
        try:
            read = 0
            while read < 60:
                read += sum(len(r) for r in await asyncio.gather(*(m.poll(100) for m in members)))
            for member in members:
                await member.commit()
            before = await admin.describe_group("g")
            committed = {o.partition: o.committed for o in before.offsets}
            assert sum(c or 0 for c in committed.values()) == 60

            cluster.kill(before.coordinator)
            while True:  # the members keep polling until the group is whole on another broker
                await asyncio.gather(*(m.poll(100) for m in members))
                after = await _describe_or_none(admin, "g")
                owned = sorted(tp for m in (after.members if after else ()) for tp in m.assignment)
                if (
                    after is not None
                    and after.coordinator != before.coordinator
                    and after.state == "Stable"
                    and len(owned) == PARTITIONS
                ):
                    break
            assert after.generation >= before.generation, "a generation never goes back"
            if after.generation == before.generation:  # carried on: the same members, no rebalance
                assert {m.member_id for m in after.members} == {m.member_id for m in before.members}
            assert {o.partition: o.committed for o in after.offsets} == committed
            found = await BrokerClient(bootstrap[0]).FindCoordinator(
                broker_pb2.FindCoordinatorRequest(group_id="g"), timeout=5
            )
            assert found.node_id == after.coordinator
        finally:
            for member in members:
                await member.close()
            await admin.close()

    asyncio.run(asyncio.wait_for(scenario(), 180))


async def _describe_or_none(admin: GroupAdmin, group: str):  # noqa: ANN202
    try:
        return await admin.describe_group(group)
    except Exception:  # noqa: BLE001 - while the coordinator moves, the answer may not come
        return None
