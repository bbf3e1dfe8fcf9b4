"""``raftka chaos partition-broker``: cut the busiest partition leader off the network under
an acks=all load, heal, and prove nothing acknowledged was lost (the audit of
``kill-broker``).

It needs a cluster whose nodes each run in their own network namespace
(``raftka.cli.netns``; ``cluster.json`` names each node's), and runs where the clients
run. A round: wait until every partition has a leader and a full ISR, pick the broker
leading the most, and drop every packet, both ways, between it and

- ``followers``: the other brokers. It cannot replicate: the ISRs shrink (after
  ``replica_lag_time_max_ms``) until it shares none with another broker, and acks=all
  writes to its partitions are refused (min.insync.replicas 2) until the heal;
- ``controller``: the controllers. It misses its heartbeats, is fenced, and every
  partition is led elsewhere, while it may still believe it leads;
- ``clients``: everyone but the cluster's nodes. The producer cannot reach it; nothing
  in the cluster notices.

Then ``--hold-s`` more in that state, heal, and time until it is back in every ISR. The
partition is always healed, on an error or Ctrl-C too.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from raftka.cli import local, netns
from raftka.cli.chaos import LocalTarget
from raftka.cli.chaos_broker import (
    add_load_options,
    busiest_healthy_leader,
    run_under_load,
    wait_for_partitions,
)
from raftka.cli.errors import CliError
from raftka.client.admin import Admin
from raftka.client.types import PartitionInfo

SIDES = ("followers", "controller", "clients")


def register(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cut = actions.add_parser(
        "partition-broker",
        help="cut the busiest partition leader off its followers, the controllers or the clients "
        "under acks=all load, heal; audit what survived (nodes in network namespaces)",
    )
    cut.add_argument("--from", dest="side", choices=SIDES, required=True, help="whom to cut it off from")
    cut.add_argument("--rounds", type=int, default=1, help="how many partitions (default 1)")
    cut.add_argument(
        "--hold-s", type=float, default=2.0, help="how long it stays cut off once the cluster reacted"
    )
    add_load_options(cut)
    cut.set_defaults(func=run_partition_broker)


def run_partition_broker(args: argparse.Namespace) -> int:
    if args.hold_s < 0:
        raise CliError(f"--hold-s: expected 0 or more, got {args.hold_s}")
    missing = netns.missing_tools()
    if missing:
        raise CliError(f"partition-broker needs {', '.join(missing)}: apt-get install -y {' '.join(missing)}")
    cluster = local.load(local.resolve_dir(args.dir))
    outside = [n.id for n in cluster.nodes if not n.netns]
    if outside:
        raise CliError(
            f"partition-broker needs every node in its own network namespace; node(s) {outside} "
            f"of {cluster.dir} are not (see raftka.cli.netns)"
        )
    return run_under_load(
        args,
        lambda admin, target, topic, number: _round(
            admin, target, topic, number, args.side, args.hold_s, args.timeout_s
        ),
        format_round,
        lambda rounds: {
            "partition": args.side,
            "heal_median_ms": round(statistics.median(r["heal_ms"] for r in rounds), 1),
            "heal_max_ms": max(r["heal_ms"] for r in rounds),
        },
    )


def _round(
    admin: Admin, target: LocalTarget, topic: str, number: int, side: str, hold_s: float, timeout_s: float
) -> dict[str, Any]:
    cluster = target.cluster
    victim, led = busiest_healthy_leader(admin, topic, number, timeout_s)
    namespace = cluster.node(victim).netns
    reacted = _REACTIONS[side](victim)
    try:
        if side == "followers":
            netns.partition(namespace, [host(n) for n in cluster.brokers() if n.id != victim])
        elif side == "controller":
            netns.partition(namespace, [host(n) for n in cluster.controllers()])
        else:
            netns.partition_all_but(namespace, [host(n) for n in cluster.nodes if n.id != victim])
        reaction_s = (
            None
            if reacted is None
            else wait_for_partitions(
                admin,
                topic,
                f"round {number}: the cluster did not react to the partition",
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
        "partition": side,
        "victim": victim,
        "partitions_led": led,
        "reaction_ms": None if reaction_s is None else round(reaction_s * 1000, 1),
        "heal_ms": round(heal_s * 1000, 1),
    }


def _isolated_from_followers(victim: int) -> Callable[[list[PartitionInfo]], bool]:
    """It shares no ISR with another broker: alone in the ISRs it leads, out of the others."""
    return lambda ps: all(list(p.isr) == [victim] if p.leader == victim else victim not in p.isr for p in ps)


def _led_elsewhere(victim: int) -> Callable[[list[PartitionInfo]], bool]:
    return lambda ps: all(p.leader not in (-1, victim) for p in ps)


_REACTIONS: dict[str, Callable[[int], Callable[[list[PartitionInfo]], bool] | None]] = {
    "followers": _isolated_from_followers,
    "controller": _led_elsewhere,
    "clients": lambda victim: None,  # the cluster sees nothing: only the clients do
}


def host(node: local.NodeRecord) -> str:
    return node.address.rpartition(":")[0]


def format_round(r: dict[str, Any]) -> str:
    reaction = "" if r["reaction_ms"] is None else f"the cluster reacted after {r['reaction_ms']} ms; "
    return (
        f"round {r['round']}: broker {r['victim']} (leading {r['partitions_led']} partitions) cut off "
        f"from the {r['partition']} -> {reaction}back in every ISR {r['heal_ms']} ms after the heal"
    )
