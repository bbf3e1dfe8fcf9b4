"""Partition logs on disk: append and read across segments, indexes, roll, retention,
recovery of a torn tail, a corrupt batch and a stale index, the epoch cache, flushing,
removal. Kafka's LogSegmentTest, OffsetIndexTest and LogLoaderTest are the list."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from raftka.broker.log import checkpoint
from raftka.broker.log.config import LogConfig
from raftka.broker.log.flusher import BackgroundFlusher
from raftka.broker.log.folder_names import DELETE_SUFFIX
from raftka.broker.log.manager import CLEAN_SHUTDOWN_FILE, LogManager
from raftka.broker.log.partition_log import FlushJob, LogAppendError, OffsetOutOfRange, PartitionLog
from raftka.cli.main import main
from raftka.records.batch import CRC_START, iter_batches
from raftka.records.codec import BatchBuilder, read_records
from raftka.records.validation import BatchLimits, validate_batches

TOPIC_ID = uuid.UUID(int=1).bytes
NOW = 1_700_000_000_000


def batch(*values: bytes, timestamp: int = NOW) -> bytes:
    builder = BatchBuilder()
    for value in values:
        assert builder.append(timestamp, None, value)
    return bytes(builder.build())


def append(log: PartitionLog, *values: bytes, epoch: int = 0, timestamp: int = NOW) -> None:
    validated = validate_batches(batch(*values, timestamp=timestamp), BatchLimits(1 << 20), now_ms=timestamp)
    log.append_as_leader(validated.payload, validated.batches, epoch, timestamp)


def open_log(path: Path, clean: bool = True, recovery_point: int = 0, **config: int) -> PartitionLog:
    return PartitionLog.open(
        path, TOPIC_ID, LogConfig(**config), clean_shutdown=clean, recovery_point=recovery_point
    )


class QueuedFlushes:
    """A log's background that keeps flush jobs for the test to run, and runs other work at once."""

    def __init__(self) -> None:
        self.jobs: list[FlushJob] = []

    def flush(self, partition_log: PartitionLog, job: FlushJob) -> None:
        self.jobs.append(job)

    def submit(self, work: Callable[[], None], what: str) -> None:
        work()


def values(log: PartitionLog, start: int = 0) -> list[bytes]:
    """Every value from ``start``: a read answers from one segment, so read on (as a fetcher does)."""
    found: list[bytes] = []
    while start < log.log_end_offset:
        records = list(read_records(log.read(start, 1 << 30).records))
        found += [r.value for r in records]
        start = records[-1].offset + 1
    return found


def test_appends_get_consecutive_offsets_and_read_back_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300, index_interval_bytes=1)
    for i in range(20):
        append(log, b"v%02d" % i)
    assert log.log_end_offset == 20 and len(log.segments) > 3
    assert values(log) == [b"v%02d" % i for i in range(20)]
    assert values(log, 13)[0] == b"v13"
    assert [r.offset for r in read_records(log.read(7, 1 << 20).records)][0] == 7


def test_a_read_stops_before_max_offset_and_keeps_the_first_batch_whole(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, b"a", b"b")
    append(log, b"c")
    assert values(log) == [b"a", b"b", b"c"]
    assert [r.value for r in read_records(log.read(0, 1 << 20, max_offset=2).records)] == [b"a", b"b"]
    assert log.read(0, 1 << 20, max_offset=0).records == b""
    first = log.read(0, 1)  # smaller than one batch: the first batch still comes
    assert [r.value for r in read_records(first.records)] == [b"a", b"b"]
    assert log.read(0, 1, min_one_batch=False).records == b""
    assert log.read(3, 1 << 20).records == b""
    with pytest.raises(OffsetOutOfRange):
        log.read(4, 100)


def test_rolls_on_segment_ms(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_ms=1000)
    append(log, b"a", timestamp=NOW)
    append(log, b"b", timestamp=NOW + 500)
    assert len(log.segments) == 1
    append(log, b"c", timestamp=NOW + 1000)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_retention_by_bytes_and_by_time_deletes_whole_inactive_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200, retention_bytes=400)
    for i in range(12):
        append(log, b"x" * 50, timestamp=NOW + i)
    before = len(log.segments)
    assert log.delete_old_segments(NOW, log.log_end_offset) > 0
    assert log.size_in_bytes <= 400 + 200 and len(log.segments) < before
    assert log.log_start_offset == log.segments[0].base_offset > 0
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    timed = open_log(tmp_path / "timed", segment_bytes=200, retention_ms=1000)
    for i in range(6):
        append(timed, b"y" * 50, timestamp=NOW + i)
    timed.delete_old_segments(NOW + 1_000_000, timed.log_end_offset)
    assert len(timed.segments) == 1, "the active segment is never deleted"
    assert values(timed, timed.log_start_offset)


