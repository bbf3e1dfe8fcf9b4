"""``raftka chaos partition-broker``, ``lossy-broker`` and ``slow-broker``: network faults on the busiest
partition leader under an acks=all load, then the heal, and the audit of ``kill-broker``
(nothing acknowledged lost, duplicated or out of order).

They need a cluster whose nodes each run in their own network namespace
(``raftka.tools.chaos.netns``; ``cluster.json`` names each node's), and run where the clients
run. A round: wait until every partition has a leader and a full ISR, pick the broker
leading the most, and, in its namespace, with iptables, both ways:

- ``partition-broker --from followers``: drop everything to and from the other brokers.
  It cannot replicate: the ISRs shrink (after ``replica_lag_time_max_ms``) until it
  shares none with another broker, and acks=all writes to its partitions are refused
  (min.insync.replicas 2) until the heal;
- ``--from controller``: the controllers. It misses its heartbeats, is fenced, and every
  partition is led elsewhere, while it may still believe it leads;
- ``--from clients``: everyone but the cluster's nodes. The producer cannot reach it;
  nothing in the cluster notices;
- ``lossy-broker --loss-percent P``: drop each packet with probability P/100 (every peer;
  the kernels this runs on may lack ``tc netem``, iptables' ``statistic`` match is enough
  for loss). Retransmissions, timeouts and retries, nothing the cluster must react to;
- ``slow-broker --delay-ms D``: every byte to or from it held D ms, each way (a proxy in
  its namespace: ``raftka.tools.chaos.delay_proxy``; no netem here either). Replication and
  acknowledgements slow down; below the session and lag timeouts nothing must change.

Then, once the cluster reacted, ``--hold-s`` more in that state, heal, and time until it
is back in every ISR. The fault is always healed, on an error or Ctrl-C too.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raftka.client.admin import Admin
from raftka.client.types import PartitionInfo
from raftka.command import local
from raftka.command.errors import CliError
from raftka.tools.chaos import netns
from raftka.tools.chaos.chaos import LocalTarget
from raftka.tools.chaos.chaos_broker import (
    add_load_options,
    busiest_healthy_leader,
    run_under_load,
    wait_for_partitions,
)

SIDES = ("followers", "controller", "clients")
DELAY_MS_MAX = 10_000
Reaction = Callable[[list[PartitionInfo]], bool]


@dataclass(frozen=True, slots=True)
class Fault:
    name: str  # as reported: "partition from followers", "loss 20%"
    apply: Callable[[local.LocalCluster, int], None]  # (cluster, victim): start it
    reaction: Callable[[int], Reaction | None]  # (victim): what the cluster must show; None: nothing


def register(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cut = actions.add_parser(
        "partition-broker",
        help="cut the busiest partition leader off its followers, the controllers or the clients "
        "under acks=all load, heal; audit what survived (nodes in network namespaces)",
    )
    cut.add_argument("--from", dest="side", choices=SIDES, required=True, help="whom to cut it off from")
    _add_round_options(cut)
    cut.set_defaults(func=run_partition_broker)
    lossy = actions.add_parser(
        "lossy-broker",
        help="the busiest partition leader loses a share of its packets under acks=all load, heal; "
        "audit what survived (nodes in network namespaces)",
    )
    lossy.add_argument(
        "--loss-percent", type=float, required=True, help="the share of packets dropped, both ways"
    )
    _add_round_options(lossy)
    lossy.set_defaults(func=run_lossy_broker)
    slow = actions.add_parser(
        "slow-broker",
        help="the busiest partition leader's traffic is delayed under acks=all load, heal; "
        "audit what survived (nodes in network namespaces)",
    )
    slow.add_argument("--delay-ms", type=float, required=True, help="added to each way, every peer")
    _add_round_options(slow)
    slow.set_defaults(func=run_slow_broker)


def _add_round_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=1, help="how many faults (default 1)")
    parser.add_argument(
        "--hold-s", type=float, default=2.0, help="how long the fault lasts once the cluster reacted"
    )
    add_load_options(parser)


def run_partition_broker(args: argparse.Namespace) -> int:
    def cut(cluster: local.LocalCluster, victim: int) -> None:
        namespace = cluster.node(victim).netns
        if args.side == "followers":
            netns.partition(namespace, [host(n) for n in cluster.brokers() if n.id != victim])
        elif args.side == "controller":
            netns.partition(namespace, [host(n) for n in cluster.controllers()])
        else:
            netns.partition_all_but(namespace, [host(n) for n in cluster.nodes if n.id != victim])

    return _run(args, Fault(f"partition from the {args.side}", cut, _REACTIONS[args.side]))


def run_lossy_broker(args: argparse.Namespace) -> int:
    if not 0 < args.loss_percent < 100:
        raise CliError(f"--loss-percent: expected more than 0 and less than 100, got {args.loss_percent:g}")
    return _run(
        args,
        Fault(
            f"loss {args.loss_percent:g}%",
            lambda cluster, victim: netns.lose(cluster.node(victim).netns, args.loss_percent),
            lambda victim: None,
        ),
    )


def run_slow_broker(args: argparse.Namespace) -> int:
    if not 0 < args.delay_ms <= DELAY_MS_MAX:
        raise CliError(f"--delay-ms: expected more than 0 and at most {DELAY_MS_MAX}, got {args.delay_ms:g}")
    return _run(
        args,
        Fault(
            f"delay {args.delay_ms:g} ms",
            lambda cluster, victim: netns.delay(cluster.node(victim).netns, args.delay_ms),
            lambda victim: None,
        ),
    )


def _run(args: argparse.Namespace, fault: Fault) -> int:
    if args.hold_s < 0:
        raise CliError(f"--hold-s: expected 0 or more, got {args.hold_s}")
    cluster = local.load(local.resolve_dir(args.dir))
    outside = [n.id for n in cluster.nodes if not n.netns]
    if outside:  # first: no tool makes such a cluster fit, so say what does
        raise CliError(
            f"{args.action} needs every node in its own network namespace; node(s) {outside} "
            f"of {cluster.dir} are not (see raftka.tools.chaos.netns)"
        )
    missing = netns.missing_tools()
    if missing:
        raise CliError(f"{args.action} needs {', '.join(missing)}: apt-get install -y {' '.join(missing)}")
    return run_under_load(
        args,
        lambda admin, target, topic, number: _round(
            admin, target, topic, number, fault, args.hold_s, args.timeout_s
        ),
        format_round,
        lambda rounds: {
            "fault": fault.name,
            "heal_median_ms": round(statistics.median(r["heal_ms"] for r in rounds), 1),
            "heal_max_ms": max(r["heal_ms"] for r in rounds),
        },
    )


def _round(
    admin: Admin, target: LocalTarget, topic: str, number: int, fault: Fault, hold_s: float, timeout_s: float
) -> dict[str, Any]:
    victim, led = busiest_healthy_leader(admin, topic, number, timeout_s)
    reacted = fault.reaction(victim)
    namespace = target.cluster.node(victim).netns
    try:
        fault.apply(target.cluster, victim)
        reaction_s = (
            None
            if reacted is None
            else wait_for_partitions(
                admin,
                topic,
                f"round {number}: the cluster did not react to the {fault.name}",
                reacted,
                timeout_s,
            )
        )
        time.sleep(hold_s)  # the fault's length, as asked for: what survives is checked after
    finally:
        netns.heal(namespace)
    heal_s = wait_for_partitions(
        admin,
        topic,
        f"round {number}: broker {victim} did not rejoin every ISR after the heal",
        lambda ps: all(p.leader >= 0 and victim in p.isr and len(p.isr) == len(p.replicas) for p in ps),
        timeout_s,
    )
    return {
        "round": number,
        "fault": fault.name,
        "victim": victim,
        "partitions_led": led,
        "reaction_ms": None if reaction_s is None else round(reaction_s * 1000, 1),
        "heal_ms": round(heal_s * 1000, 1),
    }


def _isolated_from_followers(victim: int) -> Reaction:
    """It shares no ISR with another broker: alone in the ISRs it leads, out of the others."""
    return lambda ps: all(list(p.isr) == [victim] if p.leader == victim else victim not in p.isr for p in ps)


def _led_elsewhere(victim: int) -> Reaction:
    return lambda ps: all(p.leader not in (-1, victim) for p in ps)


_REACTIONS: dict[str, Callable[[int], Reaction | None]] = {
    "followers": _isolated_from_followers,
    "controller": _led_elsewhere,
    "clients": lambda victim: None,  # the cluster sees nothing: only the clients do
}


def host(node: local.NodeRecord) -> str:
    return node.address.rpartition(":")[0]


def format_round(r: dict[str, Any]) -> str:
    reaction = "" if r["reaction_ms"] is None else f"the cluster reacted after {r['reaction_ms']} ms; "
    return (
        f"round {r['round']}: {r['fault']} at broker {r['victim']} (leading {r['partitions_led']} "
        f"partitions) -> {reaction}back in every ISR {r['heal_ms']} ms after the heal"
    )
