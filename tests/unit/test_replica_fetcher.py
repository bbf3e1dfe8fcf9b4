"""A follower's fetcher under faults: a failure stays with its partition, a corrupt batch
is retried with growing backoff and logged rarely, a crashed fetch loop restarts, and a
truncated partition waits until its lowered recovery point is on disk.

The partition tests use the in-process cluster of ``test_replication`` (real logs, fetches
handed over by the test, the cluster's clock); the loop test runs a real ``ReplicaFetcher``
task whose leader has no address yet.
"""

from __future__ import annotations

import asyncio
import errno
import math
import os
from pathlib import Path

import structlog

from raftka.broker.replica.fetcher import APPEND_BACKOFF_MAX_S, ERROR_BACKOFF_S, ReplicaFetcher
from raftka.node.config import BrokerConfig
from tests.unit.test_replication import TOPIC_NAME, Cluster, produce_request, result_of, run


def test_a_partition_whose_log_fails_stops_alone_and_is_reported(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path, partitions=2)
        leader, follower = cluster.nodes[1], cluster.nodes[2]
        broken = follower.replicas.get(TOPIC_NAME, 0)
        healthy = follower.replicas.get(TOPIC_NAME, 1)

        def disk_error(payload: bytes) -> None:
            raise OSError(errno.EIO, "Input/output error")

        broken.log.append_as_follower = disk_error
        for partition in (0, 1):
            response = await leader.replicas.produce(produce_request([b"a"], acks=1, partition=partition))
            assert result_of(response).error == 0
        await cluster.replicate(2)

        assert healthy.log.log_end_offset == 1
        assert broken.log.log_end_offset == 0
        assert broken in follower.fetch.failed and "Input/output error" in follower.fetch.failed[broken]
        assert broken not in follower.fetch.partitions

        response = await leader.replicas.produce(produce_request([b"b"], acks=1, partition=1))
        assert result_of(response).error == 0
        await cluster.replicate(2)
        assert healthy.log.log_end_offset == 2

        del broken.log.append_as_follower  # the disk is back; a new role starts it again
        cluster.elect(1, (1, 3))
        assert broken not in follower.fetch.failed
        await cluster.catch_up(2)
        assert broken.log.log_end_offset == 1

    run(body())


def test_a_corrupt_batch_on_the_leader_is_retried_with_growing_backoff_and_logged_rarely(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        leader, follower = cluster.nodes[1], cluster.nodes[2]
        await leader.replicas.produce(produce_request([b"value"], acks=1))
        segment = leader.partition.log.active.path
        fd = os.open(segment, os.O_WRONLY)
        try:
            os.pwrite(fd, b"X", os.path.getsize(segment) - 1)  # in the record, under the CRC
        finally:
            os.close(fd)

        partition = follower.partition
        delays = []
        with structlog.testing.capture_logs() as logs:
            for _ in range(12):
                now = cluster.clock.ms / 1000
                assert follower.fetch.ready(now) == [partition]
                request, sent = follower.fetch.request([partition])
                request.max_wait_ms = 0
                follower.fetch.apply(await leader.replicas.fetch(request), sent)
                not_before = follower.fetch.partitions[partition]
                assert follower.fetch.ready((now + not_before) / 2) == []
                delays.append(round(not_before - now, 6))
                cluster.clock.ms = math.ceil(not_before * 1000)

        expected = [min(APPEND_BACKOFF_MAX_S, ERROR_BACKOFF_S * 2**i) for i in range(12)]
        assert delays == [round(d, 6) for d in expected]
        assert partition.log.log_end_offset == 0 and partition not in follower.fetch.failed
        errors = [e for e in logs if e["log_level"] == "error"]
        # 12 tries in 111 s (the 11th at 81 s): logged at the first, then not before a minute.
        assert [e["failures"] for e in errors] == [1, 11]

    run(body())


def test_a_crashed_fetch_loop_restarts_and_the_fetcher_still_closes_cleanly() -> None:
    async def body() -> None:
        calls = 0
        restarted = asyncio.Event()

        def address(broker_id: int) -> str | None:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise RuntimeError("a bug in the loop")
            restarted.set()
            return None  # the leader has no address yet: the loop waits

        fetcher = ReplicaFetcher(2, 1, address, BrokerConfig(), lambda: 1, lambda p: None)
        await asyncio.wait_for(restarted.wait(), timeout=10)
        await fetcher.close()

    asyncio.run(body())


def test_a_truncated_partition_is_fetched_again_only_once_its_recovery_point_is_on_disk(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        cluster = Cluster(tmp_path)
        old_leader = cluster.nodes[1]
        await old_leader.replicas.produce(produce_request([b"a"], acks=1))
        await cluster.catch_up(2, 3)
        await old_leader.replicas.produce(produce_request([b"lost"], acks=1))
        old_leader.slow_disk = True
        cluster.elect(2, (2, 3))
        await cluster.nodes[2].replicas.produce(produce_request([b"b"], acks=1))

        await cluster.replicate(1)  # answered with the diverging epoch: cut back to 1
        assert old_leader.partition.log.log_end_offset == 1
        assert old_leader.fetch.ready(float("inf")) == []
        await cluster.replicate(1)
        assert old_leader.values() == [b"a"], "nothing appended before the cut is on disk"

        for on_disk in old_leader.on_disk_later:
            on_disk()
        await cluster.catch_up(1)
        assert old_leader.values() == [b"a", b"b"]

    run(body())
