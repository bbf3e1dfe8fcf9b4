"""The audit job on the incident fixture: the tables, the summary, the report and the exit
status the story must give; and a damaged copy that fails it."""

from __future__ import annotations

import html
import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from raftka.audit import job
from raftka.audit.checks import CHECK_NAMES
from raftka.audit.counts import RATE_SCHEMA, WIDTHS_MS
from raftka.audit.files import discover
from raftka.audit.job import TABLES
from raftka.audit.report import CHART_IDS
from raftka.cli.main import main
from tests.unit.audit_incident import GAP_MS, SECOND_GAP_MS, STEP_MS, Incident
from tests.unit.browser_support import render_errors
from tests.unit.report_support import assert_links_resolve, incident_rows, rows_behind
from tests.unit.storage_support import flip_byte

Audited = tuple[dict[str, Any], Path]


def _table(audited: Audited, name: str) -> pd.DataFrame:
    return pd.read_parquet(audited[1] / "tables" / name)


def test_every_table_is_written(audited: Audited) -> None:
    assert sorted(p.name for p in (audited[1] / "tables").iterdir()) == sorted(TABLES)


def test_controller_epochs_show_both_failovers_and_the_election_that_never_won(audited: Audited) -> None:
    epochs = _table(audited, "controller_epochs")
    rows = epochs[
        ["epoch", "leader", "committed", "gap_before_ms", "failed_elections_before"]
    ].values.tolist()
    assert [r[:3] for r in rows] == [[1, 1, True], [3, 2, True], [4, 3, True]]
    assert epochs["gap_before_ms"].tolist()[1:] == [GAP_MS, SECOND_GAP_MS]
    assert epochs["failed_elections_before"].tolist()[1:] == [1, 0]


def test_broker_timeline_has_the_fences_and_restarts(audited: Audited) -> None:
    timeline = _table(audited, "broker_timeline")
    b101 = timeline[timeline["broker"] == 101]
    assert b101[["state", "started_by", "restart"]].values.tolist() == [
        ["FENCED", "REGISTER", False],
        ["UNFENCED", "UNFENCE", False],
        ["FENCED", "FENCE", False],
        ["FENCED", "REREGISTER", True],
        ["UNFENCED", "UNFENCE", False],
    ]
    assert b101["partitions_led_when_fenced"].tolist()[2] == 1
    assert b101["register_to_unfence_ms"].dropna().tolist() == [3 * STEP_MS, STEP_MS]


def test_partition_intervals_offline_and_under_min_isr(incident: Incident, audited: Audited) -> None:
    intervals = _table(audited, "partition_intervals")
    offline = intervals[intervals["condition"] == "offline"]
    assert offline[["topic", "partition", "start_offset", "end_offset", "open"]].values.tolist() == [
        ["events", 0, incident.offsets["fence-103"] + 1, incident.offsets["unfence-103"] + 1, False]
    ]
    assert offline["duration_ms"].tolist() == [4 * STEP_MS]
    under = intervals[(intervals["condition"] == "under_min_isr") & (intervals["topic"] == "orders")]
    assert sorted(under[["partition", "open"]].values.tolist()) == [[0, False], [1, True]]


def test_group_offsets_rewind_and_stall(audited: Audited) -> None:
    groups = _table(audited, "group_offsets")
    rows = groups[
        ["group", "topic", "partition", "commits", "rewinds", "rewound_by", "stalled_commits", "status"]
    ]
    assert rows.fillna(0).values.tolist() == [
        ["g1", "orders", 0, 6, 1, 15, 1, "REWOUND"],
        ["g2", "orders", 1, 2, 0, 0, 0, "OK"],
    ]


def test_group_rebalances_with_the_time_between_them(audited: Audited) -> None:
    rebalances = _table(audited, "group_rebalances")
    rows = rebalances[["group", "generation", "leader", "member_count", "assigned_partitions", "coordinator"]]
    assert rows.values.tolist() == [["g1", 1, "a", 2, 2, 101], ["g1", 3, "a", 1, 2, 101]]
    gaps = rebalances["since_previous_ms"].tolist()
    assert gaps[0] != gaps[0] and gaps[1] > 0  # NaN first: no previous rebalance


