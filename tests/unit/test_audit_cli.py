"""The audit's commands without a JVM: argument checks, ``metadata collect``'s read-only
copies and manifest, and that nothing but ``raftka audit`` loads pyspark."""

from __future__ import annotations

import hashlib
import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from raftka.audit.baseline import Checked
from raftka.audit.out import MARKER, claim
from raftka.audit.plain import audit_paths
from raftka.cli.main import main
from raftka.tools.perf import perf_audit
from tests.unit.audit_incident import Incident, build_incident


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Incident:
    return build_incident(tmp_path_factory.mktemp("incident"))


def test_servers_clients_and_other_commands_never_import_pyspark() -> None:
    code = (
        "import sys\n"
        "import raftka.cli.main, raftka.broker.server, raftka.metadata.server, raftka.client.admin, raftka.client.producer, raftka.client.consumer\n"
        "raftka.cli.main.build_parser()\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j', 'audit'))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--driver-memory", "lots"], "--driver-memory: expected a size"),
        (["--master", " "], "--master: empty"),
        (["--out", "s3a://bucket/audit"], "--out: s3a://bucket/audit: the audit reads and writes local paths only"),
    ],
)
def test_audit_arguments_are_checked(
    incident: Incident, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Exit status 2, not 1: a gate must tell an audit that could not run from a failed check."""
    with pytest.raises(SystemExit) as exit_:
        main(["audit", str(incident.root), "--out", str(tmp_path / "out"), *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_an_input_the_audit_cannot_read_is_refused_before_spark_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["audit", "hdfs://namenode:8020/history", "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2
    assert "paths: hdfs://namenode:8020/history: the audit reads and writes local paths only" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_audit_never_takes_a_folder_it_did_not_make(
    incident: Incident, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out ~`` must not cost ``~/scratch`` or ``~/tables``: refused before Spark starts."""
    home = tmp_path / "home"
    (home / "scratch").mkdir(parents=True)
    (home / "scratch" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as exit_:
        main(["audit", str(incident.root), "--out", str(home)])
    assert exit_.value.code == 2
    assert f"--out: {home} holds scratch and no earlier audit made it" in capsys.readouterr().err
    assert (home / "scratch" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in home.iterdir()) == ["scratch"]

    a_file = tmp_path / "report"
    a_file.write_text("x")
    with pytest.raises(SystemExit) as exit_:
        main(["audit", str(incident.root), "--out", str(a_file)])
    assert exit_.value.code == 2 and "is not a folder" in capsys.readouterr().err


def test_an_audits_own_folder_and_an_empty_one_are_taken(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    claim(empty)
    (empty / "tables").mkdir()  # what an audit that stopped halfway leaves
    claim(empty)  # taken again: its marker says an audit made it
    claim(tmp_path / "new" / "out")
    assert (tmp_path / "new" / "out" / MARKER).is_file()


def test_perf_audit_records_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["perf", "audit", "--records", "0"])
    assert exit_.value.code == 1 and "--records: expected 1 to" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["perf", "audit", "--driver-memory", "6 GB"])
    assert exit_.value.code == 2 and "--driver-memory: expected a size" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["perf", "audit", "--repeat", "0"])
    assert exit_.value.code == 1 and "--repeat: expected 1 to 20, got 0" in capsys.readouterr().err


def test_perf_audit_reports_medians_and_the_median_of_each_rounds_own_ratio() -> None:
    summary = {"history": {"records": 1000}, "timings_s": {}, "cpu_s": {}, "driver_peak_mib": {}, "replay_tasks": {},
               "tables_s": {}, "failed_checks": []}  # fmt: skip
    rounds = [
        perf_audit.Round(baseline, Checked(5, 500, 50, 0, 0), {"driver": 100.0, "jvm": 900.0, "python_workers": None},
                         audit, summary, {"driver": driver, "jvm": 800.0, "python_workers": None}, {})
        for baseline, audit, driver in ((1.0, 3.0, 300.0), (4.0, 20.0, 200.0), (2.0, 10.0, 250.0))
    ]  # fmt: skip
    result = perf_audit.make_result(rounds, None, {}, "local[2]")
    assert (result["baseline_seconds"], result["audit_seconds"]) == (2.0, 10.0)
    assert result["ratio"] == 5.0 and not result["ratio_goal_met"]  # of 3, 5 and 5: not 10 / 2
    assert [r["ratio"] for r in result["rounds"]] == [3.0, 5.0, 5.0]
    assert result["memory_peak_mib"] == {
        "audit": {"driver": 300.0, "jvm": 800.0, "python_workers": None},
        "baseline": {"driver": 100.0, "jvm": 900.0, "python_workers": None},
    }
    assert result["records_per_s"] == 100 and result["baseline"]["frames"] == 50


def test_collect_copies_every_history_file_read_only_with_checksums(
    incident: Incident, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "collected"
    sources = [str(incident.node_dir(n)) for n in (1, 2, 3)]
    assert main(["metadata", "collect", *sources, "--out", str(out), "--output", "json"]) == 0
    manifests = json.loads(capsys.readouterr().out)
    assert [m["node_id"] for m in manifests] == [1, 2, 3]
    node1 = manifests[0]
    names = [f["path"] for f in node1["files"]]
    assert names[0] == "data/meta.properties"
    assert any("/archive/" in n for n in names) and any(n.endswith(".checkpoint") for n in names)
    for entry in node1["files"]:
        copy = out / "node-1" / entry["path"]
        assert hashlib.sha256(copy.read_bytes()).hexdigest() == entry["sha256"]
        assert stat.S_IMODE(copy.stat().st_mode) == 0o444
    assert json.loads((out / "node-1" / "MANIFEST.json").read_text()) == node1
    # the copies audit exactly like the originals
    original = audit_paths([incident.root])
    copied = audit_paths([out])
    assert [e["seq"] for e in copied.events] == [e["seq"] for e in original.events]
    assert sorted(v["check"] for v in copied.all_violations) == sorted(
        v["check"] for v in original.all_violations
    )


def test_collect_refuses_to_overwrite(
    incident: Incident, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["metadata", "collect", str(incident.node_dir(2)), "--out", str(tmp_path)])
    with pytest.raises(SystemExit) as exit_:
        main(["metadata", "collect", str(incident.node_dir(2)), "--out", str(tmp_path)])
    assert exit_.value.code == 1 and "node 2 was collected there already" in capsys.readouterr().err
