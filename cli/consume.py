"""``raftka consume TOPIC``: kafka-console-consumer for raftka.

Reads every partition of the topic (or ``--partition N``) from the end, from the
beginning, or from ``--offset K``. With ``--group G`` it joins consumer group G and reads
the partitions the group gives it (several ``raftka consume --group G`` share the topic),
starting from G's committed offsets, and commits what it printed; with ``--partition``
too it reads that partition from outside the group (the coordinator then takes its
commits only while G has no members, as Kafka's does). It stops after
``--max-messages``, or once ``--timeout-ms`` passes without a record, else at Ctrl-C.
Values print one per line; ``--output json`` prints one JSON object per record.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from raftka.client.consumer import Consumer
from raftka.client.errors import CommitFailedError
from raftka.client.types import ConsumerRecord, TopicPartition
from raftka.command.data_args import add_broker_options, broker_addresses, not_negative, positive
from raftka.command.errors import CliError
from raftka.command.tls_args import client_sasl, client_tls

POLL_MS = 200
POLL_RECORDS_MAX = 500


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    consume = commands.add_parser("consume", help="print a topic's records")
    consume.add_argument("topic", metavar="TOPIC")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at each partition's log start")
    start.add_argument(
        "--offset", type=not_negative, metavar="K", help="start at offset K (needs --partition)"
    )
    consume.add_argument("--partition", type=not_negative, metavar="N", help="only partition N")
    consume.add_argument(
        "--group",
        metavar="G",
        help="join consumer group G: share the topic, resume from and commit its offsets",
    )
    consume.add_argument("--max-messages", type=positive, metavar="N", help="stop after N records")
    consume.add_argument("--timeout-ms", type=positive, metavar="T", help="stop after T ms without a record")
    consume.add_argument("--print-key", action="store_true", help="print KEY<TAB>VALUE")
    consume.add_argument("--print-headers", action="store_true", help="print the headers first")
    consume.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="read_committed: only committed transactions' records, below the last stable offset "
        "(default read_uncommitted, as Kafka's console consumer)",
    )
    add_broker_options(consume)
    consume.set_defaults(func=run_consume)


def run_consume(args: argparse.Namespace) -> int:
    if args.offset is not None and args.partition is None:
        raise CliError("--offset: needs --partition")
    consumer = Consumer(
        broker_addresses(args),
        group_id=args.group,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        enable_auto_commit=False,  # it commits what it printed, after printing it
        isolation_level=args.isolation_level,
        tls=client_tls(args),
        sasl=client_sasl(args),
    )
    printed = 0
    try:
        if args.partition is not None:
            tp = TopicPartition(args.topic, args.partition)
            consumer.assign([tp])
            if args.offset is not None:
                consumer.seek(tp, args.offset)
        elif args.group is not None:
            consumer.subscribe([args.topic])
        else:
            consumer.assign_topic(args.topic)
        printed = consume_until_done(consumer, args)
    finally:
        try:
            if args.group is not None and printed:
                commit_printed(consumer)
        finally:
            consumer.close()
            print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0


def commit_printed(consumer: Consumer) -> None:
    """A commit refused in a rebalance is not fatal: another member reads on from the
    last commit (at least once)."""
    try:
        consumer.commit()
    except CommitFailedError as e:
        print(f"raftka: warning: commit skipped: {e}", file=sys.stderr)


def consume_until_done(consumer: Consumer, args: argparse.Namespace) -> int:
    printed = 0
    last_record = time.monotonic()
    while args.max_messages is None or printed < args.max_messages:
        wanted = (
            POLL_RECORDS_MAX
            if args.max_messages is None
            else min(POLL_RECORDS_MAX, args.max_messages - printed)
        )
        records = consumer.poll(POLL_MS, wanted)
        if records:
            last_record = time.monotonic()
            for record in records:
                print(format_record(record, args), flush=False)
            sys.stdout.flush()
            printed += len(records)
            if args.group is not None:
                commit_printed(consumer)
        elif args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
            break
    return printed


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def format_record(record: ConsumerRecord, args: argparse.Namespace) -> str:
    if args.output == "json":
        view: dict[str, Any] = {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
            "key": _text(record.key),
            "value": _text(record.value),
            "headers": {k: _text(v) for k, v in record.headers},
        }
        return json.dumps(view)
    parts = []
    if args.print_headers:
        parts.append(",".join(f"{k}:{_text(v)}" for k, v in record.headers) or "NO_HEADERS")
    if args.print_key:
        parts.append(_text(record.key) or "null")
    parts.append(_text(record.value) or "null")
    return "\t".join(parts)