def test_topics_configs_and_leadership(audited: Audited) -> None:
    topics = _table(audited, "topic_lifecycle")
    assert topics[["topic", "name_generation", "name_reused", "partitions"]].values.tolist() == [
        ["orders", 1, False, 2],
        ["events", 1, True, 1],
        ["events", 2, True, 1],
    ]
    assert topics["deleted_offset"].notna().tolist() == [False, True, False]
    configs = _table(audited, "config_history")
    assert configs[["resource", "key", "value_after", "operation"]].values.tolist() == [
        ["orders", "min.insync.replicas", "2", "SET"],
        ["orders", "retention.ms", "1000", "SET"],
        ["events", "retention.ms", "5000", "SET"],
    ]
    leadership = _table(audited, "leadership_by_broker").set_index("broker")
    assert leadership["elections_won"].to_dict() == {101: 1, 102: 1, 103: 1}
    assert leadership["unclean_elections_won"].sum() == 0


def test_violations_and_summary(incident: Incident, audited: Audited) -> None:
    summary, out = audited
    violations = _table(audited, "violations")
    assert sorted(violations[["check", "severity"]].values.tolist()) == [
        ["no_damage", "info"],
        ["nodes_agree", "info"],
    ]
    assert (summary["status"], summary["exit_status"], summary["failed_checks"]) == ("passed", 0, [])
    assert {c["check"] for c in summary["checks"]} == CHECK_NAMES and all(
        c["passed"] for c in summary["checks"]
    )
    assert summary["history"] | {"gaps": None} == summary["history"] | {
        "start_offset": 0,
        "end_offset": incident.batches[-1].last_offset,
        "records": incident.batches[-1].next_offset,
        "voters": [1, 2, 3],
        "gaps": None,
    }
    assert summary["headline"]["leader_changes"] == 2 and summary["headline"]["broker_restarts"] == 2
    assert summary["headline"]["failed_elections"] == 1  # epoch 2, skipped between epochs 1 and 3
    assert json.loads((out / "summary.json").read_text())["status"] == "passed"


