"""Producer and Consumer when brokers move leadership, refuse, vanish or send records that
do not decode: against fake brokers (``fake_brokers``) that the test steers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from raftka.client.consumer import AsyncConsumer
from raftka.client.errors import ConsumerError, LogTruncationError, ProducerError
from raftka.client.producer import AsyncProducer
from raftka.client.types import TopicPartition
from raftka.records.batch import HEADER_SIZE
from raftka.records.codec import BatchBuilder
from raftka.v1 import controller_pb2
from tests.unit.compressed_batches import FRAMINGS, compressed_batch
from tests.unit.fake_brokers import TOPIC, FakeCluster, FakeLog

E = controller_pb2.ErrorCode
P0 = TopicPartition(TOPIC, 0)


def run(scenario: Callable[[FakeCluster], Awaitable[None]]) -> None:
    async def main() -> None:
        cluster = await FakeCluster().start()
        try:
            await asyncio.wait_for(scenario(cluster), 30)
        finally:
            await cluster.close()

    asyncio.run(main())


async def values_in(cluster: FakeCluster, partition: int) -> list[bytes]:
    consumer = AsyncConsumer(cluster.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=10)
    try:
        await consumer.assign([TopicPartition(TOPIC, partition)])
        got: list[bytes] = []
        while len(got) < cluster.logs[partition].end:
            got += [r.value for r in await consumer.poll(1000)]
        return got
    finally:
        await consumer.close()


def test_a_producer_follows_a_moved_leader_and_keeps_the_partitions_order() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        producer = AsyncProducer(cluster.bootstrap, linger_ms=0, retry_backoff_ms=10)
        try:
            first = [await producer.send(TOPIC, b"a%d" % i, partition=0) for i in range(5)]
            await producer.flush()
            cluster.move_leader(0, to=2)  # the producer still thinks broker 1 leads
            second = [await producer.send(TOPIC, b"b%d" % i, partition=0) for i in range(5)]
            await producer.flush()
            offsets = [(await f).offset for f in first + second]
        finally:
            await producer.close()
        assert offsets == list(range(10))
        asked = [broker for broker, partition in cluster.produced if partition == 0]
        moved = asked.index(2)
        assert asked[moved - 1] == 1 and set(asked[moved:]) == {2}  # refused by 1 once, then only 2
        assert await values_in(cluster, 0) == [b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(5)]

    run(scenario)


def test_retriable_refusals_are_retried_and_later_records_wait_their_turn() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        cluster.fail_next_produces(0, E.NOT_ENOUGH_REPLICAS, times=3)
        producer = AsyncProducer(cluster.bootstrap, linger_ms=0, retry_backoff_ms=10, batch_size=100)
        try:
            futures = [await producer.send(TOPIC, b"r%d" % i, partition=0) for i in range(6)]
            await producer.flush()
            assert [(await f).offset for f in futures] == list(range(6))
        finally:
            await producer.close()
        assert await values_in(cluster, 0) == [b"r%d" % i for i in range(6)]

    run(scenario)


def test_a_batch_refused_until_its_delivery_timeout_fails_naming_the_last_refusal() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        cluster.fail_next_produces(1, E.NOT_ENOUGH_REPLICAS, times=10_000)
        producer = AsyncProducer(cluster.bootstrap, linger_ms=0, retry_backoff_ms=20, delivery_timeout_ms=300)
        try:
            future = await producer.send(TOPIC, b"never", partition=1)
            other = await producer.send(TOPIC, b"fine", partition=0)
            with pytest.raises(ProducerError) as failed:
                await future
            assert failed.value.code == "REQUEST_TIMED_OUT"
            assert (
                "NOT_ENOUGH_REPLICAS" in failed.value.message
                and "delivery_timeout_ms" in failed.value.message
            )
            assert (await other).offset == 0, "another partition is not held up"
            assert (producer.acknowledged_records, producer.failed_records) == (1, 1)
        finally:
            await producer.close()

    run(scenario)


def test_with_acks_zero_a_refusal_closes_the_connection_and_the_producer_finds_the_new_leader() -> None:
    """Kafka's acks=0: nothing is answered, so a broker that refuses closes the connection;
    records sent into the refusal are lost (what acks=0 allows), later ones reach the new
    leader in order."""

    async def scenario(cluster: FakeCluster) -> None:
        producer = AsyncProducer(cluster.bootstrap, acks=0, linger_ms=0, retry_backoff_ms=10)

        async def send(value: bytes) -> None:
            await producer.send(TOPIC, value, partition=0)
            await producer.flush()  # acks=0: written to the socket, not yet taken by the broker

        try:
            await send(b"before")
            await landed_beyond(cluster, 0)
            cluster.move_leader(0, to=2)
            sent = 0
            while (2, 0) not in cluster.produced:  # until the producer found the new leader by itself
                await send(b"after%d" % sent)
                sent += 1
            end = cluster.logs[0].end
            await send(b"last")
            await landed_beyond(cluster, end)
        finally:
            await producer.close()
        landed = await values_in(cluster, 0)
        assert landed[0] == b"before" and landed[-1] == b"last"
        after = [int(v.removeprefix(b"after")) for v in landed[1:-1]]
        assert after == sorted(after), "what reached the new leader is in send order"

    run(scenario)


async def landed_beyond(cluster: FakeCluster, end: int) -> None:
    """Until the partition's log holds more than ``end`` records (acks=0 tells nothing)."""
    while cluster.logs[0].end <= end:
        await asyncio.sleep(0.005)


