"""``raftka users add|delete|list``: SASL/SCRAM users, kafka-configs' ``--entity-type users``
in raftka's shape.

    printf '%s' "$PASSWORD" | raftka users add alice --mechanism SCRAM-SHA-512 --password-stdin
    raftka users add alice --password-file alice.password      # SCRAM-SHA-512 and -256
    raftka users list
    raftka users delete alice --mechanism SCRAM-SHA-256

The password comes from a file or stdin, never from the command line: a command line is
readable by every user of the machine while the command runs (``ps``,
``/proc/PID/cmdline``) and stays in shell history. It is salted and hashed here; the
cluster keeps only the keys SCRAM derives from it. One trailing newline is dropped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from raftka.cli.admin_args import add_connection_options, open_admin
from raftka.client.types import ScramDeletion, ScramUpsertion, UserResult
from raftka.command import output
from raftka.command.errors import CliError
from raftka.security import scram

PASSWORD_BYTES_MAX = 1_024


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    users = commands.add_parser(
        "users", help="SASL/SCRAM users (passwords), like kafka-configs --entity-type users"
    )
    actions = users.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="add a user, or set its password")
    add.add_argument("name", help="the user; it logs in as principal User:NAME")
    _mechanism_option(add, "default: both")
    source = add.add_mutually_exclusive_group(required=True)
    source.add_argument("--password-file", type=Path, metavar="FILE", help="read the password from FILE")
    source.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    add.add_argument(
        "--iterations",
        type=int,
        default=scram.ITERATIONS_DEFAULT,
        help=f"PBKDF2 iterations, {scram.ITERATIONS_MIN} to {scram.ITERATIONS_MAX} (default {scram.ITERATIONS_DEFAULT})",
    )
    add.set_defaults(func=run_add)
    delete = actions.add_parser("delete", help="remove a user's credentials")
    delete.add_argument("name")
    _mechanism_option(delete, "default: every one it has")
    delete.set_defaults(func=run_delete)
    listing = actions.add_parser("list", help="users and their mechanisms (never a password or a key)")
    listing.add_argument("names", nargs="*", metavar="NAME", help="only these users")
    listing.set_defaults(func=run_list)
    for parser in (add, delete, listing):
        add_connection_options(parser)


def _mechanism_option(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--mechanism",
        action="append",
        default=[],
        choices=scram.MECHANISMS,
        help=f"{' or '.join(scram.MECHANISMS)}; may repeat ({default})",
    )


def run_add(args: argparse.Namespace) -> int:
    password = _password(args)
    mechanisms = args.mechanism or list(scram.MECHANISMS)
    upsertions = [ScramUpsertion(args.name, m, password, args.iterations) for m in dict.fromkeys(mechanisms)]
    with open_admin(args) as admin:
        results = admin.alter_user_scram_credentials(upsertions=upsertions)
    _check(results)
    _print_changed(args, "added", mechanisms)
    return 0


def run_delete(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        mechanisms = args.mechanism or [
            m for u in admin.describe_user_scram_credentials([args.name]) for m, _ in u.mechanisms
        ]
        if not mechanisms:
            raise CliError(f"user {args.name!r}: has no SCRAM credential")
        results = admin.alter_user_scram_credentials(
            deletions=[ScramDeletion(args.name, m) for m in dict.fromkeys(mechanisms)]
        )
    _check(results)
    _print_changed(args, "deleted", mechanisms)
    return 0


def run_list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        users = admin.describe_user_scram_credentials(args.names)
    rows = [
        {"user": u.user, "mechanism": m, "iterations": i, "error": u.error}
        for u in users
        for m, i in (u.mechanisms or [("", 0)])
    ]
    if args.output == "json":
        print(output.to_json(rows))
    else:
        print(output.table(("USER", "MECHANISM", "ITERATIONS", "ERROR"), [tuple(r.values()) for r in rows]))
    missing = [u for u in users if u.error is not None]
    if missing:
        raise CliError("; ".join(f"user {u.user!r}: {u.error}: {u.message}" for u in missing))
    return 0


def _password(args: argparse.Namespace) -> str:
    where = "stdin" if args.password_stdin else str(args.password_file)
    try:
        if args.password_stdin:
            raw = sys.stdin.buffer.read(PASSWORD_BYTES_MAX + 1)
        else:
            with args.password_file.open("rb") as file:
                raw = file.read(PASSWORD_BYTES_MAX + 1)
    except OSError as e:
        raise CliError(f"--password-file: cannot read {where}: {e.strerror}") from None
    if len(raw) > PASSWORD_BYTES_MAX:
        raise CliError(f"the password from {where}: longer than {PASSWORD_BYTES_MAX} bytes")
    try:
        password = raw.decode().removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise CliError(f"the password from {where}: not UTF-8") from None
    if not password:
        raise CliError(f"the password from {where}: empty")
    return password


def _check(results: list[UserResult]) -> None:
    failed = [r for r in results if r.error is not None]
    if failed:
        raise CliError("; ".join(f"user {r.user!r}: {r.error}: {r.message}" for r in failed))


def _print_changed(args: argparse.Namespace, what: str, mechanisms: list[str]) -> None:
    mechanisms = list(dict.fromkeys(mechanisms))
    if args.output == "json":
        print(output.to_json({"user": args.name, what: mechanisms}))
    else:
        print(f"User {args.name!r}: {what} {', '.join(mechanisms)}")
