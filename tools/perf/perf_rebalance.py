"""``raftka perf rebalance``: how long a consumer group takes to rebalance after a member
leaves, against a running cluster.

``--members`` consumers of one group subscribe to a topic of ``--partitions`` partitions
(created if missing) in this process. Once every partition is owned, each round closes
one member (it sends LeaveGroup, as a consumer that shuts down cleanly does) at a random
moment of the others' heartbeat cycle, and times until the remaining members own every
partition again, each exactly once; then it adds a new member and waits for the group
to settle before the next round. The members learn of a rebalance from their next
heartbeat, so ``--heartbeat-interval-ms`` bounds most of the time (half of it on
average); the rest is the join, the leader's assignment, the recorded rebalance and
the sync.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

from raftka.client.consumer import AsyncConsumer, RebalanceListener
from raftka.client.types import TopicPartition
from raftka.command import output
from raftka.command.data_args import add_broker_options, broker_addresses, positive
from raftka.command.errors import CliError
from raftka.command.tls_args import client_tls
from raftka.tools.perf.perf_data import ensure_topic

POLL_MS = 20
SETTLE_TIMEOUT_S = 120.0


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    perf = kinds.add_parser("rebalance", help="time a consumer group's rebalance after a member leaves")
    perf.add_argument("--members", type=positive, default=10, help="consumers in the group (default 10)")
    perf.add_argument(
        "--rounds", type=positive, default=5, help="members that leave, one per round (default 5)"
    )
    perf.add_argument(
        "--heartbeat-interval-ms",
        type=positive,
        default=1_000,
        help="the consumers' (default 1000, the consumer's default)",
    )
    perf.add_argument("--assignor", default="range", choices=("range", "cooperative-sticky"))
    perf.add_argument("--seed", type=int, default=0, help="the random moments members leave at")
    perf.add_argument("--topic", default="raftka-perf-rebalance")
    perf.add_argument("--partitions", type=positive, default=60, help="if the topic is created (default 60)")
    perf.add_argument("--replication-factor", type=positive, default=3, help="if the topic is created")
    perf.add_argument("--min-insync-replicas", type=positive, default=2, help="if the topic is created")
    perf.add_argument(
        "--bootstrap-controller", metavar="HOST:PORT,...", help="controllers, to create the topic"
    )
    add_broker_options(perf)
    perf.set_defaults(func=run_perf_rebalance)


class _Owned(RebalanceListener):
    def __init__(self) -> None:
        self.partitions: set[TopicPartition] = set()

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.partitions |= partitions

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.partitions -= partitions


def run_perf_rebalance(args: argparse.Namespace) -> int:
    if args.members < 2:
        raise CliError("--members: at least 2 (one leaves, the others take over)")
    ensure_topic(args)
    result = asyncio.run(measure(args))
    if args.output == "json":
        print(output.to_json(result))
    else:
        print(output.fields([(k.replace("_", " "), v) for k, v in result.items()]))
    return 0


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    addresses = broker_addresses(args)
    tls = client_tls(args)
    group = f"perf-rebalance-{int(time.time())}"
    rng = random.Random(args.seed)
    members: list[tuple[AsyncConsumer, _Owned]] = []

    def join() -> None:
        consumer = AsyncConsumer(
            addresses,
            group_id=group,
            heartbeat_interval_ms=args.heartbeat_interval_ms,
            partition_assignment_strategy=[args.assignor],
            enable_auto_commit=False,
            tls=tls,
        )
        owned = _Owned()
        consumer.subscribe([args.topic], owned)
        members.append((consumer, owned))

    async def settled(deadline: float) -> float:
        """Poll every member until each partition has exactly one owner; the time it took."""
        start = time.perf_counter()
        while True:
            await asyncio.gather(*(consumer.poll(POLL_MS) for consumer, _ in members))
            owned = [tp for _, o in members for tp in o.partitions]
            if len(owned) == partitions and len(set(owned)) == len(owned):
                return time.perf_counter() - start
            if time.monotonic() > deadline:
                raise CliError(f"the group did not settle within {SETTLE_TIMEOUT_S:g} s")

    try:
        for _ in range(args.members):
            join()
        partitions = len((await members[0][0].metadata.topic(args.topic)).partitions)
        await settled(time.monotonic() + SETTLE_TIMEOUT_S)
        times_ms = []
        for _ in range(args.rounds):
            phase_s = rng.uniform(0, args.heartbeat_interval_ms / 1000)
            await asyncio.gather(*(consumer.poll(int(phase_s * 1000)) for consumer, _ in members))
            leaving, _ = members.pop(0)
            await leaving.close()
            times_ms.append(round(await settled(time.monotonic() + SETTLE_TIMEOUT_S) * 1000, 1))
            join()
            await settled(time.monotonic() + SETTLE_TIMEOUT_S)
    finally:
        for consumer, _ in members:
            await consumer.close()
    return {
        "members": args.members,
        "partitions": partitions,
        "assignor": args.assignor,
        "heartbeat_interval_ms": args.heartbeat_interval_ms,
        "rounds": args.rounds,
        "rebalance_median_ms": statistics.median(times_ms),
        "rebalance_max_ms": max(times_ms),
        "rebalance_ms": times_ms,
    }