def test_close_fails_what_cannot_be_delivered_with_a_clear_error() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        cluster.fail_next_produces(0, E.NOT_LEADER_OR_FOLLOWER, times=10_000)
        producer = AsyncProducer(cluster.bootstrap, linger_ms=0, retry_backoff_ms=20)
        future = await producer.send(TOPIC, b"stuck", partition=0)
        await producer.close(timeout_s=0.2)
        with pytest.raises(ProducerError) as failed:
            await future
        assert failed.value.code == "PRODUCER_CLOSED" and str(P0) in failed.value.message
        with pytest.raises(ProducerError, match="send after close"):
            await producer.send(TOPIC, b"late", partition=0)

    run(scenario)


def test_a_consumer_follows_a_moved_leader_without_gaps_or_repeats() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        for i in range(3):
            cluster.logs[0].append(bytes(_batch(b"v%d" % i)))
        consumer = AsyncConsumer(cluster.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=10)
        try:
            await consumer.assign([P0])
            got = await _poll_until(consumer, 3)
            cluster.move_leader(0, to=2)
            for i in range(3, 6):
                cluster.logs[0].append(bytes(_batch(b"v%d" % i)))
            got += await _poll_until(consumer, 3)
        finally:
            await consumer.close()
        assert [(r.offset, r.value) for r in got] == [(i, b"v%d" % i) for i in range(6)]
        assert (1, 0) in cluster.fetched and (2, 0) in cluster.fetched

    run(scenario)


def test_a_consumer_retries_the_latest_offset_while_a_new_leader_answers_offset_not_available() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        cluster.logs[0].append(bytes(_batch(b"a", b"b", b"c")))
        cluster.fail_next_list_offsets(0, E.OFFSET_NOT_AVAILABLE, times=2)
        consumer = AsyncConsumer(cluster.bootstrap, auto_offset_reset="latest")
        try:
            await consumer.assign([P0])
            assert await consumer.position(P0) == 3
        finally:
            await consumer.close()
        assert not cluster.list_offsets_failures[0], "both refusals were answered and retried"

    run(scenario)


def test_records_that_do_not_decode_are_an_error_after_those_before_them() -> None:
    """As Kafka's consumer: poll returns what decoded, the next poll raises, and so does
    every poll until the application seeks past the damage."""

    async def scenario(cluster: FakeCluster) -> None:
        cluster.logs[0].append(bytes(_batch(b"good0", b"good1")))
        damaged = _batch(b"bad")
        damaged[HEADER_SIZE] = 0x7F  # the first record's length varint: far past the batch's end
        cluster.logs[0].append(bytes(damaged))
        cluster.logs[0].append(bytes(_batch(b"after")))
        consumer = AsyncConsumer(cluster.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=10)
        try:
            await consumer.assign([P0])
            first = await _poll_until(consumer, 2)
            assert [r.value for r in first] == [b"good0", b"good1"]
            for _ in range(2):
                with pytest.raises(ConsumerError) as err:
                    await _poll_until(consumer, 1)
                assert err.value.code == "CORRUPT_MESSAGE" and "offset 2" in err.value.message
            assert await consumer.position(P0) == 2
            consumer.seek(P0, 3)
            assert [r.value for r in await _poll_until(consumer, 1)] == [b"after"]
        finally:
            await consumer.close()

    run(scenario)


@pytest.mark.parametrize("framing", ["gzip", "snappy-xerial", "lz4", "zstd"])
def test_a_decompression_bomb_a_broker_serves_is_an_error_naming_partition_and_offset(framing: str) -> None:
    """A broker (hostile, corrupt, or with a larger bound of its own) serves 16 MiB of
    zeros compressed into a few KB: the consumer decompresses no more than its
    ``uncompressed_batch_bytes_max``, returns what came before, raises CORRUPT_MESSAGE
    naming the partition, the offset and the bound until the application seeks past it."""
    codec, compress = FRAMINGS[framing]

    async def scenario(cluster: FakeCluster) -> None:
        cluster.logs[0].append(bytes(_batch(b"before")))
        cluster.logs[0].append(compressed_batch([bytes(16 << 20)], codec, compress))
        cluster.logs[0].append(compressed_batch([b"after"], codec, compress))  # within the bound
        consumer = AsyncConsumer(
            cluster.bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=10,
            uncompressed_batch_bytes_max=1 << 20,
        )
        try:
            await consumer.assign([P0])
            assert [r.value for r in await _poll_until(consumer, 1)] == [b"before"]
            with pytest.raises(ConsumerError) as err:
                await _poll_until(consumer, 1)
            message = err.value.message
            assert err.value.code == "CORRUPT_MESSAGE"
            assert f"{P0} at offset 1" in message and f"more than {1 << 20}" in message, message
            assert "uncompressed_batch_bytes_max" in message
            consumer.seek(P0, 2)
            assert [r.value for r in await _poll_until(consumer, 1)] == [b"after"]
        finally:
            await consumer.close()

    run(scenario)


