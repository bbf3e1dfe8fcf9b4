"""What the data commands (produce, consume, offsets list, perf, chaos) share: where the
brokers are (``--bootstrap-server`` as Kafka's tools spell it; without it, the brokers
of the local cluster from ``raftka cluster up``) and, for those that produce,
``--no-idempotence``."""

from __future__ import annotations

import argparse
from pathlib import Path

from raftka.command import local, output
from raftka.command.addresses import parse_addresses
from raftka.command.errors import CliError
from raftka.command.tls_args import add_tls_options


def add_broker_options(
    parser: argparse.ArgumentParser,
    bootstrap_help: str = "brokers to ask (default: the local cluster from 'raftka cluster up')",
) -> None:
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT,...", help=bootstrap_help)
    parser.add_argument("--dir", type=Path, help="local cluster directory (default: .raftka/local)")
    output.add_output_option(parser)
    add_tls_options(parser)


def add_idempotence_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-idempotence",
        action="store_true",
        help="an at-least-once producer, one batch in flight per partition (Kafka's enable.idempotence=false); "
        "idempotence is on by default with acks all and off with acks 1 or 0",
    )


def idempotence(args: argparse.Namespace) -> bool | None:
    """The producer's ``enable_idempotence``: False when asked, else its default."""
    return False if args.no_idempotence else None


def broker_addresses(args: argparse.Namespace) -> list[str]:
    if args.bootstrap_server is None:
        addresses = local.load(local.resolve_dir(args.dir)).broker_addresses()
        if not addresses:
            raise CliError("the local cluster has no brokers; pass --bootstrap-server")
        return addresses
    return parse_addresses(args.bootstrap_server, "--bootstrap-server")


def positive(value: str) -> int:
    """argparse type: an integer of 1 or more."""
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {number}")
    return number


def not_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {number}")
    return number
