"""``raftka perf cleaner --records N --keys K``: how fast the log cleaner cleans, and how
much memory it takes.

It writes a partition log of N records over K distinct keys (record i has key i mod K,
so every key but the last written is overwritten N/K times) in a temp folder, with the
broker's own ``PartitionLog``, rolls it so that all of it is cleanable, then times one
pass of the real ``LogCleaner`` (``clean_now``: the key map, the recopy and the swap)
with a key map of ``--dedupe-buffer-size`` bytes. Seconds depend on the day's machine,
so in the same run, right before it, a baseline reads the same segment files and writes
their bytes to new files, fsynced, the least a pass that rewrites the log must do; the
figure to follow is the ratio, cleaner over baseline. Throughput is the dirty bytes
cleaned (the segments' bytes the pass read) per second. Peak memory is the pass's peak
of Python allocations (``tracemalloc``: the key map's flat buffers are Python bytearrays),
taken in a run of its own after the timed one so that tracing does not slow the timing.
A pass stops where the key map is full (the next pass cleans on): the report says which
offset the timed pass reached, and a key map too small for the keys shows there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path

from raftka.broker.log.cleaner.manager import Candidate, LogCleaner
from raftka.broker.log.cleaner.offset_map import OffsetMap
from raftka.broker.log.config import LogConfig
from raftka.broker.log.partition_log import PartitionLog
from raftka.command import output
from raftka.command.data_args import positive
from raftka.command.errors import CliError
from raftka.node.config import CleanerConfig
from raftka.records.batch import parse_header
from raftka.records.codec import BatchBuilder

MIB = 1 << 20
TOPIC_ID = b"\x0c" * 16
RECORDS_PER_BATCH = 100
SEGMENT_BYTES = 1 << 30  # Kafka's default segment.bytes
NOW_MS = 1_700_000_000_000


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    perf = kinds.add_parser("cleaner", help="the log cleaner's throughput beside a plain rewrite, and its memory")
    perf.add_argument("--records", type=positive, default=10_000_000, help="records in the log (default 10,000,000)")
    perf.add_argument("--keys", type=positive, default=10_000_000, help="distinct keys (default 10,000,000)")
    perf.add_argument("--value-bytes", type=positive, default=100, help="bytes per value (default 100)")
    perf.add_argument(
        "--dedupe-buffer-size", type=positive, default=128 * MIB, help="the key map's bytes (default 128 MiB)"
    )
    perf.add_argument("--dir", type=Path, help="where the log is written (default: a temp dir)")
    output.add_output_option(perf)
    perf.set_defaults(func=run_perf_cleaner)


def check(args: argparse.Namespace) -> None:
    """What argparse cannot check alone; CliError naming the flag."""
    if args.keys > args.records:
        raise CliError(f"--keys: at most --records ({args.records}), got {args.keys}")


def run_perf_cleaner(args: argparse.Namespace) -> int:
    check(args)
    with tempfile.TemporaryDirectory(prefix="perf-cleaner-", dir=args.dir) as root:
        folder = Path(root)
        baseline_s, dirty_bytes = _time_rewrite(_written(folder / "base" / "t-0", args), folder / "copy")
        cleaner_s, reached = _time_pass(_written(folder / "timed" / "t-0", args), args.dedupe_buffer_size)
        peak = _peak_memory(_written(folder / "traced" / "t-0", args), args.dedupe_buffer_size)
    result = report(args.records, args.keys, dirty_bytes, baseline_s, cleaner_s, peak, reached)
    if args.output == "json":
        print(output.to_json(result))
    else:
        print(output.fields([(k.replace("_", " "), v) for k, v in result.items()]))
    return 0


def report(
    records: int,
    keys: int,
    dirty_bytes: int,
    baseline_s: float,
    cleaner_s: float,
    peak_bytes: int,
    cleaned_to: int,
) -> dict[str, int | float]:
    """The run's figures: each throughput in MB/s of the dirty bytes, and the ratio."""
    return {
        "records": records,
        "keys": keys,
        "dirty_bytes": dirty_bytes,
        "cleaned_to_offset": cleaned_to,
        "baseline_mb_per_s": mb_per_s(dirty_bytes, baseline_s),
        "cleaner_mb_per_s": mb_per_s(dirty_bytes, cleaner_s),
        "cleaner_over_baseline": round(cleaner_s / baseline_s, 2) if baseline_s > 0 else 0.0,
        "cleaner_peak_memory_mib": round(peak_bytes / MIB, 1),
    }


def mb_per_s(count: int, seconds: float) -> float:
    return round(count / 1e6 / seconds, 1) if seconds > 0 else 0.0


def _written(directory: Path, args: argparse.Namespace) -> PartitionLog:
    """N records over K keys, rolled so that all of them are below the active segment."""
    config = LogConfig(compact=True, min_cleanable_dirty_ratio=0.0, segment_bytes=SEGMENT_BYTES)
    partition_log = PartitionLog.open(directory, TOPIC_ID, config, clean_shutdown=False, recovery_point=0)
    value = b"v" * args.value_bytes
    for first in range(0, args.records, RECORDS_PER_BATCH):
        builder = BatchBuilder()
        for i in range(first, min(first + RECORDS_PER_BATCH, args.records)):
            builder.append(NOW_MS, b"%d" % (i % args.keys), value)
        payload = builder.build()
        partition_log.append_as_leader(payload, [(0, parse_header(payload))], 0, NOW_MS)
    partition_log.roll()
    partition_log.flush()
    return partition_log


def _time_rewrite(partition_log: PartitionLog, copy: Path) -> tuple[float, int]:
    """Read the cleanable segments and write their bytes to new files, fsynced."""
    copy.mkdir()
    sources = [s.path for s in partition_log.segments[:-1]]
    started = time.perf_counter()
    for source in sources:
        with open(source, "rb") as reading, open(copy / source.name, "wb") as writing:
            shutil.copyfileobj(reading, writing, 1 * MIB)
            writing.flush()
            os.fsync(writing.fileno())
    elapsed = time.perf_counter() - started
    partition_log.close()
    return elapsed, sum(source.stat().st_size for source in sources)


def _cleaner(partition_log: PartitionLog) -> LogCleaner:
    candidate = Candidate("t-0", partition_log, partition_log.config, partition_log.log_end_offset)
    return LogCleaner(partition_log.directory.parent, CleanerConfig(), lambda: [candidate], wall_ms=lambda: NOW_MS)


def _time_pass(partition_log: PartitionLog, map_bytes: int) -> tuple[float, int]:
    offset_map = OffsetMap(map_bytes)  # made before the clock starts: the broker keeps its map
    cleaner = _cleaner(partition_log)
    started = time.perf_counter()
    result = cleaner.clean_now(offset_map)
    elapsed = time.perf_counter() - started
    partition_log.close()
    if result is None:
        raise CliError("the cleaner found nothing to clean (a log of one record?)")
    return elapsed, result.end_offset


def _peak_memory(partition_log: PartitionLog, map_bytes: int) -> int:
    tracemalloc.start()
    try:
        _cleaner(partition_log).clean_now(OffsetMap(map_bytes))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        partition_log.close()
