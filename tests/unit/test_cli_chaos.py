"""chaos kill-leader's timing logic against a scripted fake cluster and a fake clock:
failover ends only when a survivor has *committed* in a higher epoch, catch-up when the
victim holds the high watermark, and a paused node is always resumed."""

from __future__ import annotations

import signal

import pytest

from raftka.command.errors import CliError
from raftka.tools.chaos import chaos
from raftka.v1 import raft_pb2

ELECTED_AFTER_S = 0.100  # a survivor wins the election this long after the signal
COMMITTED_AFTER_S = 0.120  # ... and its LeaderChange commits at this time
CAUGHT_UP_AFTER_S = 0.400  # the victim holds the high watermark this long after it is back


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeCluster:
    """Three nodes with a scripted failover: node ids 1-3, leader 1 in epoch 3."""

    def __init__(
        self,
        clock: FakeClock,
        elect: bool = True,
        resume_forces_election: bool = False,
        silent_after_restart_s: float = 0.0,
    ) -> None:
        self.clock = clock
        self.silent_after_restart_s = silent_after_restart_s  # up, but our calls fail (reconnect backoff)
        self.restarted_at: dict[int, float] = {}
        self.signalled: list[float] = []  # when each signal but SIGCONT was sent
        self.elect = elect
        self.resume_forces_election = resume_forces_election
        self.leader, self.epoch, self.high_watermark = 1, 3, 10
        self.down: set[int] = set()
        self.log_end = {1: 10, 2: 10, 3: 10}
        self.signalled_at: float | None = None
        self.back_at: float | None = None
        self.victim = 0
        self.signals: list[tuple[int, signal.Signals]] = []
        self.restarts: list[int] = []

    def node_ids(self) -> list[int]:
        return [1, 2, 3]

    def is_alive(self, node_id: int) -> bool:
        return node_id not in self.down

    def listening(self, node_id: int) -> bool:
        return node_id not in self.down

    def send_signal(self, node_id: int, sig: signal.Signals) -> None:
        self.signals.append((node_id, sig))
        if sig == signal.SIGCONT:
            self._back(node_id)
            if self.resume_forces_election:
                self.epoch += 1
            return
        self.down.add(node_id)
        self.victim, self.signalled_at = node_id, self.clock()
        self.signalled.append(self.clock())

    def restart(self, node_id: int) -> None:
        self.restarts.append(node_id)
        self.restarted_at[node_id] = self.clock()
        self._back(node_id)

    def _back(self, node_id: int) -> None:
        self.down.discard(node_id)
        self.back_at = self.clock()
        self.log_end[node_id] = 5  # behind: it missed the new epoch's records

    def describe(self, node_id: int) -> raft_pb2.DescribeQuorumResponse | None:
        self._advance()
        if node_id in self.down:
            return None
        if self.clock() - self.restarted_at.get(node_id, float("-inf")) < self.silent_after_restart_s:
            return None
        voters = [raft_pb2.ReplicaDescription(node_id=n, log_end_offset=e) for n, e in self.log_end.items()]
        if node_id != self.leader:
            return raft_pb2.DescribeQuorumResponse(
                error=raft_pb2.RAFT_ERROR_NOT_LEADER,
                node_id=node_id,
                leader_id=self.leader,
                leader_epoch=self.epoch,
            )
        return raft_pb2.DescribeQuorumResponse(
            node_id=node_id,
            leader_id=node_id,
            leader_epoch=self.epoch,
            high_watermark=self.high_watermark,
            voters=voters,
            role="leader",
        )

    def _advance(self) -> None:
        """Move the script forward to the clock's time."""
        now = self.clock()
        since_signal = now - self.signalled_at if self.signalled_at is not None else -1.0
        if self.elect and self.leader == self.victim and since_signal >= ELECTED_AFTER_S:
            self.leader = next(n for n in self.node_ids() if n not in self.down)
            self.epoch += 1
            self.high_watermark = -1  # no high watermark until LeaderChange commits
        if self.leader != self.victim and self.high_watermark < 0 and since_signal >= COMMITTED_AFTER_S:
            self.high_watermark = 11
            for n in self.node_ids():
                if n not in self.down:
                    self.log_end[n] = 11
        if self.back_at is not None and now - self.back_at >= CAUGHT_UP_AFTER_S:
            self.log_end[self.victim] = self.high_watermark
            self.back_at = None
            self.signalled_at = None


