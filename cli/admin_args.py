"""What every admin command shares: where the controllers are, the Admin it opens, and
parsing of ``k=v`` arguments. Server errors are not handled here: ``client.AdminError``
reaches ``raftka.cli.main``, which prints it as one line with its code name."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from raftka.client.admin import Admin, RetryPolicy
from raftka.command import output
from raftka.command.addresses import bootstrap_addresses
from raftka.command.errors import CliError
from raftka.command.tls_args import add_tls_options, client_tls

T = TypeVar("T")


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap-controller``, ``--dir``, ``--timeout-s`` and ``--output``."""
    parser.add_argument(
        "--bootstrap-controller",
        metavar="HOST:PORT,...",
        help="controllers to ask (default: the local cluster from 'raftka cluster up')",
    )
    parser.add_argument("--dir", type=Path, help="local cluster directory (default: .raftka/local)")
    parser.add_argument(
        "--timeout-s", type=float, default=15.0, help="give up after this long without an answer (default 15)"
    )
    output.add_output_option(parser)
    add_tls_options(parser)


def open_admin(args: argparse.Namespace) -> Admin:
    if args.timeout_s <= 0:
        raise CliError(f"--timeout-s: expected a positive number, got {args.timeout_s:g}")
    addresses = bootstrap_addresses(args.bootstrap_controller, args.dir)
    return Admin(addresses, RetryPolicy(total_timeout_s=args.timeout_s), client_tls(args))


def parse_key_values(items: Sequence[str], flag: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``; a malformed or repeated key is an error."""
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CliError(f"{flag}: expected KEY=VALUE, got {item!r}")
        if key in pairs:
            raise CliError(f"{flag}: {key} is given more than once")
        pairs[key] = value
    return pairs


def single(results: Sequence[T], what: str) -> T:
    """The one result a one-item request must get back; anything else is a broken server."""
    if len(results) != 1:
        raise CliError(f"the controller answered {len(results)} results for one {what}")
    return results[0]
