"""A compacted topic end to end on one in-process broker: records produced by raftka's
idempotent producer over the data listener (acks=all, so a follower fetching as broker
102 moves the high watermark), the broker's own ``LogCleaner`` (``[log.cleaner]``, built
and started as the data plane does) cleaning every segment but the active one, then a
consumer reading from offset 0 gets exactly the latest record of each key at its
original offset, and a follower that lost its disk copies the cleaned log, gaps and all,
through the follower fetch. And the broker's data plane runs its cleaner by the node's
``[log.cleaner]``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from raftka.broker.log.partition_log import PartitionLog
from raftka.broker.server import DataPlane
from raftka.client.consumer import AsyncConsumer
from raftka.client.producer import AsyncProducer
from raftka.client.types import TopicPartition
from raftka.node.config import CleanerConfig, NodeConfig
from raftka.v1 import broker_pb2
from raftka.wire.client import BrokerClient
from tests.unit.broker_in_process import InProcessBroker, broker_in_process
from tests.unit.cleaner_logs import consume, open_log

TOPIC = "table-changelog"
FOLLOWER = 102
KEYS = [b"k%d" % i for i in range(4)]
TOMBSTONED = {b"k1", b"k3"}
VALUE_BYTES = 600  # one record per batch, over half of segment.bytes: a segment rolls before each value
CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "min.cleanable.dirty.ratio": "0.01",
}
CLEANER = CleanerConfig(backoff_ms=10, dedupe_buffer_size=1 << 20)


def value(key: bytes, round_: int) -> bytes:
    return (b"%s=%d;" % (key, round_)).ljust(VALUE_BYTES, b".")


async def follow(broker: InProcessBroker, replica: PartitionLog, until: int | None = None) -> None:
    """Fetch as the follower and append what the leader sends, as a replica fetcher does,
    until ``until`` (forever with None)."""
    client = BrokerClient(broker.address)
    try:
        while until is None or replica.log_end_offset < until:
            request = broker_pb2.FetchRequest(
                replica_id=FOLLOWER, replica_epoch=1, max_wait_ms=20, max_bytes=1 << 20
            )
            request.topics.add(name=TOPIC).partitions.add(
                partition=0,
                fetch_offset=replica.log_end_offset,
                last_fetched_epoch=-1,
                partition_max_bytes=1 << 20,
            )
            answer = (await client.Fetch(request, timeout=10)).topics[0].partitions[0]
            assert answer.error == 0, answer.message
            replica.append_as_follower(answer.records)
    finally:
        client.close()


def test_a_compacted_topic_reads_back_the_latest_record_of_each_key_from_the_leader_and_a_new_follower(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with broker_in_process(
            tmp_path / "leader",
            {TOPIC: 1},
            {TOPIC: CONFIGS},
            followers=(FOLLOWER,),
            log_cleaner=CLEANER,
        ) as broker:
            first_copy = open_log(tmp_path / "follower" / f"{TOPIC}-0", 1024)
            following = asyncio.create_task(follow(broker, first_copy))
            producer = AsyncProducer(broker.address, linger_ms=0)  # acks=all, idempotent
            latest: dict[bytes, tuple[int, bytes | None]] = {}
            try:
                for round_ in range(12):
                    for key in KEYS:
                        tombstone = key in TOMBSTONED and round_ == 11
                        written = None if tombstone else value(key, round_)
                        sent = await (await producer.send(TOPIC, written, key=key, partition=0))
                        latest[key] = (sent.offset, written)
                last = await (await producer.send(TOPIC, value(b"z", 0), key=b"z", partition=0))
                latest[b"z"] = (last.offset, value(b"z", 0))  # alone in the active segment
            finally:
                await producer.close()
            leader = broker.replicas.get(TOPIC, 0).log
            assert leader.active.base_offset == last.offset  # every other record may be cleaned

            while broker.cleaner.checkpoints.get(f"{TOPIC}-0") != last.offset:  # the cleaner's own progress
                await asyncio.sleep(0.01)
            following.cancel()
            expected = sorted((offset, key, written) for key, (offset, written) in latest.items())

            consumer = AsyncConsumer(broker.address, auto_offset_reset="earliest", fetch_max_wait_ms=50)
            try:
                await consumer.assign([TopicPartition(TOPIC, 0)])
                got = []
                while len(got) < len(expected):
                    got += await consumer.poll(2000, 100)
                assert sorted((r.offset, r.key, r.value) for r in got) == expected
                assert await consumer.position(TopicPartition(TOPIC, 0)) == last.offset + 1
            finally:
                await consumer.close()

            new_disk = open_log(tmp_path / "new-disk" / f"{TOPIC}-0", 1024)
            await follow(broker, new_disk, until=leader.log_end_offset)
            cleaned = consume(new_disk)
            assert cleaned.batches == consume(leader).batches  # byte for byte, gaps and all
            assert cleaned.offsets == [offset for offset, _, _ in expected]
            live = {key: (offset, written) for offset, key, written in expected if written is not None}
            assert cleaned.table == live == consume(first_copy).table  # the uncleaned copy: the same table
            first_copy.close()
            new_disk.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))  # a hang, not a slow machine, fails here


def test_the_data_plane_runs_its_cleaner_by_the_nodes_log_cleaner_table(tmp_path: Path) -> None:
    config = NodeConfig(
        101, tmp_path, (), "127.0.0.1:1", process_roles=("broker",), log_cleaner=CleanerConfig(enable=False)
    )

    async def scenario() -> None:
        data = DataPlane(config, SimpleNamespace(), lambda: 1, lambda: None)  # type: ignore[arg-type]
        try:
            assert data.cleaner.config is config.log_cleaner
        finally:
            await data.close()

    asyncio.run(scenario())
