"""The least an audit must do, as a Spark job: the yardstick ``raftka perf audit`` divides by.

The same files as the audit (``discover``), packed into tasks as the audit packs them, each
read as raw bytes on an executor as the audit reads them, and every frame checked against
its CRC-32C: a segment's batch frames (``batch_codec.check_crcs``), a snapshot's file frame
and the image frame inside it with its record frames (``snapshot_file``,
``metadata.snapshot``). Nothing else is decoded, and only counts come back. A machine
half as fast takes twice as long for both, so the audit's time over this one says how far
the audit is from the floor whatever the day's machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from raftka.audit.files import SNAPSHOT, LogFile, discover, pack
from raftka.metadata.snapshot import SnapshotError, read_snapshot
from raftka.raft.storage import batch_codec, snapshot_file

if TYPE_CHECKING:  # the tasks import this module: pyspark.sql is no part of what they need
    from pyspark.sql import SparkSession


class Checked(NamedTuple):
    """What the baseline found: sums over files."""

    files: int
    bytes: int
    frames: int  # segment batches, and each snapshot's one image
    bad_crcs: int  # frames whose CRC-32C (or, in a snapshot, framing) fails
    unwalked_bytes: int  # after a length no frame can have: see ``batch_codec.check_crcs``


def total(checked: Iterable[Checked]) -> Checked:
    return Checked._make(sum(column) for column in zip(Checked(0, 0, 0, 0, 0), *checked, strict=True))


def check_file(file: LogFile) -> Checked:
    """One file's frames checked; an unreadable file raises (the job fails, as the audit's)."""
    data = Path(file.path).read_bytes()
    if file.source == SNAPSHOT:
        return Checked(1, len(data), 1, int(not _snapshot_intact(data)), 0)
    frames, bad, unwalked = batch_codec.check_crcs(data)
    return Checked(1, len(data), frames, bad, unwalked)


def _snapshot_intact(data: bytes) -> bool:
    try:
        read_snapshot(snapshot_file.decode_snapshot(data).data)
    except (snapshot_file.SnapshotFileError, SnapshotError):
        return False
    return True


def check_files(files: Sequence[LogFile]) -> Checked:
    """What one Spark task does."""
    return total(check_file(f) for f in files)


def run_baseline(spark: SparkSession, paths: Sequence[str]) -> Checked:
    """Check every frame of every file under ``paths``, in as many tasks as the audit reads them in."""
    # Here, not at the top: the tasks unpickle this module, and the job's imports (the
    # report's plotting) are no part of what a task needs.
    from raftka.audit.job import TASKS_PER_CORE, _partition_bytes

    files = discover(paths)
    groups = pack(files, _partition_bytes(files, spark.sparkContext.defaultParallelism * TASKS_PER_CORE))
    done = spark.sparkContext.parallelize(groups, len(groups)).map(check_files).collect()
    return total(done)