def test_retention_deletes_only_segments_below_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=100, retention_bytes=0, retention_ms=0)
    for i in range(5):
        append(log, b"v%d" % i)
    assert [s.base_offset for s in log.segments] == [0, 1, 2, 3, 4]
    assert log.delete_old_segments(NOW + 1_000, high_watermark=0) == 0
    assert log.delete_old_segments(NOW + 1_000, high_watermark=2) == 2
    assert log.log_start_offset == 2 and values(log, 2) == [b"v2", b"v3", b"v4"]
    assert log.delete_old_segments(NOW + 1_000, high_watermark=log.log_end_offset) == 2
    assert log.log_start_offset == 4, "the active segment stays"


def test_the_cleanup_policy_and_compaction_settings_reach_the_log_config() -> None:
    default = LogConfig.from_topic_configs({})
    assert (default.delete, default.compact) == (True, False)
    assert (default.min_cleanable_dirty_ratio, default.min_compaction_lag_ms) == (0.5, 0)
    assert (default.max_compaction_lag_ms, default.delete_retention_ms) == (2**63 - 1, 86_400_000)
    compacted = LogConfig.from_topic_configs(
        {
            "cleanup.policy": "compact",
            "min.cleanable.dirty.ratio": "0.1",
            "min.compaction.lag.ms": "5",
            "max.compaction.lag.ms": "60000",
            "delete.retention.ms": "1000",
        }
    )
    assert (compacted.delete, compacted.compact) == (False, True)
    assert compacted.min_cleanable_dirty_ratio == 0.1
    assert (compacted.min_compaction_lag_ms, compacted.max_compaction_lag_ms) == (5, 60000)
    assert compacted.delete_retention_ms == 1000
    both = LogConfig.from_topic_configs({"cleanup.policy": "compact,delete"})
    assert (both.delete, both.compact) == (True, True)


@pytest.mark.parametrize(
    ("policy", "deletes"), [("compact", False), ("compact,delete", True), ("delete", True)]
)
def test_retention_runs_only_when_the_cleanup_policy_has_delete(
    tmp_path: Path, policy: str, deletes: bool
) -> None:
    config = LogConfig.from_topic_configs(
        {"cleanup.policy": policy, "retention.ms": "0", "segment.bytes": "1024"}
    )
    log = PartitionLog.open(tmp_path, TOPIC_ID, config, clean_shutdown=True, recovery_point=0)
    for i in range(5):
        append(log, b"v" * 400, timestamp=NOW + i)
    segments = len(log.segments)
    assert segments > 1
    deleted = log.delete_old_segments(NOW + 1_000, log.log_end_offset)
    assert (deleted > 0) == deletes
    assert log.log_start_offset == (log.segments[0].base_offset if deletes else 0)
    log.update_config(LogConfig.from_topic_configs({"cleanup.policy": "compact,delete", "retention.ms": "0"}))
    assert log.delete_old_segments(NOW + 1_000, log.log_end_offset) == (0 if deletes else segments - 1), (
        "a live change of the policy applies at the next retention pass"
    )


def test_a_torn_tail_is_cut_at_the_last_whole_batch_and_appends_continue(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, b"a")
    append(log, b"b")
    log.close()
    segment = tmp_path / f"{0:020d}.log"
    whole = segment.read_bytes()
    segment.write_bytes(whole + batch(b"torn")[:30])
    reopened = open_log(tmp_path, clean=False)
    assert reopened.log_end_offset == 2 and segment.stat().st_size == len(whole)
    append(reopened, b"c")
    assert values(reopened) == [b"a", b"b", b"c"]


