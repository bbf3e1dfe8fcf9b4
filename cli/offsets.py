"""``raftka offsets commit|fetch --group G``: consumer offsets, which raftka keeps in
the metadata quorum (``OffsetCommitRecord``) rather than in a ``__consumer_offsets`` topic.
``raftka offsets list TOPIC``: each partition's earliest, latest (the high watermark) or
first offset at a time, from its leader (kafka-get-offsets)."""

from __future__ import annotations

import argparse
import asyncio

from raftka.cli.admin_args import add_connection_options, open_admin, single
from raftka.client.cluster_metadata import LIST_EARLIEST, LIST_LATEST, ClusterMetadata
from raftka.client.errors import KafkaError
from raftka.client.types import OffsetCommit, TopicPartition
from raftka.command import output
from raftka.command.data_args import add_broker_options, broker_addresses
from raftka.command.errors import CliError
from raftka.command.tls_args import client_tls
from raftka.security.tls import TlsFiles


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    offsets = commands.add_parser("offsets", help="commit and fetch consumer group offsets")
    actions = offsets.add_subparsers(dest="action", required=True, metavar="ACTION")

    commit = actions.add_parser("commit", help="commit one partition's offset for a group")
    commit.add_argument("--group", required=True, metavar="G")
    commit.add_argument("--topic", required=True, metavar="T")
    commit.add_argument("--partition", type=int, required=True, metavar="P")
    commit.add_argument("--offset", type=int, required=True, metavar="O")
    commit.add_argument("--metadata", default="", metavar="S", help="free text stored with the offset")
    add_connection_options(commit)
    commit.set_defaults(func=run_commit)

    fetch = actions.add_parser("fetch", help="a group's committed offsets")
    fetch.add_argument("--group", required=True, metavar="G")
    fetch.add_argument("--topic", metavar="T", help="only this topic (default: all the group committed)")
    add_connection_options(fetch)
    fetch.set_defaults(func=run_fetch)

    listing = actions.add_parser("list", help="each partition's earliest, latest or by-time offset")
    listing.add_argument("topic", metavar="TOPIC")
    listing.add_argument(
        "--time",
        default="latest",
        metavar="earliest|latest|MS",
        help="latest (default: the high watermark), earliest, or ms since the epoch",
    )
    add_broker_options(listing)
    listing.set_defaults(func=run_list)


def run_commit(args: argparse.Namespace) -> int:
    commit = OffsetCommit(args.topic, args.partition, args.offset, args.metadata)
    with open_admin(args) as admin:
        result = single(admin.commit_offsets(args.group, [commit]), "partition")
    result.check()
    if args.output == "json":
        print(
            output.to_json(
                {
                    "group": args.group,
                    "topic": args.topic,
                    "partition": args.partition,
                    "offset": args.offset,
                    "metadata": args.metadata,
                }
            )
        )
    else:
        print(f"Committed offset {args.offset} for group {args.group} on {args.topic}-{args.partition}.")
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        fetched = admin.fetch_offsets(args.group, {args.topic: []} if args.topic else None)
    for item in fetched:
        item.check()
    rows = [
        {"topic": o.topic, "partition": o.partition, "offset": o.offset, "metadata": o.metadata}
        for o in sorted(fetched, key=lambda o: (o.topic, o.partition))
    ]
    if args.output == "json":
        print(output.to_json({"group": args.group, "offsets": rows}))
    elif not rows:
        print(f"Group {args.group} has no committed offsets.")
    else:
        print(
            output.table(
                ("TOPIC", "PARTITION", "OFFSET", "METADATA"),
                [(r["topic"], r["partition"], r["offset"], r["metadata"] or None) for r in rows],
            )
        )
    return 0


def parse_time(text: str) -> int:
    named = {"earliest": LIST_EARLIEST, "latest": LIST_LATEST}
    if text in named:
        return named[text]
    if not text.isdigit():
        raise CliError(f"--time: expected earliest, latest or a time in ms, got {text!r}")
    return int(text)


def run_list(args: argparse.Namespace) -> int:
    timestamp = parse_time(args.time)
    try:
        offsets = asyncio.run(list_offsets(broker_addresses(args), args.topic, timestamp, client_tls(args)))
    except KafkaError as e:
        raise CliError(str(e)) from None
    rows = [
        {"topic": tp.topic, "partition": tp.partition, "offset": o, "timestamp": t}
        for tp, (o, t) in sorted(offsets.items())
    ]
    if args.output == "json":
        print(output.to_json(rows))
    else:
        print(
            output.table(
                ("TOPIC", "PARTITION", "OFFSET"), [(r["topic"], r["partition"], r["offset"]) for r in rows]
            )
        )
    return 0


async def list_offsets(
    addresses: list[str], topic: str, timestamp: int, tls: TlsFiles | None = None
) -> dict[TopicPartition, tuple[int, int]]:
    metadata = ClusterMetadata(addresses, tls=tls)
    try:
        info = await metadata.topic(topic)
        return await metadata.list_offsets(
            [TopicPartition(topic, p) for p in sorted(info.partitions)], timestamp
        )
    finally:
        await metadata.close()
