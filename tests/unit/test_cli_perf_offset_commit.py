"""``raftka perf offset-commit``: every option checked before anything connects, with the
flag named, and the report's arithmetic. The run itself needs a cluster: it is not run
here (see docs/performance.md for a smoke run)."""

from __future__ import annotations

import argparse

import pytest

from raftka.cli.main import main
from raftka.tools.perf.perf_offset_commit import GROUP_PREFIX, commit_report, group_id

RUN = ["perf", "offset-commit", "--bootstrap-server", "127.0.0.1:1", "--commits", "5"]


@pytest.mark.parametrize(
    ("extra", "status", "problem"),
    [
        (["--commits", "0"], 2, "argument --commits: expected 1 or more, got 0"),
        (["--warmup", "-1"], 2, "argument --warmup"),
        (["--group", " "], 1, "--group: expected a group id, got an empty one"),
        (["--partitions", "0"], 2, "argument --partitions: expected 1 or more"),
        (["--topic", "a b"], 1, "--topic: topic name 'a b' contains characters other than"),
        (["--replication-factor", "40000"], 1, "--replication-factor: at most 32767, got 40000"),
        (
            ["--replication-factor", "1", "--min-insync-replicas", "2"],
            1,
            "--min-insync-replicas: at most --replication-factor (1), got 2",
        ),
        (["--config", "linger.ms"], 1, "--config: expected KEY=VALUE, got 'linger.ms'"),
        (["--config", "group.id=g"], 1, "--config: group.id is set by this command (--group)"),
        (["--config", "bootstrap.servers=x:1"], 1, "--config: bootstrap.servers is set by this command"),
        (["--bootstrap-server", "nohost"], 1, "--bootstrap-server"),
        (
            ["--config", "no.such.property=1"],
            1,
            "librdkafka refused the consumer's configuration (--config?): No such configuration property",
        ),
    ],
)
def test_perf_offset_commit_refuses_a_bad_option_naming_it_before_connecting(
    extra: list[str], status: int, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("confluent_kafka")
    with pytest.raises(SystemExit) as exit_info:
        main(RUN + extra)
    line = capsys.readouterr().err.strip()
    assert (exit_info.value.code, problem in line) == (status, True), line
    assert line.startswith("raftka: error: ") and "\n" not in line


def test_the_report_rates_the_successful_commits_over_the_whole_run() -> None:
    latencies = [float(ms) for ms in range(1, 1001)]  # 1..1000 ms
    report = commit_report(
        latencies, elapsed_s=4.0, errors={"REBALANCE_IN_PROGRESS": 2, "COORDINATOR_NOT_AVAILABLE": 1}
    )
    assert report["commits"] == 1000
    assert report["commits_per_s"] == 250.0
    assert (report["p50_ms"], report["p99_ms"], report["p999_ms"], report["max_ms"]) == (
        501.0,
        990.0,
        999.0,
        1000.0,
    )
    assert report["avg_ms"] == 500.5
    assert report["errors"] == 3
    assert list(report["errors_by_kind"]) == ["COORDINATOR_NOT_AVAILABLE", "REBALANCE_IN_PROGRESS"]


def test_a_run_without_a_successful_commit_reports_zeros() -> None:
    report = commit_report([], elapsed_s=0.0, errors={"NOT_COORDINATOR": 5})
    assert (report["commits"], report["commits_per_s"], report["p50_ms"], report["errors"]) == (
        0,
        0.0,
        0.0,
        5,
    )


def test_each_run_gets_a_new_group_unless_one_is_named() -> None:
    assert group_id(argparse.Namespace(group=None)).startswith(GROUP_PREFIX)
    assert group_id(argparse.Namespace(group="mine")) == "mine"
