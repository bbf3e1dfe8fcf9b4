"""The log cleaner's choices, its uncleanable logs, its workers and its gauges."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from raftka.broker.log.cleaner.manager import Candidate, LogCleaner, Throttler
from raftka.broker.log.cleaner.metrics import CleanerCollector
from raftka.broker.log.cleaner.offset_map import ENTRY_BYTES, OffsetMap
from raftka.broker.log.config import LogConfig
from raftka.broker.log.manager import LogManager
from raftka.broker.log.partition_log import PartitionLog
from raftka.node.config import CleanerConfig
from tests.unit.cleaner_logs import append, consume, open_log

COMPACT = LogConfig(compact=True, min_cleanable_dirty_ratio=0.5, segment_bytes=300, index_interval_bytes=128)


def log_with(directory: Path, keys: int, records: int) -> PartitionLog:
    partition_log = open_log(directory, 300)
    for i in range(records):
        append(partition_log, [(b"k%d" % (i % keys), b"v%d" % i)], 1_000)
    partition_log.roll()
    return partition_log


def candidate(name: str, partition_log: PartitionLog, config: LogConfig = COMPACT) -> Candidate:
    return Candidate(name, partition_log, config, partition_log.log_end_offset)


def test_the_dirtiest_log_is_cleaned_first_and_a_clean_one_is_not_due(tmp_path: Path) -> None:
    a, b = log_with(tmp_path / "a-0", 2, 20), log_with(tmp_path / "b-0", 2, 20)
    logs = [candidate("a-0", a), candidate("b-0", b)]
    cleaner = LogCleaner(tmp_path, CleanerConfig(), lambda: logs, wall_ms=lambda: 2_000)
    cleaner.checkpoints["a-0"] = 10  # half of a is clean already
    cleaner.checkpoints["gone-0"] = 5  # a partition no longer here
    chosen = cleaner.choose(2_000)
    assert chosen is not None and chosen[0].name == "b-0" and chosen[1].dirty_ratio == 1.0
    assert cleaner.metrics.max_dirty_percent == 100.0
    assert cleaner.clean_now(OffsetMap(ENTRY_BYTES * 100)) is not None
    assert cleaner.checkpoints == {"a-0": 10, "b-0": 20}
    chosen = cleaner.choose(2_000)
    assert chosen is not None and chosen[0].name == "a-0"  # b is now wholly clean: not due
    cleaner.clean_now(OffsetMap(ENTRY_BYTES * 100))
    assert cleaner.choose(2_000) is None


def test_min_and_max_compaction_lag(tmp_path: Path) -> None:
    partition_log = log_with(tmp_path / "a-0", 2, 20)  # records at 1,000 ms
    lagging = LogConfig(compact=True, min_cleanable_dirty_ratio=1.1, min_compaction_lag_ms=500)
    cleaner = LogCleaner(tmp_path, CleanerConfig(), lambda: [candidate("a-0", partition_log, lagging)])
    assert cleaner.choose(1_400) is None  # too young, and the ratio can never be reached
    overdue = LogConfig(compact=True, min_cleanable_dirty_ratio=1.1, max_compaction_lag_ms=100)
    cleaner = LogCleaner(tmp_path, CleanerConfig(), lambda: [candidate("a-0", partition_log, overdue)])
    assert cleaner.choose(1_100) is None  # the first dirty batch is only 100 ms old
    chosen = cleaner.choose(1_101)
    assert chosen is not None and chosen[1].overdue


def test_a_damaged_log_is_uncleanable_and_the_others_are_cleaned(tmp_path: Path) -> None:
    damaged, good = log_with(tmp_path / "a-0", 2, 20), log_with(tmp_path / "b-0", 2, 20)
    with open(damaged.segments[0].path, "r+b") as f:  # a record byte: the CRC no longer matches
        f.seek(70)
        f.write(b"\xff")
    logs = [candidate("a-0", damaged), candidate("b-0", good)]
    cleaner = LogCleaner(tmp_path, CleanerConfig(), lambda: logs, wall_ms=lambda: 2_000)
    cleaner.checkpoints["b-0"] = 8  # so the damaged one is dirtier and chosen first
    assert cleaner.clean_now(OffsetMap(ENTRY_BYTES * 100)) is None
    assert "CRC mismatch" in cleaner.uncleanable["a-0"]
    assert cleaner.clean_now(OffsetMap(ENTRY_BYTES * 100)) is not None
    assert consume(good).offsets == [18, 19]
    assert not list((tmp_path / "a-0").glob("*.cleaned"))
    registry = CollectorRegistry()
    registry.register(CleanerCollector(cleaner))
    text = generate_latest(registry).decode()
    assert "kafka_log_logcleanermanager_uncleanable_partitions_count 1.0" in text
    assert "kafka_log_logcleaner_cleaner_recopy_percent" in text


def test_the_log_manager_offers_compacted_logs_below_their_last_stable_offset(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    manager.open_all()
    kept = manager.get_or_create("kept", 0, b"\x01" * 16, COMPACT)
    manager.get_or_create("compacted", 0, b"\x02" * 16, COMPACT)
    manager.get_or_create("deleted", 0, b"\x03" * 16, LogConfig())  # cleanup.policy=delete
    append(kept, [(b"a", b"1")], 1_000, producer=(7, 0, 0), transactional=True)
    marks = {"kept-0": 1, "compacted-0": 0, "deleted-0": 0}
    candidates = manager.cleaner_candidates(lambda: marks)()
    assert sorted((c.name, c.upper_bound) for c in candidates) == [("compacted-0", 0), ("kept-0", 0)]
    assert manager.cleaner_candidates(lambda: {"kept-0": 1})()[0].config is kept.config
    kept.update_config(LogConfig())  # the topic's policy changed back to delete
    assert [c.name for c in manager.cleaner_candidates(lambda: marks)()] == ["compacted-0"]


def test_workers_clean_off_the_loop_and_stop_and_a_disabled_cleaner_cleans_nothing(tmp_path: Path) -> None:
    partition_log = log_with(tmp_path / "a-0", 2, 20)
    untouched = log_with(tmp_path / "off" / "b-0", 2, 20)
    config = CleanerConfig(backoff_ms=10, dedupe_buffer_size=ENTRY_BYTES * 1000)

    async def main() -> None:
        cleaner = LogCleaner(tmp_path, config, lambda: [candidate("a-0", partition_log)])
        disabled = LogCleaner(
            tmp_path / "off", replace(config, enable=False), lambda: [candidate("b-0", untouched)]
        )
        cleaner.start()
        disabled.start()

        async def cleaned() -> None:
            while cleaner.checkpoints.get("a-0") != 20:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(cleaned(), 120)  # a hang, not a slow machine, fails here
        await cleaner.stop()
        await disabled.stop()
        assert disabled.checkpoints == {}

    asyncio.run(main())
    assert consume(partition_log).offsets == [18, 19]
    assert len(consume(untouched).offsets) == 20  # the enabled one ran many passes meanwhile


def test_the_throttler_sleeps_past_its_rate(monkeypatch) -> None:  # noqa: ANN001
    slept: list[float] = []
    monkeypatch.setattr("raftka.broker.log.cleaner.manager.time.sleep", slept.append)
    now = [0.0]
    throttle = Throttler(1000, clock=lambda: now[0])
    now[0] = 0.5
    throttle(500)  # 500 bytes in 0.5 s: at the rate
    assert slept == []
    throttle(1000)  # 1,500 bytes in 0.5 s: 1 s more at 1,000 bytes/s
    assert slept == [1.0]
    unbounded = Throttler(0, clock=lambda: now[0])  # io_max_bytes_per_second = 0
    unbounded(10**12)
    assert slept == [1.0]
