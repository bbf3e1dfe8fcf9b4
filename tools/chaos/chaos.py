"""``raftka chaos kill-leader``: measure failover on the local cluster, round after round.

A round: wait until the cluster is fully healthy, signal the leader, time until a
survivor leads a higher epoch (``elected_ms``: the election is over) and until it has
committed in it (``failover_ms``: it exposes a high watermark only once its LeaderChange
record is committed, and may then act as controller) and, with ``--until offset-commit``,
until a survivor acknowledges an OffsetCommit (the failover a client sees), then bring
the victim back and time its catch-up. The rounds talk to the cluster through
``ChaosTarget`` so the timing logic can be tested against a fake cluster, without
processes.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from raftka.command import local, output
from raftka.command.errors import CliError
from raftka.command.quorum_client import DescribeQuorumResponse, QuorumClient
from raftka.command.tls_args import add_tls_options, client_tls
from raftka.tools.chaos.offset_probe import OffsetCommitProbe
from raftka.v1 import raft_pb2

POLL_INTERVAL_S = 0.005
DESCRIBE_TIMEOUT_S = 0.2  # a poll must not stall on a paused node
SIGNALS = {"KILL": signal.SIGKILL, "STOP": signal.SIGSTOP}
UNTIL = ("leader", "offset-commit")


class ChaosTarget(Protocol):
    def node_ids(self) -> list[int]: ...

    def describe(self, node_id: int) -> DescribeQuorumResponse | None:
        """The node's answer, or None if it does not answer within a short deadline."""
        ...

    def is_alive(self, node_id: int) -> bool: ...

    def listening(self, node_id: int) -> bool:
        """Whether the node accepts connections: its process has started up."""
        ...

    def send_signal(self, node_id: int, sig: signal.Signals) -> None: ...

    def restart(self, node_id: int) -> None:
        """Start a killed node again, the way ``cluster up`` does."""
        ...


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chaos = commands.add_parser("chaos", help="fault injection against the local cluster")
    actions = chaos.add_subparsers(dest="action", required=True, metavar="ACTION")
    kill = actions.add_parser("kill-leader", help="signal the leader, time the failover and the catch-up")
    kill.add_argument("--rounds", type=int, default=1, help="how many leaders to kill (default 1)")
    kill.add_argument(
        "--signal", choices=sorted(SIGNALS), default="KILL", help="KILL (crash) or STOP (pause, then resume)"
    )
    kill.add_argument("--timeout-s", type=float, default=30.0, help="bound on each wait in a round")
    kill.add_argument(
        "--until",
        choices=UNTIL,
        default="leader",
        help="failover ends at a committed leader (default) or also at the first OffsetCommit a survivor acknowledges",
    )
    kill.add_argument("--dir", type=Path, help="cluster directory (default: .raftka/local)")
    output.add_output_option(kill)
    add_tls_options(kill)
    kill.set_defaults(func=run_kill_leader)
    from raftka.tools.chaos import chaos_broker, chaos_network

    chaos_broker.register(actions)
    chaos_network.register(actions)


def run_kill_leader(args: argparse.Namespace) -> int:
    if args.rounds < 1:
        raise CliError(f"--rounds: expected 1 or more, got {args.rounds}")
    cluster = local.load(local.resolve_dir(args.dir))
    json_out = args.output == "json"
    controllers = {node.id: node.address for node in cluster.controllers()}
    tls = client_tls(args)
    with (
        QuorumClient(call_timeout_s=DESCRIBE_TIMEOUT_S, tls=tls) as client,
        OffsetCommitProbe(controllers, DESCRIBE_TIMEOUT_S, tls) as probe,
    ):
        if args.until == "offset-commit":
            probe.prepare()
        target = LocalTarget(cluster, client)
        result = kill_leader(
            target,
            args.rounds,
            SIGNALS[args.signal],
            args.timeout_s,
            on_round=None if json_out else lambda r: print(format_round(r), flush=True),
            commit_probe=probe if args.until == "offset-commit" else None,
        )
    print(output.to_json(result) if json_out else format_summary(result["summary"]))
    return 0