def test_a_corrupt_batch_mid_segment_truncates_from_there(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for v in (b"a", b"b", b"c"):
        append(log, v)
    log.close()
    segment = tmp_path / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    second = [pos for pos, _ in iter_batches(data)][1]
    data[second + CRC_START + 3] ^= 0xFF
    segment.write_bytes(bytes(data))
    reopened = open_log(tmp_path, clean=False)
    assert values(reopened) == [b"a"] and reopened.log_end_offset == 1


@pytest.mark.parametrize("damage", ["deleted", "garbled"])
def test_an_index_that_does_not_fit_its_log_is_rebuilt(tmp_path: Path, damage: str) -> None:
    log = open_log(tmp_path, index_interval_bytes=1)
    for i in range(10):
        append(log, b"v%d" % i)
    log.close()
    index = tmp_path / f"{0:020d}.index"
    if damage == "deleted":
        index.unlink()
    else:
        index.write_bytes(b"\x00\x00\x00\x09\x7f\xff\xff\xff" * 3)
    reopened = open_log(tmp_path, clean=True, index_interval_bytes=1)
    assert reopened.log_end_offset == 10
    assert values(reopened, 6)[0] == b"v6"
    assert len(reopened.active.offset_index) == 10


def test_follower_appends_must_continue_the_log(tmp_path: Path) -> None:
    leader, follower = open_log(tmp_path / "l"), open_log(tmp_path / "f")
    append(leader, b"a", b"b", epoch=3)
    follower.append_as_follower(leader.read(0, 1 << 20).records)
    assert values(follower) == [b"a", b"b"] and follower.latest_epoch == 3
    with pytest.raises(LogAppendError):
        follower.append_as_follower(leader.read(0, 1 << 20).records)  # starts at 0, the log ends at 2
    assert follower.log_end_offset == 2


def test_the_epoch_cache_answers_end_offsets_and_follows_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    append(log, b"a", epoch=1)
    append(log, b"b", epoch=1)
    append(log, b"c", epoch=3)
    append(log, b"d", epoch=5)
    assert log.end_offset_for_epoch(0) == (-1, -1)
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)
    assert log.end_offset_for_epoch(3) == (3, 3)
    assert log.end_offset_for_epoch(9) == (5, 4)
    log.truncate_to(3)
    assert log.latest_epoch == 3 and log.log_end_offset == 3
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.end_offset_for_epoch(5) == (3, 3), "the checkpoint file keeps the cache"


def test_offset_for_timestamp_finds_the_first_record_at_or_after(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=1)
    for i in range(5):
        append(log, b"v%d" % i, timestamp=NOW + 10 * i)
    assert log.offset_for_timestamp(NOW + 15) == (2, NOW + 20)
    assert log.offset_for_timestamp(NOW) == (0, NOW)
    assert log.offset_for_timestamp(NOW + 1000) is None


def test_flush_messages_one_fsyncs_each_append_before_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsynced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (fsynced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))
    )
    eager = open_log(tmp_path / "eager", flush_messages=1)
    append(eager, b"a")
    assert str(tmp_path / "eager" / f"{0:020d}.log") in fsynced, "fsynced before the append returns"
    assert eager.recovery_point == 1
    lazy = open_log(tmp_path / "lazy")
    append(lazy, b"a")
    assert str(tmp_path / "lazy" / f"{0:020d}.log") not in fsynced and lazy.recovery_point == 0
    lazy.roll()
    assert str(tmp_path / "lazy" / f"{0:020d}.log") in fsynced, "a roll fsyncs the segment it closes"


def test_a_rolled_segment_is_fsynced_in_the_background_and_only_then_counts_as_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsynced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (fsynced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))
    )
    background = QueuedFlushes()
    queued = background.jobs
    log = PartitionLog.open(
        tmp_path, TOPIC_ID, LogConfig(), clean_shutdown=True, recovery_point=0, background=background
    )
    append(log, b"a", b"b")
    log.roll()
    first = str(tmp_path / f"{0:020d}.log")
    assert first not in fsynced and log.recovery_point == 0 and len(queued) == 1, (
        "roll returned without an fsync"
    )
    append(log, b"c")
    queued[0].run()
    assert first in fsynced and log.recovery_point == 0, "on disk, but not counted until the log hears it"
    log.flushed(queued[0])
    assert log.recovery_point == 2

    append(log, b"d")
    log.roll()
    late = queued[-1]
    log.truncate_to(2)  # a follower cut below what the job covers: its data is gone
    append(log, b"new")
    late.run()
    log.flushed(late)
    assert log.recovery_point == 2, "a job from before a truncation moves nothing"


