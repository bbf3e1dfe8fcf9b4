"""A power cut on a stopped broker's data (``chaos power-cut-broker``): each partition log
keeps exactly what its checkpointed recovery point says was fsynced, and the broker's
own recovery opens what is left as a log that ends there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raftka.broker.log.config import LogConfig
from raftka.broker.log.manager import RECOVERY_POINTS_FILE, LogManager
from raftka.broker.server import PARTITIONS_DIR
from raftka.command.errors import CliError
from raftka.records.batch import iter_batches
from raftka.tools.chaos.power_cut import Cut, cut_unflushed_tails
from tests.unit.test_partition_log import TOPIC_ID, append, values

BATCH_LENGTH_AT = 8  # baseOffset (8 bytes), then batchLength
SMALL_SEGMENTS = LogConfig(segment_bytes=400, index_interval_bytes=1)


def crashed_broker(data_dir: Path) -> None:
    """Two partitions: ``flushed-0`` fsynced (and checkpointed) at offset 10, then
    appended to up to 25, rolling on the way; ``young-0`` created after the checkpoint.
    Then the process dies: nothing closed, nothing flushed on the way out."""
    manager = LogManager(data_dir / PARTITIONS_DIR)
    manager.open_all()
    flushed = manager.get_or_create("flushed", 0, TOPIC_ID, LogConfig())
    for i in range(10):
        append(flushed, b"f%02d" % i)
    flushed.flush()
    manager.checkpoint_recovery_points()
    flushed.update_config(SMALL_SEGMENTS)
    for i in range(10, 25):
        append(flushed, b"f%02d" % i)
    young = manager.get_or_create("young", 0, TOPIC_ID, LogConfig())
    append(young, b"y0", b"y1")
    assert len(flushed.segments) > 2, "later segments exist past the recovery point"
    for name in manager.names():
        log = manager.get(name)
        assert log is not None
        log.close_unflushed()


def reopened(data_dir: Path) -> dict[str, list[bytes]]:
    manager = LogManager(data_dir / PARTITIONS_DIR)
    manager.open_all()
    try:
        return {
            name: values(manager.get_or_create(topic, 0, TOPIC_ID, LogConfig()))
            for name, topic in (("flushed-0", "flushed"), ("young-0", "young"))
        }
    finally:
        manager.close()


def test_a_power_cut_keeps_what_the_recovery_point_covers_and_nothing_after(tmp_path: Path) -> None:
    crashed_broker(tmp_path)
    partitions = tmp_path / PARTITIONS_DIR
    sizes_before = {p: p.stat().st_size for p in partitions.glob("*/*.log")}

    cuts = cut_unflushed_tails(tmp_path)

    assert [(c.partition, c.offset) for c in cuts] == [("flushed-0", 10), ("young-0", 0)]
    lost = sum(sizes_before[p] - p.stat().st_size for p in sizes_before)
    assert sum(c.bytes for c in cuts) == lost > 0
    after = reopened(tmp_path)
    assert after == {"flushed-0": [b"f%02d" % i for i in range(10)], "young-0": []}


def test_a_sigkill_alone_keeps_the_unflushed_tail(tmp_path: Path) -> None:
    """The contrast: the page cache survives a killed process, so without the cut the
    broker recovers everything; the cut is what takes the tail."""
    crashed_broker(tmp_path)
    after = reopened(tmp_path)
    assert after == {"flushed-0": [b"f%02d" % i for i in range(25)], "young-0": [b"y0", b"y1"]}


def test_a_torn_header_before_the_recovery_point_is_where_the_cut_starts(tmp_path: Path) -> None:
    """A header that does not parse means nothing from there on was known to be on disk."""
    crashed_broker(tmp_path)
    folder = tmp_path / PARTITIONS_DIR / "flushed-0"
    first = folder / f"{0:020d}.log"
    torn_at = [position for position, _ in iter_batches(first.read_bytes())][5]
    with open(first, "r+b") as f:
        f.seek(torn_at + BATCH_LENGTH_AT)
        f.write(b"\xff\xff\xff\xff")  # batchLength -1
    before = sum(p.stat().st_size for p in folder.glob("*.log"))

    cuts = cut_unflushed_tails(tmp_path)

    assert first.stat().st_size == torn_at
    assert cuts[0] == Cut("flushed-0", 10, before - sum(p.stat().st_size for p in folder.glob("*.log")))
    assert reopened(tmp_path)["flushed-0"] == [b"f%02d" % i for i in range(5)]


def test_a_broker_with_no_partitions_yet_has_nothing_to_cut(tmp_path: Path) -> None:
    assert cut_unflushed_tails(tmp_path) == []
    os.mkdir(tmp_path / PARTITIONS_DIR)
    assert cut_unflushed_tails(tmp_path) == []


def test_an_unreadable_recovery_point_checkpoint_is_an_error_naming_it(tmp_path: Path) -> None:
    crashed_broker(tmp_path)
    checkpoint_file = tmp_path / PARTITIONS_DIR / RECOVERY_POINTS_FILE
    checkpoint_file.write_text("0\n5\nflushed-0 10\n")
    sizes = {p: p.stat().st_size for p in (tmp_path / PARTITIONS_DIR).glob("*/*.log")}
    with pytest.raises(CliError, match=f"{checkpoint_file}: 5 entries announced, 1 found"):
        cut_unflushed_tails(tmp_path)
    assert {p: p.stat().st_size for p in sizes} == sizes, "nothing was cut"
