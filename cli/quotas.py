"""``raftka quotas alter|describe``: client quotas, shaped like kafka-configs.

    raftka quotas alter --entity-type users --entity-name alice \\
        --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    raftka quotas alter --entity-type clients --entity-default --add-config request_percentage=50
    raftka quotas alter --entity-type users --entity-name alice --entity-type clients --entity-name app \\
        --delete-config producer_byte_rate
    raftka quotas describe --entity-type users

Each ``--entity-type`` (users or clients) is followed by ``--entity-name NAME`` or
``--entity-default`` (every user, or every client id, without a quota of its own);
describe without a name matches any. Keys and values are checked by the controller,
which names what it refuses; this command checks only its own syntax.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from raftka.cli.admin_args import add_connection_options, open_admin
from raftka.command import output
from raftka.command.errors import CliError

ENTITY_TYPES = {"users": "user", "clients": "client-id"}  # kafka-configs' names -> the protocol's
DEFAULT_SHOWN = "<default>"
ANY = object()  # describe: an entity type named without a name
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    quotas = commands.add_parser(
        "quotas", help="client quotas (byte rates, request time), like kafka-configs"
    )
    actions = quotas.add_subparsers(dest="action", required=True, metavar="ACTION")
    alter = actions.add_parser("alter", help="set or delete quotas of a user, a client id, or both")
    _entity_options(alter)
    alter.add_argument(
        "--add-config", action="append", default=[], metavar="KEY=VALUE,...", help="set; may repeat"
    )
    alter.add_argument(
        "--delete-config", action="append", default=[], metavar="KEY,...", help="remove; may repeat"
    )
    alter.add_argument("--validate-only", action="store_true", help="check the change, apply nothing")
    alter.set_defaults(func=run_alter)
    describe = actions.add_parser("describe", help="the quotas set, or those of the entities named")
    _entity_options(describe)
    describe.set_defaults(func=run_describe)
    for parser in (alter, describe):
        add_connection_options(parser)


class _EntityType(argparse.Action):
    def __call__(self, parser: Any, namespace: argparse.Namespace, value: Any, option: Any = None) -> None:
        if value not in ENTITY_TYPES:
            parser.error(f"--entity-type: expected users or clients, got {value!r}")
        namespace.entities = [*(namespace.entities or []), [ENTITY_TYPES[value], ANY]]


class _EntityName(argparse.Action):
    def __call__(self, parser: Any, namespace: argparse.Namespace, value: Any, option: Any = None) -> None:
        entities = namespace.entities or []
        if not entities or entities[-1][1] is not ANY:
            parser.error(f"{option}: give it after the --entity-type it names")
        entities[-1][1] = None if option == "--entity-default" else value


def _entity_options(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(entities=[])
    parser.add_argument(
        "--entity-type", action=_EntityType, metavar="users|clients", help="may repeat (once each)"
    )
    parser.add_argument(
        "--entity-name", action=_EntityName, metavar="NAME", help="the entity of the type before"
    )
    parser.add_argument(
        "--entity-default",
        action=_EntityName,
        nargs=0,
        help="the default entity of the type before (<default>)",
    )


def _entities(args: argparse.Namespace) -> list[tuple[str, Any]]:
    types = [t for t, _ in args.entities]
    if len(set(types)) != len(types):
        raise CliError("--entity-type: each of users and clients at most once")
    return [(t, n) for t, n in args.entities]


def _numbers(items: Sequence[str]) -> dict[str, float | None]:
    changes: dict[str, float | None] = {}
    for item in (part.strip() for raw in items for part in raw.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--add-config: expected KEY=VALUE, got {item!r}")
        try:
            changes[key.strip()] = float(value)
        except ValueError:
            raise CliError(f"--add-config: {key.strip()}: expected a number, got {value!r}") from None
    return changes


def run_alter(args: argparse.Namespace) -> int:
    entities = _entities(args)
    if not entities:
        raise CliError("--entity-type: name users, clients or both")
    unnamed = [t for t, n in entities if n is ANY]
    if unnamed:
        raise CliError(f"--entity-type {unnamed[0]}: follow it with --entity-name NAME or --entity-default")
    changes = _numbers(args.add_config)
    for key in (part.strip() for raw in args.delete_config for part in raw.split(",")):
        if not key or key in changes:
            raise CliError(f"--delete-config: {key!r} is empty, or also set or deleted elsewhere")
        changes[key] = None
    if not changes:
        raise CliError("quotas alter: give --add-config KEY=VALUE or --delete-config KEY")
    entity = dict(entities)
    with open_admin(args) as admin:
        admin.alter_client_quotas(entity, changes, validate_only=args.validate_only)
    if args.output == "json":
        print(output.to_json({"entity": entity, "changes": changes, "validate_only": args.validate_only}))
    else:
        shown = ", ".join(f"{k}={v:g}" if v is not None else f"{k} (deleted)" for k, v in changes.items())
        verb = "Would alter" if args.validate_only else "Altered"
        print(f"{verb} quotas of {_shown(entity)}: {shown}.")
    return 0


def run_describe(args: argparse.Namespace) -> int:
    components = [
        (t, MATCH_ANY, "") if n is ANY else (t, MATCH_DEFAULT, "") if n is None else (t, MATCH_EXACT, n)
        for t, n in _entities(args)
    ]
    with open_admin(args) as admin:
        entries = admin.describe_client_quotas(components)
    if args.output == "json":
        print(output.to_json([{"entity": dict(e.entity), "values": dict(e.values)} for e in entries]))
        return 0
    rows = [(_shown(e.entity), ", ".join(f"{k}={v:g}" for k, v in sorted(e.values.items()))) for e in entries]
    print(output.table(("ENTITY", "QUOTAS"), rows))
    return 0


def _shown(entity: Any) -> str:
    return ", ".join(f"{t}={DEFAULT_SHOWN if n is None else n}" for t, n in sorted(entity.items()))