def kill_leader(
    target: ChaosTarget,
    rounds: int,
    sig: signal.Signals,
    timeout_s: float,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    commit_probe: Callable[[list[int]], bool] | None = None,
) -> dict[str, Any]:
    """Run the rounds; the clock and sleep are parameters so tests can run them in fake time.

    ``commit_probe(survivors)``: one client write attempt; if given, a failover also
    waits for its first success and reports the time as ``commit_ms``."""
    if len(target.node_ids()) < 3:
        raise CliError("chaos needs at least 3 controllers, so that a majority survives the victim")
    results = []
    for number in range(1, rounds + 1):
        result = _round(target, number, sig, timeout_s, clock, sleep, commit_probe)
        results.append(result)
        if on_round is not None:
            on_round(result)
    return {"rounds": results, "summary": summarize(results)}


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    failovers = [r["failover_ms"] for r in rounds]
    elections = [r["elected_ms"] for r in rounds]
    epochs: list[int] = []
    for r in rounds:
        for epoch in (r["old_epoch"], r["new_epoch"], r["final_epoch"]):
            if not epochs or epochs[-1] != epoch:
                epochs.append(epoch)
    summary = {
        "rounds": len(rounds),
        "median_ms": round(statistics.median(failovers), 1),
        "max_ms": max(failovers),
        "min_ms": min(failovers),
        "elected_median_ms": round(statistics.median(elections), 1),
        "elected_max_ms": max(elections),
        "epochs": epochs,
    }
    commits = [r["commit_ms"] for r in rounds if r.get("commit_ms") is not None]
    if commits:
        summary |= {"commit_median_ms": round(statistics.median(commits), 1), "commit_max_ms": max(commits)}
    return summary


def format_round(r: dict[str, Any]) -> str:
    line = (
        f"round {r['round']}: SIG{r['signal']} leader {r['victim']} (epoch {r['old_epoch']}) -> "
        f"node {r['new_leader']} elected in epoch {r['new_epoch']} after {r['elected_ms']} ms, "
        f"committed after {r['failover_ms']} ms; "
        f"node {r['victim']} listening after {r['restart_ms']} ms, caught up after {r['catchup_ms']} ms"
    )
    if r.get("commit_ms") is not None:
        line += f"; first offset commit at a survivor after {r['commit_ms']} ms"
    if r["forced_election"]:
        line += f"; its return forced an election (epoch {r['final_epoch']})"
    return line


def format_summary(s: dict[str, Any]) -> str:
    line = (
        f"{s['rounds']} round(s): failover (a new leader committed) median {s['median_ms']} ms, "
        f"min {s['min_ms']} ms, max {s['max_ms']} ms; elected median {s['elected_median_ms']} ms, "
        f"max {s['elected_max_ms']} ms; epochs {' -> '.join(str(e) for e in s['epochs'])}"
    )
    if "commit_median_ms" in s:
        line += f"; first offset commit median {s['commit_median_ms']} ms, max {s['commit_max_ms']} ms"
    return line


def _round(
    target: ChaosTarget,
    number: int,
    sig: signal.Signals,
    timeout_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    commit_probe: Callable[[list[int]], bool] | None = None,
) -> dict[str, Any]:
    def waited_too_long(since: float, what: str) -> None:
        if clock() - since > timeout_s:
            raise CliError(
                f"round {number}: {what} within {timeout_s:g} s; see the node logs "
                "(and 'raftka cluster up' restarts nodes that are down)"
            )

    leader = _wait_healthy(target, waited_too_long, clock, sleep)
    victim, old_epoch = leader.leader_id, leader.leader_epoch
    survivors = [n for n in target.node_ids() if n != victim]

    start = clock()
    target.send_signal(victim, sig)
    resumed = False
    try:
        new = elected_ms = failover_ms = commit_ms = None
        while True:
            if new is None and (leader := _leader(target, survivors, old_epoch)) is not None:
                if elected_ms is None:
                    elected_ms = _ms_since(start, clock)
                if leader.high_watermark >= 0:
                    new, failover_ms = leader, _ms_since(start, clock)
            if commit_probe is not None and commit_ms is None and commit_probe(survivors):
                commit_ms = _ms_since(start, clock)
            if new is not None and (commit_probe is None or commit_ms is not None):
                break
            waited_too_long(
                start,
                f"no survivor led an epoch above {old_epoch} after {sig.name} of node {victim}"
                if new is None
                else f"no survivor acknowledged an offset commit after {sig.name} of node {victim}",
            )
            sleep(POLL_INTERVAL_S)

        start = clock()
        if sig == signal.SIGSTOP:
            target.send_signal(victim, signal.SIGCONT)
        else:
            target.restart(victim)
        resumed = True
        caught_up_at = new.high_watermark
        final_epoch = new.leader_epoch
        restart_ms = None
        while True:
            if restart_ms is None and target.listening(victim):
                restart_ms = _ms_since(start, clock)  # separates process start-up from catching up
            current = _committed_leader(target, target.node_ids(), old_epoch)
            if current is not None:
                final_epoch = max(final_epoch, current.leader_epoch)
                if _log_end(current, victim) >= caught_up_at:
                    break
            waited_too_long(start, f"node {victim} did not catch up to offset {caught_up_at}")
            sleep(POLL_INTERVAL_S)
        catchup_ms = _ms_since(start, clock)
    finally:
        if sig == signal.SIGSTOP and not resumed:
            target.send_signal(victim, signal.SIGCONT)  # never leave a paused node behind
    return {
        "round": number,
        "victim": victim,
        "signal": sig.name.removeprefix("SIG"),
        "old_epoch": old_epoch,
        "new_epoch": new.leader_epoch,
        "new_leader": new.leader_id,
        "elected_ms": elected_ms,
        "failover_ms": failover_ms,
        "commit_ms": commit_ms,
        "restart_ms": restart_ms,
        "catchup_ms": catchup_ms,
        "final_epoch": final_epoch,
        "forced_election": final_epoch > new.leader_epoch,
    }