def test_a_consumer_bound_below_one_byte_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="^uncompressed_batch_bytes_max: must be 1 or more, got 0"):
        AsyncConsumer("127.0.0.1:1", uncompressed_batch_bytes_max=0)


def _unclean_leader_change(cluster: FakeCluster) -> None:
    """Broker 2 leads at epoch 1 holding only offset 0 of epoch 0: v1 and v2, which a
    consumer may have read, are gone, and w1, w2, w3 take offsets 1 to 3."""
    cluster.move_leader(0, to=2)
    cluster.logs[0].truncate_to(1)
    for value in (b"w1", b"w2", b"w3"):
        cluster.logs[0].append(bytes(_batch(value)), leader_epoch=1)


async def _poll_through(consumer: AsyncConsumer, offset: int) -> list:
    """Records until one at ``offset`` or past it arrives."""
    got: list = []
    while not got or got[-1].offset < offset:
        got += await consumer.poll(1000)
    return got


def test_a_consumer_whose_records_a_leader_change_cut_goes_back_to_where_its_epoch_ends() -> None:
    """KIP-320: blind, the consumer would fetch on at 3 and never see w1, w2; it sends the
    epoch it last read (0), is told epoch 0 ends at 1, and reads on from there."""

    async def scenario(cluster: FakeCluster) -> None:
        for value in (b"v0", b"v1", b"v2"):
            cluster.logs[0].append(bytes(_batch(value)))
        consumer = AsyncConsumer(cluster.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=10)
        try:
            await consumer.assign([P0])
            assert [r.value for r in await _poll_until(consumer, 3)] == [b"v0", b"v1", b"v2"]
            _unclean_leader_change(cluster)
            after = await _poll_through(consumer, 3)
            assert [(r.offset, r.value) for r in after] == [(1, b"w1"), (2, b"w2"), (3, b"w3")]
            assert await consumer.position(P0) == 4
        finally:
            await consumer.close()

    run(scenario)


def test_with_no_offset_reset_a_cut_log_raises_log_truncation_until_the_application_seeks() -> None:
    """As Kafka's LogTruncationException: the partition and the first offset known to
    diverge are named, the position stays, and the application decides."""

    async def scenario(cluster: FakeCluster) -> None:
        for value in (b"v0", b"v1", b"v2"):
            cluster.logs[0].append(bytes(_batch(value)))
        consumer = AsyncConsumer(cluster.bootstrap, auto_offset_reset="none", fetch_max_wait_ms=10)
        try:
            await consumer.assign([P0])
            consumer.seek(P0, 0)
            await _poll_until(consumer, 3)
            _unclean_leader_change(cluster)
            for _ in range(2):
                with pytest.raises(LogTruncationError) as err:
                    await _poll_until(consumer, 1)
                assert err.value.divergent_offsets == {P0: 1}
            assert await consumer.position(P0) == 3
            consumer.seek(P0, err.value.divergent_offsets[P0])
            assert [r.value for r in await _poll_until(consumer, 3)] == [b"w1", b"w2", b"w3"]
        finally:
            await consumer.close()

    run(scenario)


def _batch(*values: bytes) -> bytearray:
    builder = BatchBuilder()
    for value in values:
        builder.append(1_700_000_000_000, None, value)
    return builder.build()


async def _poll_until(consumer: AsyncConsumer, count: int) -> list:
    got: list = []
    while len(got) < count:
        got += await consumer.poll(1000)
    return got


def test_a_partition_added_after_the_consumers_metadata_is_found_by_refreshing() -> None:
    """A group can hand a member a partition its metadata has not seen yet (the topic grew);
    the consumer refreshes and lists its offset rather than failing at once."""

    async def scenario(cluster: FakeCluster) -> None:
        consumer = AsyncConsumer(cluster.bootstrap, auto_offset_reset="earliest")
        try:
            await consumer.assign([P0])
            assert await consumer.position(P0) == 0
            cluster.leaders[2] = (cluster.broker_ids[1], 0)
            cluster.logs[2] = FakeLog()
            cluster.logs[2].append(bytes(_batch(b"a")))
            grown = TopicPartition(TOPIC, 2)
            await consumer.assign([P0, grown])
            assert await consumer.position(grown) == 0
        finally:
            await consumer.close()

    run(scenario)
