"""Swapping cleaned segments in: a crash before any step of the swap, or while the pass
writes its ``.cleaned`` files, leaves a log that loading completes or rolls back, with
every record a consumer should read (Kafka's ``LogLoader`` swap recovery)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from raftka.broker.log.cleaner.manager import Candidate, LogCleaner
from raftka.broker.log.cleaner.offset_map import ENTRY_BYTES, OffsetMap
from raftka.broker.log.config import LogConfig
from raftka.broker.log.partition_log import PartitionLog
from raftka.node.config import CleanerConfig
from raftka.raft.storage.fsio import fsync_dir
from raftka.records.batch import Compression
from tests.datasim.disk import Disks, SimDisk
from tests.unit.cleaner_logs import append, consume, open_log

LOG_SEGMENT_BYTES = 300
GROUP_BYTES = 1000  # several segments per cleaned one: a pass swaps several groups


class Crash(Exception):
    pass


def written(directory: Path) -> PartitionLog:
    partition_log = open_log(directory, LOG_SEGMENT_BYTES)
    for i in range(40):
        records = [(b"k%d" % (i % 5), None if i % 7 == 0 else b"v%d" % i)]
        append(partition_log, records, 1_000, compression=Compression.ZSTD)
    partition_log.roll()
    append(partition_log, [(b"k0", b"last")], 1_000)
    return partition_log


def cleaner_of(directory: Path, partition_log: PartitionLog) -> LogCleaner:
    settings = LogConfig(
        compact=True, min_cleanable_dirty_ratio=0.0, segment_bytes=GROUP_BYTES, index_interval_bytes=128
    )
    candidate = Candidate("t-0", partition_log, settings, partition_log.log_end_offset)
    return LogCleaner(directory, CleanerConfig(), lambda: [candidate], wall_ms=lambda: 2_000)


def swap_steps(tmp_path: Path) -> list[str]:
    partition_log = written(tmp_path / "dry" / "t-0")
    steps: list[str] = []
    assert cleaner_of(tmp_path / "dry", partition_log).clean_now(OffsetMap(ENTRY_BYTES * 64), steps.append)
    return steps


def test_a_crash_before_any_step_of_a_swap_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    expected = consume(written(tmp_path / "reference" / "t-0"))
    steps = swap_steps(tmp_path)
    assert sum(step.startswith("delete") for step in steps) > 1 and steps.count("open") > 1
    for crash_at, name in enumerate(steps):
        directory = tmp_path / f"crash-{crash_at}"
        partition_log = written(directory / "t-0")
        calls = iter(range(len(steps)))

        def step(_: str, crash_at: int = crash_at, calls=calls) -> None:  # noqa: ANN001
            if next(calls) == crash_at:
                raise Crash

        with pytest.raises(Crash):
            cleaner_of(directory, partition_log).clean_now(OffsetMap(ENTRY_BYTES * 64), step)
        recovered = open_log(directory / "t-0", LOG_SEGMENT_BYTES)  # the crashed process's log is abandoned
        after = consume(recovered)
        assert after.table == expected.table, name
        assert after.offsets == sorted(set(after.offsets)), name
        assert not [p.name for p in (directory / "t-0").iterdir() if p.suffix in (".cleaned", ".swap")], name
        assert recovered.log_end_offset == 41


def test_a_crash_while_the_pass_writes_leaves_the_old_segments(tmp_path: Path) -> None:
    expected = consume(written(tmp_path / "reference" / "t-0"))
    partition_log = written(tmp_path / "t-0")
    before = sorted(p.name for p in (tmp_path / "t-0").iterdir())
    the_cleaner = cleaner_of(tmp_path, partition_log)
    reads = iter(range(100))

    def throttle(_: int) -> None:
        if next(reads) == 6:
            raise Crash

    the_cleaner._throttle = throttle  # type: ignore[assignment]
    with pytest.raises(Crash):
        the_cleaner.clean_now(OffsetMap(ENTRY_BYTES * 64))
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == before  # its .cleaned files removed
    for leftover in ("00000000000000000000.log.cleaned", "00000000000000000000.index.cleaned"):
        (tmp_path / "t-0" / leftover).write_bytes(b"half a segment")  # as if the process died
    recovered = open_log(tmp_path / "t-0", LOG_SEGMENT_BYTES)
    assert consume(recovered).table == expected.table
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == before


def test_a_power_cut_at_any_step_of_a_swap_keeps_what_was_fsynced_and_recovers(tmp_path: Path) -> None:
    """The harsher crash: only fsynced bytes and names survive (``tests.datasim.disk``)."""
    expected = consume(written(tmp_path / "reference" / "t-0"))
    steps = swap_steps(tmp_path)
    with Disks().installed() as disks:
        for crash_at in range(len(steps) + 1):  # the last: a power cut after the whole pass
            disk = disks.add(SimDisk(tmp_path / f"cut-{crash_at}"))
            partition_log = written(disk.root / "t-0")
            partition_log.flush()
            fsync_dir(disk.root)  # the partition's folder is durable before the pass
            calls = iter(range(len(steps) + 1))

            def step(_: str, crash_at: int = crash_at, calls=calls) -> None:  # noqa: ANN001
                if next(calls) == crash_at:
                    raise Crash

            with contextlib.suppress(Crash):
                cleaner_of(disk.root, partition_log).clean_now(OffsetMap(ENTRY_BYTES * 64), step)
            disk.power_cut()
            recovered = open_log(disk.root / "t-0", LOG_SEGMENT_BYTES)
            after = consume(recovered)
            where = steps[crash_at] if crash_at < len(steps) else "after the pass"
            assert after.table == expected.table, where
            assert after.offsets == sorted(set(after.offsets)), where
            assert recovered.log_end_offset == 41, where


def test_a_log_whose_swap_was_cut_short_closes_without_closing_another_file(tmp_path: Path) -> None:
    """A swap cut short after deleting a replaced segment leaves that segment in the log's
    list; closing the log must not close its descriptor again (by then another file's)."""
    partition_log = written(tmp_path / "t-0")

    def step(name: str) -> None:
        if name.startswith("rename") and name.endswith(".swap"):  # the old segments are deleted by now
            raise Crash

    with pytest.raises(Crash):
        cleaner_of(tmp_path, partition_log).clean_now(OffsetMap(ENTRY_BYTES * 64), step)
    with open(tmp_path / "bystander", "wb") as bystander:  # takes a freed descriptor number
        partition_log.close_unflushed()
        bystander.write(b"still open")
        bystander.flush()
