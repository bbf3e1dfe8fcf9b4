"""``raftka configs describe|alter --topic NAME | --broker ID | --broker-defaults``:
kafka-configs.sh for topics and for brokers' dynamic configs (``--entity-type brokers
--entity-name ID`` or ``--entity-default``).

``alter`` is incremental, like Kafka's ``--add-config``/``--delete-config``: only the
named keys change, and ``--delete`` returns a key to its default. Keys and values are
checked by the controller; this command checks only its own syntax.
"""

from __future__ import annotations

import argparse

from raftka.cli.admin_args import add_connection_options, open_admin, parse_key_values, single
from raftka.command import output
from raftka.command.errors import CliError


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    configs = commands.add_parser("configs", help="describe and alter topic and broker configs")
    actions = configs.add_subparsers(dest="action", required=True, metavar="ACTION")

    describe = actions.add_parser("describe", help="every config of a topic or broker, defaults included")
    _add_entity(describe)
    add_connection_options(describe)
    describe.set_defaults(func=run_describe)

    alter = actions.add_parser("alter", help="set or delete configs of a topic or broker")
    _add_entity(alter)
    alter.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    alter.add_argument(
        "--delete", action="append", default=[], metavar="KEY", help="back to the default; repeatable"
    )
    alter.add_argument("--validate-only", action="store_true", help="check the change, apply nothing")
    add_connection_options(alter)
    alter.set_defaults(func=run_alter)


def _add_entity(parser: argparse.ArgumentParser) -> None:
    entity = parser.add_mutually_exclusive_group(required=True)
    entity.add_argument("--topic", metavar="NAME")
    entity.add_argument("--broker", metavar="ID", help="one broker's dynamic configs")
    entity.add_argument(
        "--broker-defaults", action="store_true", help="the dynamic configs of every broker without its own"
    )


def _broker(args: argparse.Namespace) -> str | None:
    """The broker resource asked for ("" for the defaults), or None for a topic."""
    if args.broker_defaults:
        return ""
    if args.broker is None:
        return None
    if not (args.broker.isascii() and args.broker.isdigit()):
        raise CliError(f"--broker: expected a broker id, got {args.broker!r}")
    return str(int(args.broker))


def _entity_name(args: argparse.Namespace) -> str:
    broker = _broker(args)
    if broker is None:
        return f"topic {args.topic}"
    return f"broker {broker}" if broker else "the broker defaults"


def run_describe(args: argparse.Namespace) -> int:
    broker = _broker(args)
    with open_admin(args) as admin:
        if broker is None:
            found = single(admin.describe_configs([args.topic]), "topic")
        else:
            found = single(admin.describe_broker_configs([broker]), "broker")
    found.check()
    rows = [{"name": e.name, "value": e.value, "is_default": e.is_default} for e in found.entries]
    if args.output == "json":
        key = ("topic", args.topic) if broker is None else ("broker", broker)
        print(output.to_json({key[0]: key[1], "configs": rows}))
    else:
        print(f"Configs for {_entity_name(args)}:")
        print(output.table(("NAME", "VALUE", "DEFAULT"), [tuple(r.values()) for r in rows]))
    return 0


def alter_ops(sets: list[str], deletes: list[str]) -> dict[str, str | None]:
    """``--set``/``--delete`` as one change: key -> value, or None to delete."""
    ops: dict[str, str | None] = dict(parse_key_values(sets, "--set"))
    for raw in deletes:
        key = raw.strip()
        if not key or "=" in key:
            raise CliError(f"--delete: expected a config name, got {raw!r}")
        if key in ops:
            raise CliError(f"{key}: given to both --set and --delete, or to --delete twice")
        ops[key] = None
    if not ops:
        raise CliError("configs alter: give at least one --set KEY=VALUE or --delete KEY")
    return ops


def run_alter(args: argparse.Namespace) -> int:
    ops = alter_ops(args.set, args.delete)
    broker = _broker(args)
    with open_admin(args) as admin:
        if broker is None:
            result = single(admin.alter_configs({args.topic: ops}, validate_only=args.validate_only), "topic")
        else:
            result = single(
                admin.alter_broker_configs({broker: ops}, validate_only=args.validate_only), "broker"
            )
    result.check()
    if args.output == "json":
        print(
            output.to_json(
                {
                    **({"topic": args.topic} if broker is None else {"broker": broker}),
                    "set": {k: v for k, v in ops.items() if v is not None},
                    "deleted": [k for k, v in ops.items() if v is None],
                    "validate_only": args.validate_only,
                }
            )
        )
    else:
        changes = ", ".join(f"{k}={v}" if v is not None else f"{k} (default)" for k, v in ops.items())
        verb = "Would alter" if args.validate_only else "Altered"
        print(f"{verb} configs of {_entity_name(args)}: {changes}.")
    return 0
