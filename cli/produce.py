"""``raftka produce TOPIC``: kafka-console-producer for raftka.

One record per line of standard input (the line without its newline), optionally split
into key and value at the first ``--key-separator``. Sending is asynchronous and
batched; at the end every record must be acknowledged, else the command exits 1
naming the first record that was not and why. A topic that does not exist is waited
for up to ``--timeout-s`` (it may be being created), saying so on stderr at once. Nothing
is printed on success except with ``--output json`` (a summary), so the command composes
in pipelines.
"""

from __future__ import annotations

import argparse
import sys
import threading
from concurrent.futures import Future
from typing import Any, TextIO

from raftka.cli.admin_args import parse_key_values
from raftka.client.producer import Producer
from raftka.client.types import RecordMetadata
from raftka.command import output
from raftka.command.data_args import (
    add_broker_options,
    add_idempotence_option,
    broker_addresses,
    idempotence,
    not_negative,
    positive,
)
from raftka.command.errors import CliError
from raftka.command.tls_args import client_sasl, client_tls

ACKS = {"all": -1, "1": 1, "0": 0}
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
LINE_BYTES_MAX = 1 << 20


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    produce = commands.add_parser("produce", help="send standard input to a topic, one record per line")
    produce.add_argument("topic", metavar="TOPIC")
    produce.add_argument("--key-separator", metavar="SEP", help="split each line into KEY SEP VALUE")
    produce.add_argument("--acks", choices=sorted(ACKS), default="all", help="all (default), 1 or 0")
    produce.add_argument(
        "--partition", type=not_negative, metavar="N", help="send every record to partition N"
    )
    produce.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a header on every record; repeatable",
    )
    produce.add_argument("--compression", choices=COMPRESSIONS, default="none")
    produce.add_argument("--linger-ms", type=not_negative, default=5, help="wait this long to fill a batch")
    produce.add_argument("--batch-size", type=positive, default=16_384, help="bytes per partition batch")
    produce.add_argument(
        "--timeout-s",
        type=float,
        default=120.0,
        help="give up on a record not acknowledged by then, and on a topic that does not exist "
        "(said on stderr at once, and again every few seconds while waiting for it)",
    )
    add_idempotence_option(produce)
    add_broker_options(produce)
    produce.set_defaults(func=run_produce)


class Tally:
    """Acknowledgements counted as they arrive, so no future is kept per record."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent = 0
        self.acknowledged = 0
        self.first_failure: tuple[int, str] | None = None  # (line number, why)

    def track(self, line_number: int, future: Future[RecordMetadata]) -> None:
        self.sent += 1
        future.add_done_callback(lambda f: self._done(line_number, f))

    def _done(self, line_number: int, future: Future[RecordMetadata]) -> None:
        error = future.exception()
        with self._lock:
            if error is None:
                self.acknowledged += 1
            elif self.first_failure is None or line_number < self.first_failure[0]:
                self.first_failure = (line_number, str(error))


def run_produce(args: argparse.Namespace) -> int:
    headers = [(k, v.encode()) for k, v in parse_key_values(args.header, "--header").items()]
    if args.timeout_s <= 0:
        raise CliError(f"--timeout-s: expected a positive number, got {args.timeout_s:g}")
    if args.key_separator == "":
        raise CliError("--key-separator: must not be empty")
    producer = Producer(
        broker_addresses(args),
        acks=ACKS[args.acks],
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        compression=args.compression,
        delivery_timeout_ms=int(args.timeout_s * 1000),
        max_block_ms=int(args.timeout_s * 1000),  # the wait for a missing topic, too
        enable_idempotence=idempotence(args),
        tls=client_tls(args),
        sasl=client_sasl(args),
    )
    tally = Tally()
    try:
        send_lines(producer, args, headers, sys.stdin, tally)
        producer.flush()
    finally:
        producer.close()
    summary: dict[str, Any] = {
        "sent": tally.sent,
        "acknowledged": tally.acknowledged,
        "failed": tally.sent - tally.acknowledged,
    }
    if tally.first_failure is not None:
        summary["first_failure"] = {"line": tally.first_failure[0], "error": tally.first_failure[1]}
    if args.output == "json":
        print(output.to_json(summary))
    if tally.acknowledged != tally.sent:
        line, why = tally.first_failure or (0, "not acknowledged")
        raise CliError(
            f"{summary['failed']} of {tally.sent} records not acknowledged; the first, line {line}: {why}"
        )
    return 0


def send_lines(
    producer: Producer,
    args: argparse.Namespace,
    headers: list[tuple[str, bytes]],
    lines: TextIO,
    tally: Tally,
) -> None:
    for number, line in enumerate(lines, start=1):
        text = line[:-1] if line.endswith("\n") else line
        if len(text) > LINE_BYTES_MAX:
            raise CliError(f"line {number}: longer than {LINE_BYTES_MAX} bytes")
        key = None
        if args.key_separator is not None:
            key_text, sep, text = text.partition(args.key_separator)
            if not sep:
                raise CliError(f"line {number}: no key separator {args.key_separator!r}")
            key = key_text.encode()
        future = producer.send(args.topic, text.encode(), key=key, headers=headers, partition=args.partition)
        tally.track(number, future)