def test_a_job_runs_after_its_segment_was_deleted(tmp_path: Path) -> None:
    background = QueuedFlushes()
    queued = background.jobs
    log = PartitionLog.open(
        tmp_path,
        TOPIC_ID,
        LogConfig(retention_bytes=0),
        clean_shutdown=True,
        recovery_point=0,
        background=background,
    )
    append(log, b"a")
    log.roll()
    append(log, b"b")
    assert log.delete_old_segments(NOW, log.log_end_offset) == 1 and not (tmp_path / f"{0:020d}.log").exists()
    queued[0].run()  # fsyncs the deleted file through its duplicate descriptors; no error


def test_the_manager_syncs_rolls_and_checkpoints_on_its_flusher_thread(tmp_path: Path) -> None:
    async def scenario() -> None:
        manager = LogManager(tmp_path, BackgroundFlusher(asyncio.get_running_loop()))
        manager.open_all()
        log = manager.get_or_create("t", 0, TOPIC_ID, LogConfig())
        append(log, b"a", b"b")
        log.roll()
        while log.recovery_point < 2:
            await asyncio.sleep(0.01)
        manager.write_high_watermarks({"t-0": 2})
        manager.close()  # waits for the queued checkpoint, then declares a clean shutdown
        assert manager.read_high_watermarks() == {"t-0": 2}
        assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_the_manager_recovers_after_an_unclean_stop_and_removes_by_renaming(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    manager.open_all()
    log = manager.get_or_create("t", 0, TOPIC_ID, LogConfig())
    append(log, b"a")
    manager.write_high_watermarks({"t-0": 1})
    # no close(): an unclean stop; a torn write at the end
    segment = tmp_path / "t-0" / f"{0:020d}.log"
    segment.write_bytes(segment.read_bytes() + b"\x00" * 17)
    again = LogManager(tmp_path)
    again.open_all()  # recovered here, before the broker serves, not when the metadata claims it
    loaded = again.get("t-0")
    assert loaded is not None and values(loaded) == [b"a"] and again.read_high_watermarks() == {"t-0": 1}
    recovered = again.get_or_create("t", 0, TOPIC_ID, LogConfig(retention_ms=5))
    assert recovered is loaded and recovered.config.retention_ms == 5, "claimed with its topic's configs"
    other_topic = uuid.UUID(int=2).bytes
    replaced = again.get_or_create("t", 0, other_topic, LogConfig())
    assert replaced.log_end_offset == 0, "a folder of a deleted topic with the same name is replaced"
    again.remove("t-0")
    assert not (tmp_path / "t-0").exists() and not list(tmp_path.glob("*-delete"))
    again.close()
    assert (tmp_path / ".clean-shutdown").exists()


def test_log_dump_decodes_partition_segments_and_names_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, b"hello", b"world")
    log.close()
    assert main(["log", "dump", str(tmp_path / "t-0"), "--print-data"]) == 0
    text = capsys.readouterr().out
    assert "baseOffset: 0 lastOffset: 1 count: 2" in text and "isvalid: true" in text
    assert "payload: hello" in text and "payload: world" in text
    segment = tmp_path / "t-0" / f"{0:020d}.log"
    segment.write_bytes(segment.read_bytes() + b"\x00" * 20)
    assert main(["log", "dump", str(segment), "--output", "json"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line]
    assert '"type": "damaged"' in lines[-1] and '"position": ' in lines[-1]


def test_stray_partition_folders_are_deleted_once_the_broker_knows_its_assignment(tmp_path: Path) -> None:
    first = LogManager(tmp_path)
    first.open_all()
    for partition in (0, 1):
        append(first.get_or_create("t", partition, TOPIC_ID, LogConfig()), b"a")
    first.close()
    again = LogManager(tmp_path)
    again.open_all()
    again.get_or_create("t", 0, TOPIC_ID, LogConfig())
    assert again.remove_strays({"t-0"}) == ["t-1"]
    assert (tmp_path / "t-0").exists() and not (tmp_path / "t-1").exists()
    assert again.remove_strays(set()) == [], "only what was found at start, once"


def record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(path, thread name) of every fsync from now on."""
    seen: list[tuple[str, str]] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        seen.append((os.readlink(f"/proc/self/fd/{fd}"), threading.current_thread().name))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_an_epoch_change_over_many_partitions_fsyncs_nothing_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        manager = LogManager(tmp_path, BackgroundFlusher(asyncio.get_running_loop()))
        manager.open_all()
        logs = [manager.get_or_create("t", p, TOPIC_ID, LogConfig()) for p in range(50)]
        for log in logs:
            append(log, b"a", epoch=0)
            append(log, b"b", epoch=0)
        fsyncs = record_fsyncs(monkeypatch)
        for log in logs:
            log.truncate_to(1)  # a follower cut back to where it agrees with its new leader ...
            append(log, b"c", epoch=1)  # ... then leads, at a new epoch
        on_loop = [path for path, thread in fsyncs if thread == threading.current_thread().name]
        assert on_loop == []
        manager.close()  # waits for the queued writes
        flusher_synced = {path for path, thread in fsyncs if thread.startswith("log-flush")}
        assert flusher_synced >= {str(tmp_path / f"t-{p}") for p in range(50)}

    asyncio.run(asyncio.wait_for(scenario(), 60))
    reopened = LogManager(tmp_path)
    reopened.open_all()
    for p in range(50):
        log = reopened.get(f"t-{p}")
        assert log is not None and log.epochs.entries() == [(0, 0), (1, 1)] and values(log) == [b"a", b"c"]


def test_removing_a_partition_renames_it_away_at_once_and_deletes_it_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deleted_on: list[str] = []
    real_rmtree = shutil.rmtree

    def rmtree(path, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003 - shutil.rmtree's
        deleted_on.append(threading.current_thread().name)
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)

    async def scenario() -> None:
        manager = LogManager(tmp_path, BackgroundFlusher(asyncio.get_running_loop()))
        manager.open_all()
        log = manager.get_or_create("t", 0, TOPIC_ID, LogConfig(segment_bytes=200))
        for i in range(20):
            append(log, b"v%02d" % i)  # unflushed data, and rolled segments whose syncs are queued
        fsyncs = record_fsyncs(monkeypatch)
        manager.remove("t-0")
        loop_thread = threading.current_thread().name
        assert [path for path, thread in fsyncs if thread == loop_thread] == [str(tmp_path)], (
            "only the parent folder, for the rename"
        )
        assert loop_thread not in deleted_on
        assert not (tmp_path / "t-0").exists()
        again = manager.get_or_create("t", 0, uuid.UUID(int=2).bytes, LogConfig())
        assert again.log_end_offset == 0, "a topic re-created under the name starts empty"
        append(again, b"new")
        manager.close()  # waits for the background delete
        assert deleted_on and not list(tmp_path.glob(f"*{DELETE_SUFFIX}"))
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["t-0"]

    asyncio.run(asyncio.wait_for(scenario(), 60))
    reopened = LogManager(tmp_path)
    reopened.open_all()
    log = reopened.get("t-0")
    assert log is not None and log.topic_id == uuid.UUID(int=2).bytes and values(log) == [b"new"]


def test_flush_messages_one_fsyncs_the_folder_of_a_new_segment_before_the_append_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    background = QueuedFlushes()  # the roll's own sync (which fsyncs the folder too) never runs
    log = PartitionLog.open(
        tmp_path,
        TOPIC_ID,
        LogConfig(flush_messages=1, segment_bytes=200),
        clean_shutdown=True,
        recovery_point=0,
        background=background,
    )
    append(log, b"first")
    fsyncs = record_fsyncs(monkeypatch)
    while len(log.segments) == 1:
        append(log, b"more")
    new_segment = str(log.active.path)
    fsynced = [path for path, _ in fsyncs]
    assert new_segment in fsynced and str(tmp_path) in fsynced, "its name is on disk before the ack"
    assert log.recovery_point == log.log_end_offset


@pytest.mark.parametrize("stale", [[(0, 0)], [(0, 0), (5, 1)]], ids=["missing-epoch", "wrong-epoch"])
def test_recovery_rebuilds_the_epoch_cache_from_the_batches_it_scans(
    tmp_path: Path, stale: list[tuple[int, int]]
) -> None:
    log = open_log(tmp_path)
    append(log, b"a", epoch=0)
    append(log, b"b", b"c", epoch=3)
    append(log, b"d", epoch=4)
    # A crash: the batches reached the disk, the last checkpoint writes did not.
    checkpoint.write(tmp_path / "leader-epoch-checkpoint", stale)
    recovered = open_log(tmp_path, clean=False, recovery_point=0)
    assert recovered.epochs.entries() == [(0, 0), (3, 1), (4, 3)]
    assert checkpoint.read(tmp_path / "leader-epoch-checkpoint") == [("0", 0), ("3", 1), ("4", 3)]