def test_the_report_holds_its_charts_and_needs_no_network(audited: Audited) -> None:
    page = (audited[1] / "report.html").read_text()
    images = re.findall(r"<img alt='(\w+)' src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert [chart for chart, _ in images] == list(CHART_IDS)
    assert all(len(data) > 2_000 for _, data in images)
    assert "http://" not in page and "https://" not in page
    assert "Verdict: <span class='pass'>passed</span>" in page


def test_the_incidents_of_the_story_in_time_order(incident: Incident, audited: Audited) -> None:
    """Both controller failovers with their gaps, broker 103's fence taking events-0 offline
    until it came back, orders-0 under its min ISR by the same fence and orders-1 by its
    leader's shrink, and group g1's rewind: each with what began and ended it."""
    o = incident.offsets
    found = _table(audited, "incidents")
    rows = found[["kind", "subject", "start_offset", "duration_ms", "open"]]
    assert rows.astype(object).where(rows.notna(), None).values.tolist() == [
        ["controller", "controller 1", 0, 8 * STEP_MS, False],
        ["group_rewound", "group g1 on orders-0", None, 42 * STEP_MS, False],
        ["controller", "controller 2", o["fence-101"] - 1, 17 * STEP_MS, False],
        ["under_min_isr", "orders-1", o["shrink-orders-1"], 24 * STEP_MS, True],
        ["under_min_isr", "orders-0", o["fence-103"], 5 * STEP_MS, False],
        ["offline", "events-0", o["fence-103"] + 1, 4 * STEP_MS, False],
        ["controller", "controller 3", o["config-events"] - 1, 2 * STEP_MS, True],
    ]
    assert found["start_ms"].is_monotonic_increasing
    why, ended = found["why"].tolist(), found["ended"].tolist()
    assert ended[0].startswith(f"lost: node 2 won epoch 3 after 1 failed election; no batch for {GAP_MS} ms")
    assert (
        why[2]
        == f"elected {GAP_MS} ms after the previous leader's last batch, after 1 election that won no leader"
    )
    assert ended[2].startswith(f"lost: node 3 won epoch 4; no batch for {SECOND_GAP_MS} ms")
    assert ended[6] == "still leading at the history's end"
    fenced = "broker 103 fenced (session lapsed or controlled shutdown: the log records both as a fence)"
    assert (
        why[3]
        == "ISR shrunk by leader 102 (a replica fell behind): isr_shrink, leader 102 -> 102, ISR [102, 103] -> [102]"
    )
    assert why[4] == f"{fenced}: isr_shrink, leader 102 -> 102, ISR [102, 103] -> [102]"
    assert ended[4] == "isr_expand, leader 102 -> 102, ISR [102] -> [102, 101]"
    assert why[5] == f"{fenced}: offline, leader 103 -> none, ISR [103] -> [103]"
    assert (
        ended[5] == "broker 103 unfenced: election (clean election), leader none -> 103, ISR [103] -> [103]"
    )
    assert found["what"][1] == "group g1 on orders-0: committed offset rewound 1 time (by 15 offsets in all)"
    offline_rows = [
        line.split(":")[0] + " " + line.split("offset=")[1].split(",")[0] for line in found["rows"][5]
    ]
    assert offline_rows == [
        f"partition_intervals {o['fence-103'] + 1}",
        f"partition_transitions {o['fence-103'] + 1}",
        f"partition_transitions {o['unfence-103'] + 1}",
        f"broker_timeline {o['fence-103'] + 2}",
        f"broker_timeline {o['unfence-103']}",
    ]  # fmt: skip


def test_the_report_opens_with_the_incidents_linking_to_their_rows(audited: Audited) -> None:
    out = audited[1]
    page = (out / "report.html").read_text()
    found = _table(audited, "incidents")
    listed = incident_rows(page)
    assert [cells[2] for cells, _ in listed] == [html.escape(w) for w in found["what"]]
    assert [cells[3] for cells, _ in listed][3:6] == [
        "2.4 s, still at the history&#x27;s end",
        "500 ms",
        "400 ms",
    ]
    assert page.index("<h2 id='incidents'>") < page.index("<h2>Checks</h2>") < page.index("<img alt=")
    _, offline = listed[5]
    assert rows_behind(page, offline) == [html.escape(line) for line in found["rows"][5]]
    assert_links_resolve(page)
    assert render_errors(out / "report.html", out) == []


def test_a_damaged_copy_fails_the_cli_with_exit_status_1(
    spark: Any, incident: Incident, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(incident.root, copy)
    segment = sorted((copy / "node-3" / "data" / "__cluster_metadata-0").glob("*.log"))[0]
    flip_byte(segment, 40)
    status = main(["audit", str(copy), "--out", str(tmp_path / "out"), "--output", "json"])
    summary = json.loads(capsys.readouterr().out)
    assert status == 1 and summary["failed_checks"] == ["no_damage"]
    assert spark.sparkContext._jsc is not None  # the command left the shared session running


def test_relative_paths_from_another_folder_than_the_executors(
    spark: Any, incident: Incident, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Spark's Python workers run in the folder the session started in, and the command in
    another, with relative paths, as on a cluster, where executors run in their workers'
    folders: every path is made absolute before a task is given it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    nodes = [os.path.relpath(incident.root / f"node-{n}", elsewhere) for n in (1, 2, 3)]
    status = main(["audit", *nodes, "--out", "out", "--output", "json"])
    summary = json.loads(capsys.readouterr().out)
    assert (status, summary["status"]) == (0, "passed")
    assert summary["history"]["records"] == incident.batches[-1].next_offset
    assert [f["path"] for f in summary["inputs"]["files"]] == [f.path for f in discover([incident.root])]
    assert json.loads((elsewhere / "out" / "summary.json").read_text()) == summary


def test_a_file_that_cannot_be_read_is_exit_2_not_damage(
    spark: Any, incident: Incident, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A file listed on the driver that a task cannot open (removed since, or not on the
    executor's machine) says nothing about the history: the audit could not run."""
    copy = tmp_path / "copy"
    shutil.copytree(incident.root, copy)
    gone: list[str] = []

    def listed_then_removed(*args: Any, **kwargs: Any) -> Any:
        files = discover(*args, **kwargs)
        gone.append(files[0].path)
        Path(files[0].path).unlink()
        return files

    monkeypatch.setattr(job, "discover", listed_then_removed)
    with pytest.raises(SystemExit) as exited:
        main(["audit", str(copy), "--out", str(tmp_path / "out"), "--output", "json"])
    error = capsys.readouterr().err
    assert exited.value.code == 2
    assert f"could not read 1 of the {len(discover([copy])) + 1} files ({gone[0]}: cannot read" in error
    assert "no_damage" not in error and not (tmp_path / "out" / "summary.json").exists()


def test_perf_audit_writes_a_history_and_audits_it_clean(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["perf", "audit", "--records", "3000", "--dir", str(tmp_path), "--output", "json"])
    result = json.loads(capsys.readouterr().out)
    assert status == 0 and result["checks_failed"] == []
    assert result["records"] >= 3000 and result["generated"]["records"] == result["records"]
    assert set(result["steps_s"]) >= {"heads", "walk_and_merge", "replay", "tables", "report"}
    assert result["session_start_seconds"] >= 0 and result["workers_start_seconds"] >= 0
    generated = result["generated"]
    assert result["baseline"]["frames"] == generated["batches"] + generated["snapshots"]
    assert result["baseline"]["bad_crcs"] == 0 and result["baseline"]["unwalked_bytes"] == 0
    assert result["baseline_seconds"] > 0 and result["ratio"] > 0
    assert result["ratio_goal"] == 4 and result["ratio_goal_met"] == (result["ratio"] <= 4)
    assert [r["ratio"] for r in result["rounds"]] == [result["ratio"]]  # one round: its own ratio
    for job_peaks in result["memory_peak_mib"].values():  # local[2]: the JVM and the workers are here
        assert all(job_peaks[role] > 0 for role in ("driver", "jvm", "python_workers")), job_peaks
    assert list(result["memory_peak_mib_by_step"]) == list(result["steps_s"])
    by_step = result["driver_peak_mib_by_step"]  # a peak so far: never lower at a later step
    assert list(by_step) == list(result["steps_s"]) and list(by_step.values()) == sorted(by_step.values())
    assert by_step["heads"] > 0


def test_rates_bucketed_by_the_chunks_add_up_at_the_historys_width(spark: Any) -> None:
    """``per_bucket`` re-buckets what the chunks counted at their own widths (each dividing
    the history's) exactly, before 1970 too, where flooring and truncating differ."""
    chunks = random.Random(7)
    width = WIDTHS_MS[4]
    rows = []
    for _ in range(300):
        chunk_width = chunks.choice(WIDTHS_MS[:4])
        bucket = chunks.randrange(-5 * width, 5 * width) // chunk_width * chunk_width
        rows.append((bucket, chunks.choice(["TOPIC_RECORD", "NO_OP_RECORD"]), chunks.randrange(1, 1_000)))
    expected: dict[tuple[int, str], int] = {}
    for bucket, type_name, count in rows:
        key = (bucket // width * width, type_name)
        expected[key] = expected.get(key, 0) + count
    columns = dict(zip(RATE_SCHEMA.names, zip(*rows, strict=True), strict=True))
    frame = spark.createDataFrame(pa.Table.from_pydict(columns, RATE_SCHEMA))
    summed = job.per_bucket(frame, width, "type", "count")
    assert {(b, t): c for b, t, c in summed.itertuples(index=False, name=None)} == expected
    assert any(bucket < 0 for bucket, _ in expected)
