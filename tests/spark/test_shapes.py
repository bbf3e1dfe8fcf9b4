"""The audit job end to end (the CLI, Spark, the tables, the summary, the report in a
browser) over histories of every shape the controller's own code writes: controllers
only, no brokers, no topics, no partition changes, no groups or offsets, one node or
three, archive only, snapshots only, one record or twenty thousand, each kind of request
left out in at least one; the long one, of thirty topics whose partitions never change
leader or ISR, damaged in the middle of a segment. One example of each per run (the seed and the damage drawn anew): the job is
the slow part.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from raftka.audit.job import TABLES
from raftka.audit.report import SHOWN
from raftka.audit.synthetic import MIX, Shape, without, write_history
from raftka.cli.main import main
from raftka.raft.snapshot_schedule import SnapshotPolicy
from raftka.raft.storage import layout
from tests.unit import headline_reference
from tests.unit.browser_support import render_errors
from tests.unit.incidents_reference import assert_found_as_before
from tests.unit.report_support import assert_every_chart_drawn_or_said_empty
from tests.unit.storage_support import flip_byte

EVERY_OPERATION = tuple(name for _, name in MIX)
OFTEN = SnapshotPolicy(snapshot_interval_records=150)
SEGMENT_BYTES = 16 << 10


@dataclass(frozen=True)
class History:
    records: int
    shape: Shape
    nodes: int = 1
    snapshots: SnapshotPolicy = SnapshotPolicy()
    keep: str = "all"  # "archive": every file moved to archive/; "snapshots": segments removed


SHAPES = {
    "controllers_only": History(300, Shape(brokers=0, topics=0, mix=without("commit", "isr", "config",
        "producer_ids", "broker_restart", "topic"))),
    "one_leader_change": History(1, Shape(brokers=0, topics=0, mix=())),
    "no_partition_changes": History(300, Shape(topics=3, partitions=4, groups=1, mix=without("isr",
        "broker_restart", "failover")), nodes=3),
    "no_topics_groups_or_offsets": History(300, Shape(topics=0, mix=without("topic", "commit", "config", "isr"))),
    "archive_only": History(600, Shape(topics=3, partitions=2, mix=without("noop")), snapshots=OFTEN,
        keep="archive"),
    "snapshots_only": History(600, Shape(topics=3, partitions=2, mix=without("producer_ids")), snapshots=OFTEN,
        keep="snapshots"),
}  # fmt: skip
# the issue's: thirty topics, no partition ever changing leader or ISR, damage in the middle
LONG = History(20_000, Shape(topics=30, partitions=4, mix=without("isr", "broker_restart", "config")))
SETTINGS = settings(
    max_examples=1, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
)


def _write(root: Path, history: History, seed: int) -> None:
    for node in range(1, history.nodes + 1):  # one log; each node cuts its own segments
        data = root / f"node-{node}" / "data"
        write_history(data, history.records, seed=seed, node_id=node, shape=history.shape,
                      snapshot_policy=history.snapshots, segment_bytes=SEGMENT_BYTES * node)  # fmt: skip
        log = layout.log_dir(data)
        archive = log / layout.ARCHIVE_DIR
        for path in layout.log_files(log):
            if history.keep == "archive":
                archive.mkdir(exist_ok=True)
                path.rename(archive / path.name)
            elif history.keep == "snapshots" and path.name.endswith(layout.SEGMENT_SUFFIX):
                path.unlink()
        if history.keep == "snapshots" and archive.is_dir():
            shutil.rmtree(archive)


def _audit(root: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """The CLI on ``root``; its exit status and summary.json, after checking every output:
    each table (the ones the report reads in the types it declares), the headline figures and the
    incidents as the driver found them before from the tables read whole, and a report whose
    every chart is drawn or says there was nothing to draw, rendering in Chromium cleanly."""
    capsys.readouterr()  # what writing the history logged
    status = main(["audit", str(root), "--out", str(out), "--output", "json"])
    printed = json.loads(capsys.readouterr().out)
    summary = json.loads((out / "summary.json").read_text())
    assert printed["status"] == summary["status"] and summary["exit_status"] == status
    assert sorted(p.name for p in (out / "tables").iterdir()) == sorted(TABLES)
    for name in TABLES:
        written = pq.read_table(out / "tables" / name).schema
        if name in SHOWN:
            declared = SHOWN[name]
            assert [(f.name, f.type) for f in written if f.name in declared.names] == list(
                zip(declared.names, declared.types, strict=True)
            ), name
    # what the driver found before Spark did, from the tables read whole
    assert summary["headline"] == headline_reference.headline(headline_reference.read(out / "tables"))
    assert_found_as_before(out / "tables")
    assert_every_chart_drawn_or_said_empty((out / "report.html").read_text(encoding="utf-8"))
    assert render_errors(out / "report.html", out) == []
    return status, summary


@pytest.mark.parametrize("name", list(SHAPES))
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_every_shape_of_history_audits_clean_with_every_output(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str], name: str, seed: int
) -> None:  # fmt: skip
    root = tmp_path_factory.mktemp(name)
    _write(root / "nodes", SHAPES[name], seed)
    status, summary = _audit(root / "nodes", root / "out", capsys)
    assert (status, summary["failed_checks"]) == (0, [])


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), which=st.floats(0, 1), where=st.floats(0.2, 0.8))
def test_damage_in_the_middle_of_a_long_many_topic_history_fails_the_audit_naming_it(
    spark: Any, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
    seed: int, which: float, where: float,
) -> None:  # fmt: skip
    root = tmp_path_factory.mktemp("damaged")
    _write(root / "nodes", LONG, seed)
    log = layout.log_dir(root / "nodes" / "node-1" / "data")
    older = [p for _, p in layout.list_segments(log)][:-1]  # the newest may end torn: a warning
    segment = older[int(which * (len(older) - 1))]
    flip_byte(segment, int(where * segment.stat().st_size))
    status, summary = _audit(root / "nodes", root / "out", capsys)
    assert status == 1 and "no_damage" in summary["failed_checks"]
    violations = pq.read_table(root / "out" / "tables" / "violations").to_pandas()
    damage = violations[(violations["check"] == "no_damage") & (violations["severity"] == "error")]
    assert damage["file"].tolist() == [str(segment)]


def test_each_kind_of_request_is_left_out_of_some_shape() -> None:
    """So each record type's absence is audited (a table or chart left empty by it)."""
    left_out = {name for history in (*SHAPES.values(), LONG) for name in EVERY_OPERATION if name not in dict(
        (n, w) for w, n in history.shape.mix)}  # fmt: skip
    assert left_out == set(EVERY_OPERATION)
