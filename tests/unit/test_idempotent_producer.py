"""The idempotent producer against fake brokers that follow the real broker's producer
state rules (``fake_brokers``): up to five batches in flight per partition, each record
written once and in send order when answers are lost, refused or late; the epoch bumped,
and sequences restarted at 0, when the producer cannot know where its numbering stands;
InitProducerId retried until a broker answers. Without idempotence the producer keeps
one batch in flight and may write a batch twice, as before."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from raftka.broker.log.producer_state import BatchMetadata
from raftka.client.errors import ProducerError
from raftka.client.producer import AsyncProducer, RecordFuture
from raftka.v1 import controller_pb2
from tests.unit.fake_brokers import TOPIC, FakeCluster
from tests.unit.test_client_failures import P0, run, values_in
from tests.unit.test_clients import serving

E = controller_pb2.ErrorCode
ONE_PER_BATCH = {"batch_size": 1, "linger_ms": 0, "retry_backoff_ms": 10}  # every record its own batch


async def send_all(producer: AsyncProducer, values: list[bytes]) -> list[RecordFuture]:
    return [await producer.send(TOPIC, value, partition=0) for value in values]


def numbering(cluster: FakeCluster) -> list[tuple[int, int]]:
    """(epoch, base sequence) of each batch in partition 0's log."""
    return [(h.producer_epoch, h.base_sequence) for h in cluster.logs[0].headers()]


def test_five_batches_stay_in_flight_per_partition_and_land_in_send_order() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        release = cluster.hold_answers()
        producer = AsyncProducer(cluster.bootstrap, **ONE_PER_BATCH)
        try:
            futures = await send_all(producer, [b"v%d" % i for i in range(12)])
            while cluster.in_flight[0] < 5:
                await asyncio.sleep(0.001)
            assert producer._in_flight[P0] == 5 and len(producer._batches[P0]) == 7, "five out, the rest wait"
            release.set()
            await producer.flush()
            assert [(await f).offset for f in futures] == list(range(12))
        finally:
            release.set()
            await producer.close()
        assert cluster.in_flight_max[0] == 5
        assert numbering(cluster) == [(0, i) for i in range(12)]
        assert await values_in(cluster, 0) == [b"v%d" % i for i in range(12)]

    run(scenario)


def test_a_batch_still_filling_waits_for_the_one_in_flight() -> None:
    """Pipelining is for full batches: at a light load records gather behind the batch
    in flight instead of going one request each."""

    async def scenario(cluster: FakeCluster) -> None:
        release = cluster.hold_answers()
        producer = AsyncProducer(cluster.bootstrap, linger_ms=0)
        try:
            first = await producer.send(TOPIC, b"first", partition=0)
            while cluster.in_flight[0] < 1:
                await asyncio.sleep(0.001)
            rest = [await producer.send(TOPIC, b"r%d" % i, partition=0) for i in range(3)]
            producer._ship_ready()
            assert producer._in_flight[P0] == 1 and producer._batches[P0][0].records == 3
            release.set()
            await producer.flush()
            assert [(await f).offset for f in [first, *rest]] == [0, 1, 2, 3]
        finally:
            release.set()
            await producer.close()
        assert [h.record_count for h in cluster.logs[0].headers()] == [1, 3]

    run(scenario)


def test_lost_answers_late_acks_and_a_moved_leader_write_each_record_once_in_order() -> None:
    """Five batches go out together: the first is written but answered
    NOT_ENOUGH_REPLICAS_AFTER_APPEND, the second written and its connection closed (those
    behind it on that connection may or may not have been read and written by then);
    later the leader moves. Every retry of a written batch is answered as a duplicate."""

    async def scenario(cluster: FakeCluster) -> None:
        producer = AsyncProducer(cluster.bootstrap, **ONE_PER_BATCH)
        try:
            cluster.lose_next_answers(0, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
            cluster.lose_next_answers(0, None)
            futures = await send_all(producer, [b"a%d" % i for i in range(5)])
            await producer.flush()
            cluster.move_leader(0, to=2)
            futures += await send_all(producer, [b"b%d" % i for i in range(5)])
            await producer.flush()
            offsets = [(await f).offset for f in futures]
        finally:
            await producer.close()
        assert offsets == list(range(10))
        assert await values_in(cluster, 0) == [b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(5)]
        assert len([p for _, p in cluster.produced if p == 0]) > 10, (
            "answers were lost and batches sent again"
        )

    run(scenario)


def test_a_gap_at_the_broker_bumps_the_epoch_and_numbers_the_rest_from_zero() -> None:
    """The broker lost the producer's last two batches (its state says sequence 0 was the
    last): the next batch is refused as out of order although it is the next the producer
    knows of, so only a new epoch, from sequence 0, goes on."""

    async def scenario(cluster: FakeCluster) -> None:
        producer = AsyncProducer(cluster.bootstrap, **ONE_PER_BATCH)
        try:
            await send_all(producer, [b"x0", b"x1", b"x2"])
            await producer.flush()
            producer_id, _ = producer.producer_id_and_epoch
            entry = cluster.logs[0].producers.producers[producer_id]
            entry.batches.clear()
            entry.batches.append(BatchMetadata(0, 0, 0, 0, 0))
            futures = await send_all(producer, [b"y0", b"y1"])
            await producer.flush()
            assert [(await f).offset for f in futures] == [3, 4]
            assert producer.producer_id_and_epoch == (producer_id, 1)
        finally:
            await producer.close()
        assert numbering(cluster) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]

    run(scenario)


