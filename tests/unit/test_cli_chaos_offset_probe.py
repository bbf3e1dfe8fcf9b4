"""chaos kill-leader --until offset-commit: the failover a client sees ends at the first
offset commit a survivor acknowledges, which comes after the raft-level failover, and is
summarized next to it; a survivor that never acknowledges fails the round."""

from __future__ import annotations

import signal

import pytest

from raftka.command.errors import CliError
from raftka.tools.chaos import chaos
from tests.unit.test_cli_chaos import COMMITTED_AFTER_S, FakeClock, FakeCluster

ACTIVE_AFTER_S = 0.180  # the new controller answers commits this long after the signal


class FakeProbe:
    """Succeeds once the cluster has a new leader and ACTIVE_AFTER_S has passed."""

    def __init__(self, cluster: FakeCluster, clock: FakeClock, works: bool = True) -> None:
        self.cluster, self.clock, self.works = cluster, clock, works
        self.asked: list[list[int]] = []

    def __call__(self, survivors: list[int]) -> bool:
        self.asked.append(list(survivors))
        signalled = self.cluster.signalled_at
        return self.works and signalled is not None and self.clock() - signalled >= ACTIVE_AFTER_S


def run(cluster: FakeCluster, clock: FakeClock, probe: FakeProbe, rounds: int = 1) -> dict:
    return chaos.kill_leader(
        cluster, rounds, signal.SIGKILL, timeout_s=5, clock=clock, sleep=clock.sleep, commit_probe=probe
    )


def test_the_first_acknowledged_commit_ends_the_clients_failover() -> None:
    clock = FakeClock()
    cluster = FakeCluster(clock)
    probe = FakeProbe(cluster, clock)
    result = run(cluster, clock, probe, rounds=2)
    first = result["rounds"][0]
    assert COMMITTED_AFTER_S * 1000 <= first["failover_ms"] <= COMMITTED_AFTER_S * 1000 + 10
    assert ACTIVE_AFTER_S * 1000 <= first["commit_ms"] <= ACTIVE_AFTER_S * 1000 + 10
    assert probe.asked[0] == [2, 3]  # only the survivors are asked
    assert "first offset commit at a survivor after" in chaos.format_round(first)
    summary = result["summary"]
    assert summary["commit_median_ms"] <= summary["commit_max_ms"]
    assert "first offset commit median" in chaos.format_summary(summary)


def test_without_a_probe_nothing_about_commits_is_reported() -> None:
    clock = FakeClock()
    result = chaos.kill_leader(
        FakeCluster(clock), 1, signal.SIGKILL, timeout_s=5, clock=clock, sleep=clock.sleep
    )
    assert result["rounds"][0]["commit_ms"] is None
    assert "commit_median_ms" not in result["summary"]


def test_no_acknowledged_commit_fails_the_round() -> None:
    clock = FakeClock()
    cluster = FakeCluster(clock)
    with pytest.raises(
        CliError, match="round 1: no survivor acknowledged an offset commit after SIGKILL of node 1"
    ):
        run(cluster, clock, FakeProbe(cluster, clock, works=False))
