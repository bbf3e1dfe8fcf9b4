"""``raftka topics create|list|describe|delete|alter|elect-leaders|reassign``: kafka-topics.sh
(and kafka-leader-election.sh's preferred election, kafka-reassign-partitions'
reassignments: ``raftka.cli.reassign``) for raftka.

The controller validates names, counts and configs; this command only checks its own
syntax (``--config k=v``), so the rules live in one place and every client gets the same
answer. ``describe`` also asks the partition leaders for each log start offset and high
watermark, when brokers can be reached. Offline partitions (no leader) and under-replicated ones (ISR smaller than the
replicas) are flagged in ``describe``, since those are what an operator looks for.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from raftka.cli import reassign
from raftka.cli.admin_args import add_connection_options, open_admin, parse_key_values, single
from raftka.client.cluster_metadata import LIST_EARLIEST, LIST_LATEST, ClusterMetadata
from raftka.client.errors import KafkaError
from raftka.client.types import NewTopic, PartitionInfo, TopicDescription, TopicPartition
from raftka.command import output
from raftka.command.data_args import broker_addresses
from raftka.command.errors import CliError
from raftka.command.tls_args import client_tls
from raftka.security.tls import TlsFiles


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topics = commands.add_parser("topics", help="create, list, describe, delete and alter topics")
    actions = topics.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", help="create a topic")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--partitions", type=int, required=True, help="number of partitions")
    create.add_argument("--replication-factor", type=int, required=True, help="replicas per partition")
    create.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="a topic config; repeatable"
    )
    create.add_argument("--validate-only", action="store_true", help="check the request, create nothing")
    add_connection_options(create)
    create.set_defaults(func=run_create)

    list_cmd = actions.add_parser("list", help="every topic with its id and partition count")
    add_connection_options(list_cmd)
    list_cmd.set_defaults(func=run_list)

    describe = actions.add_parser(
        "describe", help="leader, epochs, replicas, ISR, log start and high watermark of every partition"
    )
    describe.add_argument("name", metavar="NAME", nargs="?", help="one topic (default: every topic)")
    describe.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT,...",
        help="brokers to ask for log start offsets and high watermarks (default: the local cluster's)",
    )
    add_connection_options(describe)
    describe.set_defaults(func=run_describe)

    delete = actions.add_parser("delete", help="delete a topic, its configs and its committed offsets")
    delete.add_argument("name", metavar="NAME")
    add_connection_options(delete)
    delete.set_defaults(func=run_delete)

    alter = actions.add_parser("alter", help="add partitions to a topic")
    alter.add_argument("name", metavar="NAME")
    alter.add_argument("--partitions", type=int, required=True, help="the new total (increase only)")
    add_connection_options(alter)
    alter.set_defaults(func=run_alter)

    elect = actions.add_parser(
        "elect-leaders",
        help="give partitions back to their preferred replica (kafka-leader-election, preferred)",
    )
    elect.add_argument(
        "name", metavar="NAME", nargs="?", help="one topic (default: every partition of the cluster)"
    )
    elect.add_argument(
        "--partition", type=int, action="append", default=[], help="with NAME: only this one; repeatable"
    )
    add_connection_options(elect)
    elect.set_defaults(func=run_elect_leaders)

    reassign.add_reassign_parser(actions)


def run_create(args: argparse.Namespace) -> int:
    configs = parse_key_values(args.config, "--config")
    with open_admin(args) as admin:
        result = single(
            admin.create_topics(
                [NewTopic(args.name, args.partitions, args.replication_factor, configs)],
                validate_only=args.validate_only,
            ),
            "topic",
        )
    result.check()
    view = {
        "name": result.name,
        "topic_id": result.topic_id,
        "partitions": args.partitions,
        "replication_factor": args.replication_factor,
        "configs": configs,
        "validate_only": args.validate_only,
    }
    if args.output == "json":
        print(output.to_json(view))
    elif args.validate_only:
        print(f"Topic {args.name} can be created (validate only: nothing was created).")
    else:
        print(f"Created topic {result.name} (id {result.topic_id}).")
    return 0


def run_list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        topics = sorted(admin.list_topics(), key=lambda t: t.name)
    rows = [{"name": t.name, "topic_id": t.topic_id, "partitions": t.partitions} for t in topics]
    if args.output == "json":
        print(output.to_json(rows))
    else:
        print(output.table(("NAME", "TOPIC_ID", "PARTITIONS"), [tuple(r.values()) for r in rows]))
    return 0


def run_describe(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        topics = admin.describe_topics([args.name] if args.name else [])
    for topic in topics:
        topic.check()
    view = describe_view(topics, leader_offsets(args, topics))
    print(output.to_json(view) if args.output == "json" else format_describe(view))
    return 0


Offsets = dict[TopicPartition, tuple[int, int]]  # (log start offset, high watermark)


def leader_offsets(args: argparse.Namespace, topics: list[TopicDescription]) -> Offsets:
    """What each partition's leader reports; empty when no broker can be asked (a
    metadata-only cluster, or brokers down): the columns then show '-'."""
    if args.bootstrap_server is None and args.bootstrap_controller is not None:
        return {}  # another cluster's controllers: the local cluster's brokers are not its own
    try:
        addresses = broker_addresses(args)
    except CliError:
        return {}
    wanted = [TopicPartition(t.name, p.partition) for t in topics for p in t.partitions if not p.offline]
    return asyncio.run(_leader_offsets(addresses, wanted, client_tls(args))) if wanted else {}


async def _leader_offsets(
    addresses: list[str], partitions: list[TopicPartition], tls: TlsFiles | None
) -> Offsets:
    metadata = ClusterMetadata(addresses, request_timeout_s=5, tls=tls)
    try:
        starts = await metadata.list_offsets(partitions, LIST_EARLIEST)
        ends = await metadata.list_offsets(partitions, LIST_LATEST)
    except KafkaError:
        return {}
    finally:
        await metadata.close()
    return {tp: (starts[tp][0], ends[tp][0]) for tp in partitions if tp in starts and tp in ends}


def describe_view(topics: list[TopicDescription], offsets: Offsets | None = None) -> list[dict[str, Any]]:
    offsets = offsets or {}
    return [
        {
            "name": t.name,
            "topic_id": t.topic_id,
            "partitions": [
                _partition_view(p, offsets.get(TopicPartition(t.name, p.partition))) for p in t.partitions
            ],
        }
        for t in sorted(topics, key=lambda t: t.name)
    ]


def _partition_view(p: PartitionInfo, offsets: tuple[int, int] | None) -> dict[str, Any]:
    return {
        "log_start_offset": offsets[0] if offsets else None,
        "high_watermark": offsets[1] if offsets else None,
        "partition": p.partition,
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "partition_epoch": p.partition_epoch,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "elr": list(p.elr),
        "adding": list(p.adding),
        "removing": list(p.removing),
        "offline": p.offline,
        "under_replicated": len(p.isr) < len(p.replicas),
    }


def format_describe(view: list[dict[str, Any]]) -> str:
    """One header line per topic (kafka-topics' words), then one row per partition."""
    blocks = []
    for topic in view:
        parts = topic["partitions"]
        rf = len(parts[0]["replicas"]) if parts else 0
        head = f"Topic: {topic['name']}  TopicId: {topic['topic_id']}  PartitionCount: {len(parts)}  ReplicationFactor: {rf}"
        rows = [
            (
                p["partition"],
                "none" if p["offline"] else p["leader"],
                p["leader_epoch"],
                _ids(p["replicas"]),
                _ids(p["isr"]),
                _ids(p["elr"]),
                _reassigning(p),
                p["log_start_offset"],
                p["high_watermark"],
                "offline" if p["offline"] else ("under-replicated" if p["under_replicated"] else "ok"),
            )
            for p in parts
        ]
        blocks.append(
            head
            + "\n"
            + output.table(
                (
                    "PARTITION",
                    "LEADER",
                    "LEADER_EPOCH",
                    "REPLICAS",
                    "ISR",
                    "ELR",
                    "REASSIGNING",
                    "LOG_START",
                    "HIGH_WATERMARK",
                    "STATUS",
                ),
                rows,
            )
        )
    return "\n\n".join(blocks) if blocks else "No topics."


def run_delete(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        result = single(admin.delete_topics([args.name]), "topic")
    result.check()
    if args.output == "json":
        print(output.to_json({"name": result.name, "topic_id": result.topic_id, "deleted": True}))
    else:
        print(f"Deleted topic {result.name}.")
    return 0


def run_alter(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        result = single(admin.create_partitions({args.name: args.partitions}), "topic")
    result.check()
    if args.output == "json":
        print(output.to_json({"name": result.name, "partitions": args.partitions}))
    else:
        print(f"Topic {result.name} now has {args.partitions} partitions.")
    return 0


def run_elect_leaders(args: argparse.Namespace) -> int:
    if args.partition and args.name is None:
        raise CliError("--partition: needs a topic NAME")
    with open_admin(args) as admin:
        results = admin.elect_leaders(None if args.name is None else {args.name: args.partition})
    rows = [
        {"topic": r.topic, "partition": r.partition, "error": r.error, "message": r.message}
        for r in sorted(results, key=lambda r: (r.topic, r.partition))
    ]
    failed = [r for r in rows if r["error"] not in (None, "ELECTION_NOT_NEEDED")]
    if args.output == "json":
        print(output.to_json(rows))
    else:
        outcome = {
            None: "elected its preferred leader",
            "ELECTION_NOT_NEEDED": "already led by its preferred leader",
        }
        print(
            output.table(
                ("TOPIC", "PARTITION", "RESULT"),
                [
                    (r["topic"], r["partition"], outcome.get(r["error"], f"{r['error']}: {r['message']}"))
                    for r in rows
                ],
            )
        )
    return 1 if failed else 0


def _reassigning(p: dict[str, Any]) -> str:
    """A reassignment in progress as +adding/-removing; "-" when none."""
    if not p["adding"] and not p["removing"]:
        return "-"
    return f"+{_ids(p['adding'])}/-{_ids(p['removing'])}"


def _ids(ids: list[int]) -> str:
    return ",".join(str(i) for i in ids) or "-"