def test_a_batch_refused_for_good_fails_alone_and_the_batches_after_it_are_renumbered() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        producer = AsyncProducer(cluster.bootstrap, **ONE_PER_BATCH)
        try:
            await (await producer.send(TOPIC, b"first", partition=0))
            cluster.fail_next_produces(0, E.INVALID_RECORD)  # refused, not written
            refused, *rest = await send_all(producer, [b"bad", b"c0", b"c1", b"c2"])
            await producer.flush()
            with pytest.raises(ProducerError) as failed:
                await refused
            assert failed.value.code == "INVALID_RECORD"
            assert [(await f).offset for f in rest] == [1, 2, 3]
        finally:
            await producer.close()
        assert numbering(cluster) == [(0, 0), (1, 0), (1, 1), (1, 2)], "after the refusal: a new epoch from 0"
        assert await values_in(cluster, 0) == [b"first", b"c0", b"c1", b"c2"]

    run(scenario)


def test_a_batch_given_up_unacknowledged_makes_the_producer_bump_its_epoch() -> None:
    """The producer cannot know whether a batch it gave up on was written; the next batch
    could then never follow it. It bumps the epoch and starts the partition at 0."""

    async def scenario(cluster: FakeCluster) -> None:
        producer = AsyncProducer(cluster.bootstrap, delivery_timeout_ms=300, **ONE_PER_BATCH)
        try:
            await (await producer.send(TOPIC, b"first", partition=0))
            cluster.fail_next_produces(0, E.NOT_ENOUGH_REPLICAS, times=10_000)
            with pytest.raises(ProducerError) as failed:
                await (await producer.send(TOPIC, b"lost", partition=0))
            assert failed.value.code == "REQUEST_TIMED_OUT"
            cluster.failures[0].clear()
            after = await producer.send(TOPIC, b"after", partition=0)
            assert (await after).offset == 1
        finally:
            await producer.close()
        assert numbering(cluster) == [(0, 0), (1, 0)]

    run(scenario)


def test_init_producer_id_is_retried_and_a_refusal_for_good_stops_the_producer() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        cluster.init_failures.extend([E.REQUEST_TIMED_OUT, E.NOT_LEADER_OR_FOLLOWER])
        producer = AsyncProducer(cluster.bootstrap, **ONE_PER_BATCH)
        try:
            assert (await (await producer.send(TOPIC, b"v", partition=0))).offset == 0
            assert producer.producer_id_and_epoch == (1000, 0)
        finally:
            await producer.close()
        cluster.init_failures.append(E.UNSUPPORTED_VERSION)  # a broker without InitProducerId
        stopped = AsyncProducer(cluster.bootstrap, **ONE_PER_BATCH)
        try:
            future = await stopped.send(TOPIC, b"v", partition=0)
            with pytest.raises(ProducerError) as failed:
                await future
            assert failed.value.code == "UNSUPPORTED_VERSION" and "InitProducerId" in failed.value.message
            with pytest.raises(ProducerError, match="InitProducerId"):
                await stopped.send(TOPIC, b"w", partition=0)
        finally:
            await stopped.close()
        assert cluster.logs[0].end == 1

    run(scenario)


def test_without_idempotence_one_batch_is_in_flight_and_a_lost_answer_writes_twice() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        release = cluster.hold_answers()
        producer = AsyncProducer(cluster.bootstrap, enable_idempotence=False, **ONE_PER_BATCH)
        try:
            futures = await send_all(producer, [b"v%d" % i for i in range(3)])
            while cluster.in_flight[0] < 1:
                await asyncio.sleep(0.001)
            assert producer._in_flight[P0] == 1 and len(producer._batches[P0]) == 2
            cluster.lose_next_answers(0, E.REQUEST_TIMED_OUT)
            release.set()
            await producer.flush()
            offsets = [(await f).offset for f in futures]
        finally:
            release.set()
            await producer.close()
        assert numbering(cluster)[0] == (-1, -1), "no producer id"
        assert await values_in(cluster, 0) == [b"v0", b"v1", b"v1", b"v2"]
        assert offsets == [0, 2, 3]

    run(scenario)


def test_idempotence_is_on_by_default_with_acks_all_only() -> None:
    async def check() -> None:
        default, acks_one = AsyncProducer("127.0.0.1:1"), AsyncProducer("127.0.0.1:1", acks=1)
        assert default.idempotent
        assert not acks_one.idempotent, "Kafka 3.x: off when acks is set otherwise"
        for producer in (default, acks_one):
            await producer.close()
        with pytest.raises(ValueError, match="enable_idempotence: needs acks=all"):
            AsyncProducer("127.0.0.1:1", acks=0, enable_idempotence=True)

    asyncio.run(check())


def test_against_a_real_broker_batches_carry_the_producer_id_and_consecutive_sequences(
    tmp_path: Path,
) -> None:
    async def scenario(address: str) -> None:
        producer = AsyncProducer(address, **ONE_PER_BATCH)
        try:
            futures = [await producer.send("t", b"v%d" % i, partition=1) for i in range(4)]
            await producer.flush()
            assert [(await f).offset for f in futures] == [0, 1, 2, 3]
            producer_id, epoch = producer.producer_id_and_epoch
            assert (producer_id, epoch) == (0, 0), "the broker's first id from its first block"
        finally:
            await producer.close()

    async def main() -> None:
        async with serving(tmp_path) as address:
            await scenario(address)

    asyncio.run(main())
