"""``raftka certs init DIR``: a development CA and certificates for every controller,
broker and client of a cluster (``raftka.security.certs``), ready for the ``[tls]`` table of
each node's config and for the commands' ``--tls-*`` flags."""

from __future__ import annotations

import argparse
from pathlib import Path

from raftka.command import output
from raftka.command.errors import CliError
from raftka.security.certs import DEFAULT_DAYS, DEFAULT_HOSTS, CertsError, init_certs


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    certs = commands.add_parser("certs", help="certificates for mutual TLS")
    actions = certs.add_subparsers(dest="action", required=True, metavar="ACTION")
    init = actions.add_parser(
        "init", help="a development CA and a certificate per controller, broker and client"
    )
    init.add_argument("directory", type=Path, metavar="DIR", help="where to write them (created if missing)")
    init.add_argument(
        "--controllers", type=_ids, default=[1, 2, 3], metavar="ID,...", help="controller ids (default 1,2,3)"
    )
    init.add_argument(
        "--brokers",
        type=_ids,
        default=[101, 102, 103],
        metavar="ID,...",
        help="broker ids (default 101,102,103)",
    )
    init.add_argument(
        "--clients",
        type=_names,
        default=["admin"],
        metavar="NAME,...",
        help="client certificates (default admin)",
    )
    init.add_argument(
        "--hosts",
        type=_names,
        default=[],
        metavar="HOST,...",
        help=f"host names or IPs the nodes are reached at, besides {', '.join(DEFAULT_HOSTS)}",
    )
    init.add_argument("--days", type=int, default=DEFAULT_DAYS, help=f"validity (default {DEFAULT_DAYS})")
    output.add_output_option(init)
    init.set_defaults(func=run_init)


def run_init(args: argparse.Namespace) -> int:
    try:
        written = init_certs(
            args.directory,
            controllers=args.controllers,
            brokers=args.brokers,
            clients=args.clients,
            hosts=[*DEFAULT_HOSTS, *args.hosts],
            days=args.days,
        )
    except CertsError as e:
        raise CliError(str(e)) from None
    rows = [
        {"name": name, "cert": str(path), "key": str(path.with_suffix(".key"))}
        for name, path in written.items()
    ]
    if args.output == "json":
        print(output.to_json(rows))
    else:
        print(output.table(("NAME", "CERTIFICATE", "KEY"), [(r["name"], r["cert"], r["key"]) for r in rows]))
    return 0


def _ids(text: str) -> list[int]:
    """argparse type: ``1,2,3`` (may be empty: no certificates of that kind)."""
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ID,... of integers, got {text!r}") from None
    if any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"ids are 0 or more, got {text!r}")
    return ids


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]