def run(
    cluster: FakeCluster, clock: FakeClock, rounds: int = 1, sig: signal.Signals = signal.SIGKILL
) -> dict:
    return chaos.kill_leader(cluster, rounds, sig, timeout_s=5, clock=clock, sleep=clock.sleep)


def test_kill_round_times_failover_to_the_commit_not_the_election() -> None:
    clock = FakeClock()
    cluster = FakeCluster(clock)
    result = run(cluster, clock)
    (r,) = result["rounds"]
    assert (r["round"], r["victim"], r["signal"], r["old_epoch"]) == (1, 1, "KILL", 3)
    assert (r["new_leader"], r["new_epoch"]) == (2, 4)
    assert ELECTED_AFTER_S * 1000 <= r["elected_ms"] <= ELECTED_AFTER_S * 1000 + 10
    assert COMMITTED_AFTER_S * 1000 <= r["failover_ms"] <= COMMITTED_AFTER_S * 1000 + 10
    assert CAUGHT_UP_AFTER_S * 1000 <= r["catchup_ms"] <= CAUGHT_UP_AFTER_S * 1000 + 10
    assert r["restart_ms"] == 0.0  # the fake answers as soon as it is restarted
    assert r["forced_election"] is False
    assert cluster.restarts == [1]
    assert set(r) >= {
        "round",
        "victim",
        "signal",
        "old_epoch",
        "new_epoch",
        "new_leader",
        "elected_ms",
        "failover_ms",
        "catchup_ms",
    }


def test_rounds_are_summarized() -> None:
    clock = FakeClock()
    result = run(FakeCluster(clock), clock, rounds=3)
    assert [r["victim"] for r in result["rounds"]] == [1, 2, 1]
    summary = result["summary"]
    assert summary["rounds"] == 3
    assert summary["epochs"] == [3, 4, 5, 6]
    assert summary["min_ms"] <= summary["median_ms"] <= summary["max_ms"]
    assert summary["elected_median_ms"] <= summary["elected_max_ms"] <= summary["max_ms"]


def test_a_round_starts_only_once_every_node_answers_the_tool() -> None:
    """A restarted node this tool cannot reach yet (its channel backs off) could be elected
    next round, and the round would time the backoff: the round waits for it to answer."""
    clock = FakeClock()
    cluster = FakeCluster(clock, silent_after_restart_s=1.0)
    run(cluster, clock, rounds=2)
    first_victim = cluster.restarts[0]
    assert cluster.signalled[1] - cluster.restarted_at[first_victim] >= 1.0


def test_stop_round_resumes_and_reports_a_forced_election() -> None:
    clock = FakeClock()
    cluster = FakeCluster(clock, resume_forces_election=True)
    (r,) = run(cluster, clock, sig=signal.SIGSTOP)["rounds"]
    assert cluster.signals == [(1, signal.SIGSTOP), (1, signal.SIGCONT)]
    assert cluster.restarts == []
    assert r["signal"] == "STOP"
    assert r["forced_election"] is True
    assert r["final_epoch"] == r["new_epoch"] + 1
    assert "its return forced an election (epoch 5)" in chaos.format_round(r)


def test_no_failover_fails_the_round_and_resumes_a_paused_leader() -> None:
    clock = FakeClock()
    cluster = FakeCluster(clock, elect=False)
    with pytest.raises(CliError, match="round 1: no survivor led an epoch above 3 after SIGSTOP of node 1"):
        run(cluster, clock, sig=signal.SIGSTOP)
    assert cluster.signals[-1] == (1, signal.SIGCONT)


def test_chaos_needs_a_surviving_majority() -> None:
    clock = FakeClock()
    cluster = FakeCluster(clock)
    cluster.node_ids = lambda: [1, 2]  # type: ignore[method-assign]
    with pytest.raises(CliError, match="at least 3 controllers"):
        run(cluster, clock)


def test_summary_line() -> None:
    summary = {
        "rounds": 2,
        "median_ms": 100.5,
        "min_ms": 90.0,
        "max_ms": 111.0,
        "elected_median_ms": 80.5,
        "elected_max_ms": 95.0,
        "epochs": [3, 4, 5],
    }
    assert chaos.format_summary(summary) == (
        "2 round(s): failover (a new leader committed) median 100.5 ms, min 90.0 ms, max 111.0 ms; "
        "elected median 80.5 ms, max 95.0 ms; epochs 3 -> 4 -> 5"
    )
