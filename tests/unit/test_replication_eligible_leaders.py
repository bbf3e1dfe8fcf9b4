"""The partition leader's side of KIP-966 and KIP-903.

Strict min ISR: the high watermark moves only while the ISR has min.insync.replicas
members, so a replica that leaves a smaller ISR (the controller puts it in the ELR) holds
every committed record and may be elected. And the leader's AlterPartition names the
broker epoch each ISR member fetched with, so the controller can refuse a member that
restarted since (``raftka.metadata.isr_members``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from raftka.broker.log.manager import LogManager
from raftka.broker.replica.isr import IsrChanges
from raftka.v1 import controller_pb2
from tests.unit.test_replication import Cluster, E, fetch_from, produce_request, result_of, run


def test_the_high_watermark_stands_while_the_isr_is_below_min_isr_and_moves_once_it_is_not(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path, min_isr=2)
        leader = cluster.nodes[1]
        cluster.publish(isr=(1,), partition_epoch=1)  # 2 and 3 left: 2 is in the ELR
        assert result_of(await leader.replicas.produce(produce_request([b"a"], acks=1))).error == E.NONE
        assert leader.partition.log.log_end_offset == 1
        assert leader.partition.high_watermark == 0, "committed only where the ELR member has it"
        consumer = await leader.replicas.fetch(fetch_from(0))
        assert consumer.topics[0].partitions[0].records == b"", "nothing past the high watermark"

        await cluster.catch_up(2, rounds=2)
        assert leader.partition.high_watermark == 0, "2 has it, but the ISR is still the leader alone"
        cluster.publish(isr=(1, 2), partition_epoch=2)
        assert leader.partition.high_watermark == 1

    run(body())


def test_an_acks_all_produce_waiting_when_the_isr_falls_below_min_isr_fails_and_commits_nothing(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path, min_isr=2)
        leader = cluster.nodes[1]
        pending = asyncio.create_task(leader.replicas.produce(produce_request([b"a"])))
        await asyncio.sleep(0)
        cluster.publish(isr=(1,), partition_epoch=1)
        assert result_of(await pending).error == E.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert leader.partition.high_watermark == 0

    run(body())


class RecordingLink:
    """A controller link that records AlterPartition requests and refuses them all."""

    def __init__(self) -> None:
        self.requests: list[controller_pb2.AlterPartitionRequest] = []
        self.sent = asyncio.Event()

    async def call(self, rpc: Any, request: controller_pb2.AlterPartitionRequest) -> Any:
        self.requests.append(request)
        self.sent.set()
        status = controller_pb2.Status(error=controller_pb2.ErrorCode.NOT_CONTROLLER)
        return controller_pb2.AlterPartitionResponse(status=status)


def test_the_leader_names_the_broker_epoch_each_member_fetched_with(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        leader = cluster.nodes[1]
        cluster.publish(isr=(1, 2), partition_epoch=1)
        cluster.epochs[3] = cluster.nodes[3].broker_epoch = 57  # 3 registered again since
        cluster.publish()
        await leader.replicas.produce(produce_request([b"a"], acks=1))
        await cluster.catch_up(2, 3, rounds=2)
        assert leader.isr_requests[-1] == (1, 2, 3)

        link = RecordingLink()
        changes = IsrChanges(link, 1, lambda: 11, lambda partition: None)  # type: ignore[arg-type]
        task = asyncio.create_task(changes.run())
        changes.request(leader.partition, (1, 2, 3))
        await asyncio.wait_for(link.sent.wait(), 5)
        task.cancel()
        [data] = link.requests[0].topics[0].partitions
        assert (list(data.new_isr), list(data.new_isr_broker_epochs)) == ([1, 2, 3], [11, 1, 57])

    run(body())


class NewLeaderLink(RecordingLink):
    """Answers every change as the controller does when it completed a reassignment that
    moved the leader: committed, but another broker leads."""

    async def call(self, rpc: Any, request: controller_pb2.AlterPartitionRequest) -> Any:
        self.requests.append(request)
        self.sent.set()
        response = controller_pb2.AlterPartitionResponse(status=controller_pb2.Status())
        for topic in request.topics:
            for data in topic.partitions:
                response.partitions.add(
                    topic_id=topic.topic_id,
                    partition=data.partition,
                    error=controller_pb2.ErrorCode.NEW_LEADER_ELECTED,
                    leader=3,
                    isr=[3],
                )
        return response


def test_a_change_that_elected_another_leader_stays_pending_until_the_metadata_comes(tmp_path: Path) -> None:
    """Kafka keeps the pending ISR on NEW_LEADER_ELECTED (issue 30): dropped, the leader's
    maximal ISR forgot the member it added, and the high watermark moved without it."""

    async def body() -> None:
        cluster = Cluster(tmp_path)
        leader = cluster.nodes[1]
        cluster.publish(isr=(1, 2), partition_epoch=1)
        await leader.replicas.produce(produce_request([b"a"], acks=1))
        await cluster.catch_up(3, rounds=2)
        assert leader.isr_requests[-1] == (1, 2, 3) and leader.partition.pending_isr == (1, 2, 3)
        link = NewLeaderLink()
        settled = asyncio.Event()
        changes = IsrChanges(link, 1, lambda: 11, lambda partition: settled.set())  # type: ignore[arg-type]
        task = asyncio.create_task(changes.run())
        changes.request(leader.partition, (1, 2, 3))
        await asyncio.wait_for(settled.wait(), 5)
        task.cancel()
        assert leader.partition.pending_isr == (1, 2, 3)
        await leader.replicas.produce(produce_request([b"b"], acks=1))
        await cluster.catch_up(2, rounds=2)
        assert leader.partition.high_watermark == 1, "a is on 1, 2 and 3; b is not on 3, in the maximal ISR"
        cluster.publish(leader=1, leader_epoch=2, isr=(1, 2), partition_epoch=3)  # the images came together
        assert leader.partition.pending_isr is None and leader.partition.is_leader
        asked = len(leader.isr_requests)
        await cluster.catch_up(3, rounds=2)
        assert leader.isr_requests[asked:] == [(1, 2, 3)], "it changes the ISR again in its new epoch"

    run(body())


def test_a_clean_close_marks_the_broker_epoch_and_a_crash_leaves_none(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    manager.open_all()
    manager.close(broker_epoch=42)
    again = LogManager(tmp_path)
    again.open_all()
    assert again.clean_shutdown_epoch == 42
    # no close(): a crash, a kill or a power cut
    after_crash = LogManager(tmp_path)
    after_crash.open_all()
    assert after_crash.clean_shutdown_epoch is None
    after_crash.close()  # never registered: the logs are clean, but no epoch is vouched for
    unregistered = LogManager(tmp_path)
    unregistered.open_all()
    assert unregistered.clean_shutdown_epoch is None
