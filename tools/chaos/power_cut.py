"""What a power cut leaves of a stopped broker's partition logs: each keeps only what its
recovery point says was fsynced.

A broker writes to the page cache and fsyncs later (on roll, every ``flush.ms``), and
records in ``recovery-point-offset-checkpoint`` the offset below which each log is on
disk. SIGKILL keeps the page cache, a power cut does not: everything past a log's
checkpointed recovery point may be gone. ``cut_unflushed_tails`` takes exactly that
much, the most a power cut could take (a log the checkpoint does not name loses all):
the segment holding the recovery point is cut after its last batch below it, later
segments are emptied. Their indexes are left as they were, stale, as a power cut can
leave them: recovery must not trust them past the recovery point.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from raftka.broker.log import checkpoint
from raftka.broker.log.folder_names import parse_partition_folder
from raftka.broker.log.manager import RECOVERY_POINTS_FILE
from raftka.broker.server import PARTITIONS_DIR
from raftka.command.errors import CliError
from raftka.records.batch import HEADER_SIZE, BatchFramingError, read_header

SEGMENT_SUFFIX = ".log"


@dataclass(frozen=True, slots=True)
class Cut:
    """One partition log's loss: from ``offset`` (its recovery point) on, ``bytes`` bytes."""

    partition: str
    offset: int
    bytes: int


def cut_unflushed_tails(data_dir: Path) -> list[Cut]:
    """Cut every partition log of the broker whose ``data_dir`` this is (it must not be
    running) back to its recovery point; the logs that lost bytes."""
    partitions = data_dir / PARTITIONS_DIR
    if not partitions.is_dir():
        return []
    try:
        recovery_points = dict(checkpoint.read(partitions / RECOVERY_POINTS_FILE))
    except checkpoint.CheckpointError as e:  # written atomically: no power cut leaves it so
        raise CliError(f"cannot emulate a power cut: {e}") from None
    cuts = []
    for folder in sorted(partitions.iterdir()):
        if not folder.is_dir() or parse_partition_folder(folder.name) is None:
            continue
        recovery_point = recovery_points.get(folder.name, 0)
        lost = sum(_cut_segment(path, recovery_point) for path in folder.glob(f"*{SEGMENT_SUFFIX}"))
        if lost:
            cuts.append(Cut(folder.name, recovery_point, lost))
    return cuts


def _cut_segment(path: Path, recovery_point: int) -> int:
    """Truncate one segment to its batches that end below ``recovery_point``; bytes cut."""
    size = path.stat().st_size
    keep = 0 if int(path.stem) >= recovery_point else _bytes_below(path, recovery_point, size)
    if keep < size:
        os.truncate(path, keep)
    return size - keep


def _bytes_below(path: Path, recovery_point: int, size: int) -> int:
    """Where the first batch reaching ``recovery_point`` starts (a torn or unreadable
    header counts as unflushed: nothing from there on was known to be on disk)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        position = 0
        while position < size:
            try:
                header = read_header(os.pread(fd, HEADER_SIZE, position))
            except BatchFramingError:
                return position
            if header.last_offset >= recovery_point or position + header.size > size:
                return position
            position += header.size
        return position
    finally:
        os.close(fd)
