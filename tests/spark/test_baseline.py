"""The baseline ``raftka perf audit`` divides by: every frame of every file checked, and
nothing but frames (counts equal to a plain Python walk and to what the writer wrote)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from raftka.audit.baseline import Checked, run_baseline
from raftka.audit.files import SNAPSHOT, discover
from raftka.audit.synthetic import Stats, write_history
from raftka.raft.storage import batch_codec
from tests.unit.storage_support import flip_byte

RECORDS = 20_000


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Stats]:
    """Small segments, so that the archive, the live log and a snapshot all hold some."""
    data = tmp_path_factory.mktemp("baseline") / "node-1" / "data"
    return data, write_history(data, RECORDS, segment_bytes=1 << 18)


def _plain_count(data: Path) -> Checked:
    """What the baseline must find, counted without Spark: a segment's frames, one per snapshot."""
    files = discover([data])
    frames = 0
    for file in files:
        raw = Path(file.path).read_bytes()
        if file.source == SNAPSHOT:
            frames += 1
        else:
            walked = list(batch_codec.iter_frames(raw))
            assert all(f.batch is not None for f in walked)
            frames += len(walked)
    return Checked(len(files), sum(Path(f.path).stat().st_size for f in files), frames, 0, 0)


def test_the_baseline_checks_every_frame_of_every_file(spark: Any, history: tuple[Path, Stats]) -> None:
    data, stats = history
    files = discover([data])
    assert stats.snapshots >= 1 and any(f.archived for f in files)
    checked = run_baseline(spark, [str(data)])
    assert checked == _plain_count(data)
    assert checked.frames == stats.batches + stats.snapshots


def test_a_flipped_byte_in_a_segment_and_in_a_snapshot_is_a_bad_crc_each(
    spark: Any, history: tuple[Path, Stats], tmp_path: Path
) -> None:
    copy = tmp_path / "data"
    shutil.copytree(history[0], copy)
    files = discover([copy])
    segment = next(Path(f.path) for f in files if f.source != SNAPSHOT)
    snapshot = next(Path(f.path) for f in files if f.source == SNAPSHOT)
    third = [f.position for f in batch_codec.iter_frames(segment.read_bytes())][2]
    flip_byte(segment, third + batch_codec.HEADER_BYTES + 2)  # in its first record
    flip_byte(snapshot, snapshot.stat().st_size - 1)  # in the image's last record
    assert run_baseline(spark, [str(copy)]) == run_baseline(spark, [str(history[0])])._replace(bad_crcs=2)
