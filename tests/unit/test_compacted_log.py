"""Reading compacted logs: offsets grow but skip what the cleaner removed, inside a segment
and between segments. The logs here are written the way a cleaned log holds its batches
(each at its original base offset, gaps between them), through a follower's append, which
keeps the leader's offsets as Kafka's does. Reads from an offset compacted away start at
the next batch; ListOffsets and OffsetForLeaderEpoch answer as on a log without gaps;
reopening keeps the segments after a gap; a consumer's position moves across gaps; and
``raftka log dump`` names each gap. A raftka producer's record without a key is refused
there."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import crc32c
import pytest

from raftka.broker.log.config import LogConfig
from raftka.broker.log.index import RELATIVE_OFFSET_MAX
from raftka.broker.log.partition_log import LogAppendError, PartitionLog
from raftka.cli.main import main
from raftka.client.consumer import AsyncConsumer
from raftka.client.errors import ProducerError
from raftka.client.producer import AsyncProducer
from raftka.client.types import TopicPartition
from raftka.records.batch import CRC_START, HEADER_SIZE, assign
from raftka.records.codec import BatchBuilder, read_records
from tests.unit.broker_in_process import broker_in_process

TOPIC_ID = uuid.UUID(int=3).bytes
NOW = 1_700_000_000_000


def batch_at(base_offset: int, *keys: bytes, epoch: int = 0, timestamp: int = NOW) -> bytes:
    """One batch of records ``key -> key.upper()`` at ``base_offset``, as a leader stored it."""
    builder = BatchBuilder()
    for key in keys:
        assert builder.append(timestamp, key, key.upper())
    payload = bytearray(builder.build())
    assign(payload, 0, base_offset, epoch)
    return bytes(payload)


# (base offset, keys, epoch, timestamp): gaps at 2..4, 6..9 and 12..19
CLEANED = [
    (0, (b"a", b"b"), 0, NOW),
    (5, (b"c",), 0, NOW + 10),
    (10, (b"d", b"e"), 1, NOW + 20),
    (20, (b"f",), 2, NOW + 30),
]
OFFSETS = [0, 1, 5, 10, 11, 20]


def cleaned_log(path: Path, segment_bytes: int = 1 << 30, index_interval_bytes: int = 4096) -> PartitionLog:
    log = PartitionLog.open(
        path,
        TOPIC_ID,
        LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes),
        clean_shutdown=True,
        recovery_point=0,
    )
    for base, keys, epoch, timestamp in CLEANED:
        log.append_as_follower(batch_at(base, *keys, epoch=epoch, timestamp=timestamp))
    return log


def first_offset_read(log: PartitionLog, offset: int) -> int | None:
    records = list(read_records(log.read(offset, 1 << 20).records))
    return records[0].offset if records else None


@pytest.mark.parametrize(
    ("segment_bytes", "index_interval_bytes"),
    [(1 << 30, 4096), (1 << 30, 1), (1, 4096), (1, 1)],
    ids=["one-segment-unindexed", "one-segment-indexed", "segment-per-batch", "segment-per-batch-indexed"],
)
def test_a_read_from_an_offset_compacted_away_starts_at_the_next_batch(
    tmp_path: Path, segment_bytes: int, index_interval_bytes: int
) -> None:
    log = cleaned_log(tmp_path, segment_bytes, index_interval_bytes)
    assert log.log_end_offset == 21
    for offset in range(21):
        batch_start = max(b for b, *_ in CLEANED if b <= offset)
        batch_last = batch_start + len(next(keys for b, keys, *_ in CLEANED if b == batch_start)) - 1
        holding = batch_start if offset <= batch_last else min(b for b, *_ in CLEANED if b > offset)
        assert first_offset_read(log, offset) == holding, offset
    assert first_offset_read(log, 21) is None


def test_a_follower_takes_batches_that_skip_offsets_but_never_one_that_goes_back(tmp_path: Path) -> None:
    log = cleaned_log(tmp_path)
    assert log.end_offset_for_epoch(0) == (0, 10) and log.end_offset_for_epoch(2) == (2, 21)
    for payload in (
        batch_at(20, b"x"),  # below the log end (21)
        batch_at(30, b"x") + batch_at(25, b"y"),  # the second goes back
        batch_at(30, b"x", b"y") + batch_at(31, b"z"),  # the second overlaps the first
    ):
        with pytest.raises(LogAppendError, match="does not continue the log"):
            log.append_as_follower(payload)
        assert log.log_end_offset == 21, "nothing written"
    log.append_as_follower(batch_at(21, b"g") + batch_at(40, b"h"))
    assert log.log_end_offset == 41 and first_offset_read(log, 22) == 40


@pytest.mark.parametrize("clean", [True, False])
def test_reopening_keeps_the_segments_after_a_gap(tmp_path: Path, clean: bool) -> None:
    log = cleaned_log(tmp_path, segment_bytes=1)
    bases = [s.base_offset for s in log.segments]
    assert bases == [0, 2, 6, 12], "a follower rolls at its own log end, before the gap"
    log.close()
    for suffix in (
        ".log",
        ".index",
        ".timeindex",
    ):  # the cleaner emptied segment 6: a gap 6..19 between segments
        (tmp_path / f"{6:020d}{suffix}").write_bytes(b"")
    reopened = PartitionLog.open(
        tmp_path, TOPIC_ID, LogConfig(segment_bytes=1), clean_shutdown=clean, recovery_point=0
    )
    assert [s.base_offset for s in reopened.segments] == bases
    assert reopened.log_end_offset == 21
    assert [first_offset_read(reopened, o) for o in (2, 6, 10, 12)] == [5, 20, 20, 20]


def test_a_segment_cut_by_recovery_still_ends_the_log(tmp_path: Path) -> None:
    log = cleaned_log(tmp_path, segment_bytes=1)
    log.close()
    first = tmp_path / f"{0:020d}.log"
    first.write_bytes(first.read_bytes()[:-5])  # its only batch torn
    reopened = PartitionLog.open(
        tmp_path, TOPIC_ID, LogConfig(segment_bytes=1), clean_shutdown=False, recovery_point=0
    )
    assert [s.base_offset for s in reopened.segments] == [0] and reopened.log_end_offset == 0


def test_list_offsets_and_epoch_ends_on_a_log_with_gaps(tmp_path: Path) -> None:
    log = cleaned_log(tmp_path, segment_bytes=1, index_interval_bytes=1)
    assert log.log_start_offset == 0 and log.log_end_offset == 21
    assert log.offset_for_timestamp(NOW + 1) == (5, NOW + 10), "the next record at or after the time"
    assert log.offset_for_timestamp(NOW + 20) == (10, NOW + 20)
    assert log.offset_for_timestamp(NOW + 31) is None
    assert log.max_timestamp_record() == (20, NOW + 30)
    assert log.end_offset_for_epoch(0) == (0, 10)
    assert log.end_offset_for_epoch(1) == (1, 20)
    assert log.end_offset_for_epoch(5) == (2, 21)


def emptied(batch: bytes) -> bytes:
    """``batch`` with its records removed but its header kept (offsets, max timestamp): what
    Kafka's cleaner leaves of a producer's last batch to keep its producer state."""
    header = bytearray(batch[:HEADER_SIZE])
    header[8:12] = (HEADER_SIZE - 12).to_bytes(4, "big")  # batchLength
    header[57:61] = (0).to_bytes(4, "big")  # record count
    header[17:21] = crc32c.crc32c(bytes(header[CRC_START:])).to_bytes(4, "big")
    return bytes(header)


def test_a_lookup_by_time_reads_past_a_batch_emptied_by_the_cleaner(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path, TOPIC_ID, LogConfig(), clean_shutdown=True, recovery_point=0)
    log.append_as_follower(
        batch_at(0, b"a", timestamp=NOW)
        + emptied(batch_at(1, b"b", b"c", timestamp=NOW + 50))
        + batch_at(3, b"d", timestamp=NOW + 40)
    )
    assert log.offset_for_timestamp(NOW + 30) == (3, NOW + 40)
    assert first_offset_read(log, 1) == 3 and log.log_end_offset == 4


def test_a_gap_wider_than_a_segment_can_index_rolls_at_the_batch(tmp_path: Path) -> None:
    log = cleaned_log(tmp_path)
    far = 20 + RELATIVE_OFFSET_MAX + 10
    log.append_as_follower(batch_at(far, b"z"))
    assert [s.base_offset for s in log.segments] == [0, far]
    assert first_offset_read(log, 21) == far and log.log_end_offset == far + 1
    log.close()
    reopened = PartitionLog.open(tmp_path, TOPIC_ID, LogConfig(), clean_shutdown=False, recovery_point=0)
    assert reopened.log_end_offset == far + 1 and first_offset_read(reopened, 21) == far


def test_log_dump_names_each_gap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "t-0"
    cleaned_log(folder, segment_bytes=1).close()
    assert main(["log", "dump", str(folder)]) == 0
    gaps = [line for line in capsys.readouterr().out.splitlines() if line.startswith("gap:")]
    assert gaps == [
        "gap: offsets 2..4 compacted away (3 offsets)",
        "gap: offsets 6..9 compacted away (4 offsets)",
        "gap: offsets 12..19 compacted away (8 offsets)",
    ]
    assert main(["log", "dump", str(folder / f"{12:020d}.log"), "--output", "json"]) == 0
    entries = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["type"], e.get("first_offset"), e.get("last_offset")) for e in entries] == [
        ("gap", 12, 19),
        ("batch", None, 20),
    ]


def test_a_consumer_reads_through_the_gaps_and_a_keyless_produce_over_the_data_listener_is_refused(
    tmp_path: Path,
) -> None:
    topic = "table-changelog"
    topic_id = uuid.uuid5(uuid.NAMESPACE_OID, topic).bytes  # the in-process broker's id for it
    log = cleaned_log(tmp_path / f"{topic}-0")
    log.append_as_follower(emptied(batch_at(21, b"x", b"y")) + batch_at(25, b"g"))
    log.topic_id = topic_id
    log.close()
    (tmp_path / f"{topic}-0" / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id.hex()}\n")

    async def scenario() -> None:
        async with broker_in_process(tmp_path, {topic: 1}, {topic: {"cleanup.policy": "compact"}}) as broker:
            consumer = AsyncConsumer(broker.address, auto_offset_reset="earliest", fetch_max_wait_ms=50)
            tp = TopicPartition(topic, 0)
            try:
                await consumer.assign([tp])
                got = []
                while len(got) < len(OFFSETS) + 1:
                    got += await consumer.poll(2000, 100)
                assert [(r.offset, r.key, r.value) for r in got] == [
                    (o, k, k.upper())
                    for o, k in zip([*OFFSETS, 25], b"abcdefg", strict=True)
                    for k in [bytes([k])]
                ]
                assert await consumer.position(tp) == 26
                consumer.seek(tp, 13)
                again = []
                while len(again) < 2:
                    again += await consumer.poll(2000, 100)
                assert [r.offset for r in again] == [20, 25] and await consumer.position(tp) == 26
            finally:
                await consumer.close()
            producer = AsyncProducer(broker.address)  # over the data listener
            try:
                with pytest.raises(ProducerError) as refused:
                    await asyncio.wait_for(await producer.send(topic, b"v", partition=0), 10)
                assert refused.value.code == "INVALID_RECORD" and "has no key" in refused.value.message
                assert (await (await producer.send(topic, b"v", key=b"k", partition=0))).offset == 26
            finally:
                await producer.close()

    asyncio.run(scenario())
