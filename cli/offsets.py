"""``raftka offsets commit|fetch --group G``: consumer offsets, which raftka keeps in
the metadata quorum (``OffsetCommitRecord``) rather than in a ``__consumer_offsets`` topic."""

from __future__ import annotations

import argparse

from cli import output
from cli.admin_args import add_connection_options, open_admin, single
from client.types import OffsetCommit


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
