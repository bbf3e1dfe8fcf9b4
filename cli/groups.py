"""``raftka groups list|describe|delete|reset-offsets``: kafka-consumer-groups for raftka.

``describe`` shows, per partition, the committed offset, the log end (the high watermark),
the lag and the member it is assigned to; ``--members`` shows the members and their
assignments instead. ``reset-offsets`` plans new committed offsets (earliest, latest, an
offset, a shift, or the first offset at a time) and prints the plan; ``--execute`` commits
it, which the coordinator allows only while the group has no members, as in Kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
from typing import Any

from raftka.client.cluster_metadata import LIST_EARLIEST, LIST_LATEST
from raftka.client.group_admin import GroupAdmin
from raftka.client.types import GroupDescription, TopicPartition
from raftka.command import output
from raftka.command.data_args import add_broker_options, broker_addresses
from raftka.command.errors import CliError
from raftka.command.tls_args import client_sasl, client_tls

STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    groups = commands.add_parser(
        "groups", help="list, describe, delete consumer groups and reset their offsets"
    )
    actions = groups.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", help="every consumer group, with its state")
    listing.add_argument(
        "--state", action="append", choices=STATES, default=[], help="only groups in this state; repeatable"
    )
    add_broker_options(listing)
    listing.set_defaults(func=run_list)

    describe = actions.add_parser(
        "describe", help="a group's partitions: committed offset, log end, lag, member"
    )
    describe.add_argument("group", metavar="GROUP")
    describe.add_argument("--members", action="store_true", help="the members and their assignments instead")
    add_broker_options(describe)
    describe.set_defaults(func=run_describe)

    delete = actions.add_parser("delete", help="delete groups without members: their offsets and history")
    delete.add_argument("groups", metavar="GROUP", nargs="+")
    add_broker_options(delete)
    delete.set_defaults(func=run_delete)

    reset = actions.add_parser(
        "reset-offsets", help="plan, and with --execute commit, new offsets for a group"
    )
    reset.add_argument("--group", required=True, metavar="G")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="T[:P,P...]",
        help="a topic, or some of its partitions; repeatable",
    )
    scope.add_argument("--all-topics", action="store_true", help="every topic the group has committed")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    target.add_argument("--to-offset", type=int, metavar="N")
    target.add_argument(
        "--shift-by", type=int, metavar="N", help="from the committed offset (negative: back)"
    )
    target.add_argument(
        "--to-datetime",
        metavar="ISO",
        help="the first offset at or after this time (e.g. 2026-11-24T21:00:00Z)",
    )
    reset.add_argument("--execute", action="store_true", help="commit the plan (default: only print it)")
    add_broker_options(reset)
    reset.set_defaults(func=run_reset)


def run_list(args: argparse.Namespace) -> int:
    listed = _run(args, lambda admin: admin.list_groups(args.state))
    rows = [{"group": g.group, "state": g.state, "protocol_type": g.protocol_type} for g in listed]
    if args.output == "json":
        print(output.to_json(rows))
    else:
        print(output.table(("GROUP", "STATE", "PROTOCOL_TYPE"), [tuple(r.values()) for r in rows]))
    return 0


def run_describe(args: argparse.Namespace) -> int:
    description: GroupDescription = _run(args, lambda admin: admin.describe_group(args.group))
    view = describe_view(description)
    if args.output == "json":
        print(output.to_json(view))
        return 0
    print(
        f"Group {view['group']}: state {view['state']}, protocol {view['protocol'] or '-'}, "
        f"generation {view['generation']}, coordinator {view['coordinator']}"
    )
    if args.members:
        rows = [
            (
                m["member_id"],
                m["group_instance_id"],
                m["client_id"],
                m["host"],
                len(m["assignment"]),
                ",".join(m["assignment"]) or None,
            )
            for m in view["members"]
        ]
        print(
            output.table(("MEMBER_ID", "INSTANCE_ID", "CLIENT_ID", "HOST", "PARTITIONS", "ASSIGNMENT"), rows)
        )
    else:
        rows = [
            (o["topic"], o["partition"], o["committed"], o["log_end"], o["lag"], o["member_id"])
            for o in view["offsets"]
        ]
        print(
            output.table(("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER_ID"), rows)
        )
    return 0


def describe_view(d: GroupDescription) -> dict[str, Any]:
    return {
        "group": d.group,
        "state": d.state,
        "protocol_type": d.protocol_type,
        "protocol": d.protocol,
        "generation": d.generation,
        "coordinator": d.coordinator,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": [str(tp) for tp in m.assignment],
            }
            for m in d.members
        ],
        "offsets": [
            {
                "topic": o.partition.topic,
                "partition": o.partition.partition,
                "committed": o.committed,
                "log_end": o.log_end,
                "lag": o.lag,
                "member_id": o.member_id,
            }
            for o in d.offsets
        ],
    }


def run_delete(args: argparse.Namespace) -> int:
    results = _run(args, lambda admin: admin.delete_groups(args.groups))
    rows = [{"group": r.topic, "error": r.error, "message": r.message} for r in results]
    if args.output == "json":
        print(output.to_json(rows))
    else:
        print(
            output.table(
                ("GROUP", "RESULT"),
                [(r["group"], r["error"] and f"{r['error']}: {r['message']}" or "deleted") for r in rows],
            )
        )
    return 1 if any(r["error"] for r in rows) else 0


def run_reset(args: argparse.Namespace) -> int:
    scope = [_parse_topic(t) for t in args.topic]

    async def plan(admin: GroupAdmin) -> dict[TopicPartition, tuple[int | None, int]]:
        committed = await admin.committed(args.group)
        partitions: list[TopicPartition] = []
        for topic, chosen in scope:
            info = await admin.metadata.topic(topic)
            partitions += [TopicPartition(topic, p) for p in (chosen or sorted(info.partitions))]
        if args.all_topics:
            partitions = sorted(committed)
        if not partitions:
            raise CliError(f"group {args.group!r} has no committed offsets to reset (name the topics)")
        new = await _targets(admin, partitions, committed, args)
        earliest = await admin.offsets_at(partitions, LIST_EARLIEST)
        latest = await admin.offsets_at(partitions, LIST_LATEST)
        clamped = {
            tp: min(max(offset, earliest[tp]), latest[tp]) for tp, offset in new.items()
        }  # Kafka clamps too
        if args.execute:
            for result in await admin.reset_offsets(args.group, clamped):
                if result.error:
                    raise CliError(f"{result.topic}-{result.partition}: {result.error}: {result.message}")
        return {tp: (committed.get(tp), offset) for tp, offset in sorted(clamped.items())}

    planned = _run(args, plan)
    rows = [
        {"topic": tp.topic, "partition": tp.partition, "committed": old, "new_offset": new}
        for tp, (old, new) in planned.items()
    ]
    if args.output == "json":
        print(output.to_json({"group": args.group, "executed": args.execute, "offsets": rows}))
    else:
        print(
            output.table(
                ("TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"), [tuple(r.values()) for r in rows]
            )
        )
        if not args.execute:
            print("Planned only: run again with --execute to commit these offsets.")
    return 0


async def _targets(
    admin: GroupAdmin,
    partitions: list[TopicPartition],
    committed: dict[TopicPartition, int],
    args: argparse.Namespace,
) -> dict[TopicPartition, int]:
    if args.to_earliest:
        return await admin.offsets_at(partitions, LIST_EARLIEST)
    if args.to_latest:
        return await admin.offsets_at(partitions, LIST_LATEST)
    if args.to_offset is not None:
        if args.to_offset < 0:
            raise CliError(f"--to-offset: {args.to_offset} is negative")
        return dict.fromkeys(partitions, args.to_offset)
    if args.shift_by is not None:
        missing = [str(tp) for tp in partitions if tp not in committed]
        if missing:
            raise CliError(f"--shift-by: nothing committed to shift for {', '.join(missing)}")
        return {tp: committed[tp] + args.shift_by for tp in partitions}
    at = _parse_time(args.to_datetime)
    found = await admin.offsets_at(partitions, at)
    latest = await admin.offsets_at(partitions, LIST_LATEST)
    return {tp: found[tp] if found[tp] >= 0 else latest[tp] for tp in partitions}  # none that late: the end


def _parse_topic(text: str) -> tuple[str, list[int]]:
    topic, _, partitions = text.partition(":")
    if not topic:
        raise CliError(f"--topic: expected TOPIC or TOPIC:P,P..., got {text!r}")
    try:
        return topic, [int(p) for p in partitions.split(",")] if partitions else []
    except ValueError:
        raise CliError(f"--topic: partitions must be numbers, got {text!r}") from None


def _parse_time(text: str) -> int:
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(
            f"--to-datetime: expected an ISO time such as 2026-11-24T21:00:00Z, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def _run(args: argparse.Namespace, work):  # noqa: ANN001, ANN202 - an async function of a GroupAdmin
    async def main() -> Any:
        admin = GroupAdmin(broker_addresses(args), tls=client_tls(args), sasl=client_sasl(args))
        try:
            return await work(admin)
        finally:
            await admin.close()

    return asyncio.run(main())