def _wait_healthy(
    target: ChaosTarget,
    waited_too_long: Callable[[float, str], None],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> DescribeQuorumResponse:
    """Every node up and answering, a committed leader, and every voter holding the high
    watermark. Answering matters: our channel to a node restarted after a long outage may
    still be in gRPC's reconnect backoff, and the next round would time that backoff
    instead of the failover if the node were elected."""
    start = clock()
    while True:
        nodes = target.node_ids()
        if all(target.is_alive(n) for n in nodes) and all(target.describe(n) is not None for n in nodes):
            leader = _committed_leader(target, target.node_ids(), -1)
            if leader is not None and all(v.log_end_offset >= leader.high_watermark for v in leader.voters):
                return leader
        waited_too_long(start, "the cluster did not become healthy (all nodes up, voters caught up)")
        sleep(POLL_INTERVAL_S)


def _committed_leader(
    target: ChaosTarget, node_ids: list[int], above_epoch: int
) -> DescribeQuorumResponse | None:
    """A node that answers as leader of an epoch above ``above_epoch`` and has committed in it."""
    leader = _leader(target, node_ids, above_epoch)
    return leader if leader is not None and leader.high_watermark >= 0 else None


def _leader(target: ChaosTarget, node_ids: list[int], above_epoch: int) -> DescribeQuorumResponse | None:
    """A node that answers as leader of an epoch above ``above_epoch``, committed in it or not."""
    for node_id in node_ids:
        resp = target.describe(node_id)
        if (
            resp is not None
            and resp.error == raft_pb2.RAFT_ERROR_NONE
            and resp.leader_id == node_id
            and resp.leader_epoch > above_epoch
        ):
            return resp
    return None


def _log_end(resp: DescribeQuorumResponse, node_id: int) -> int:
    return next((v.log_end_offset for v in resp.voters if v.node_id == node_id), -1)


def _ms_since(start: float, clock: Callable[[], float]) -> float:
    return round((clock() - start) * 1000, 1)


class LocalTarget:
    """The local cluster's processes, as recorded in cluster.json."""

    def __init__(self, cluster: local.LocalCluster, client: QuorumClient) -> None:
        self.cluster = cluster
        self.client = client
        self._children: dict[int, subprocess.Popen[bytes]] = {}  # nodes this command restarted

    def node_ids(self) -> list[int]:
        return [node.id for node in self.cluster.controllers()]  # the quorum: brokers never lead

    def describe(self, node_id: int) -> DescribeQuorumResponse | None:
        return self.client.try_describe(self.cluster.node(node_id).address)

    def is_alive(self, node_id: int) -> bool:
        return local.is_alive(self.cluster.node(node_id))

    def listening(self, node_id: int) -> bool:
        """A plain TCP connect: unlike a gRPC call, not delayed by the channel's reconnect backoff."""
        host, _, port = self.cluster.node(node_id).address.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=DESCRIBE_TIMEOUT_S).close()
        except OSError:
            return False
        return True

    def send_signal(self, node_id: int, sig: signal.Signals) -> None:
        node = self.cluster.node(node_id)
        if node.pid is None or not local.is_alive(node):
            raise CliError(f"node {node_id} is not running")
        os.kill(node.pid, sig)

    def restart(self, node_id: int) -> None:
        node = self.cluster.node(node_id)
        child = self._children.pop(node_id, None)
        if child is not None:
            child.wait(timeout=10)  # reap it: our own child would otherwise linger as a zombie
        deadline = time.monotonic() + 10
        while local.is_alive(node):
            if time.monotonic() > deadline:
                raise CliError(f"node {node_id} (pid {node.pid}) is still running after SIGKILL")
            time.sleep(POLL_INTERVAL_S)
        self._children[node_id] = local.start_node(node)
        local.save(self.cluster)
