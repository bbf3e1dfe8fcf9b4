"""``raftka acls add|list|remove``: ACLs, shaped like kafka-acls.

    raftka acls add --allow-principal User:CN=alice,OU=client,O=raftka --operation Create --topic orders
    raftka acls add --allow-principal User:CN=ops,OU=client,O=raftka --operation All --cluster
    raftka acls list --topic orders
    raftka acls remove --allow-principal User:CN=alice,OU=client,O=raftka --topic orders

Every principal is given every operation on every resource named (``--topic`` and
``--group`` may repeat), from every host named (``--allow-host``/``--deny-host``, an IP
address; none: ``*``, any); one request, so all are added or none.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from raftka.cli.admin_args import add_connection_options, open_admin
from raftka.client.types import AclBinding
from raftka.command import output
from raftka.command.errors import CliError

OPERATIONS = (
    "All",
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "ClusterAction",
    "DescribeConfigs",
    "AlterConfigs",
    "IdempotentWrite",
)
PATTERNS = ("literal", "prefixed")
CLUSTER_NAME = "kafka-cluster"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    acls = commands.add_parser("acls", help="access control lists (with mutual TLS on), like kafka-acls")
    actions = acls.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="allow or deny principals operations on resources")
    _principal_options(add)
    _operation_option(add)
    _resource_options(add)
    add.set_defaults(func=run_add)
    listing = actions.add_parser("list", help="the ACLs, or those on the resources and principal named")
    listing.add_argument("--principal", metavar="PRINCIPAL", help="only this principal's")
    _resource_options(listing)
    listing.set_defaults(func=run_list)
    remove = actions.add_parser("remove", help="remove the ACLs that match")
    _principal_options(remove)
    _operation_option(remove)
    _resource_options(remove)
    remove.set_defaults(func=run_remove)
    for parser in (add, listing, remove):
        add_connection_options(parser)


def _principal_options(parser: argparse.ArgumentParser) -> None:
    for permission in ("allow", "deny"):
        parser.add_argument(
            f"--{permission}-principal",
            action="append",
            default=[],
            metavar="PRINCIPAL",
            help=f"User:CN=...,OU=...,O=... (or User:*) to {permission}; may repeat",
        )
        parser.add_argument(
            f"--{permission}-host",
            action="append",
            default=[],
            metavar="IP",
            help=f"the client address the {permission} applies to (default * for any); may repeat",
        )


def _operation_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--operation",
        action="append",
        default=[],
        type=_operation,
        metavar="OP",
        help=f"{', '.join(OPERATIONS)}; may repeat",
    )


def _resource_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--topic", action="append", default=[], metavar="NAME", help="a topic (* for all); may repeat"
    )
    parser.add_argument(
        "--group", action="append", default=[], metavar="NAME", help="a group (* for all); may repeat"
    )
    parser.add_argument(
        "--transactional-id",
        action="append",
        default=[],
        metavar="ID",
        help="a transactional id (* for all); may repeat",
    )
    parser.add_argument(
        "--cluster", action="store_true", help="the cluster (elect leaders, manage ACLs, idempotent writes)"
    )
    parser.add_argument(
        "--resource-pattern-type",
        choices=PATTERNS,
        help="literal (default for add) or prefixed: the names are prefixes",
    )


def _operation(text: str) -> str:
    """``AlterConfigs``, ``alter-configs`` or ``ALTER_CONFIGS`` -> ``ALTER_CONFIGS``."""
    for name in OPERATIONS:
        if text.replace("-", "").replace("_", "").lower() == name.lower():
            return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(name)).upper()
    raise argparse.ArgumentTypeError(f"expected one of {', '.join(OPERATIONS)}, got {text!r}")


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    named = [("TOPIC", t) for t in args.topic] + [("GROUP", g) for g in args.group]
    named += [("TRANSACTIONAL_ID", t) for t in args.transactional_id]
    return named + ([("CLUSTER", CLUSTER_NAME)] if args.cluster else [])


def _pattern(args: argparse.Namespace) -> str:
    return (args.resource_pattern_type or "").upper()


def _principals(args: argparse.Namespace, any_host: str = "") -> list[tuple[str, str, str]]:
    """(principal, ALLOW or DENY, host) for each principal and host named; a principal
    without hosts gets ``any_host`` (``*`` to add, "" to match any in a filter)."""
    return [
        (principal, permission, host)
        for permission, principals, hosts in (
            ("ALLOW", args.allow_principal, args.allow_host),
            ("DENY", args.deny_principal, args.deny_host),
        )
        for principal in principals
        for host in hosts or [any_host]
    ]


def run_add(args: argparse.Namespace) -> int:
    principals, resources = _principals(args, "*"), _resources(args)
    if not principals:
        raise CliError("--allow-principal or --deny-principal: name at least one principal")
    if not args.operation:
        raise CliError("--operation: name at least one operation")
    if not resources:
        raise CliError("--topic, --group, --transactional-id or --cluster: name at least one resource")
    acls = [
        AclBinding(principal, operation, kind, name, _pattern(args) or "LITERAL", permission, host)
        for (principal, permission, host), operation, (kind, name) in itertools.product(
            principals, args.operation, resources
        )
    ]
    with open_admin(args) as admin:
        admin.create_acls(acls)
    _print(acls, args, f"Added {len(acls)} ACL(s):")
    return 0


def run_list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        found = [
            acl
            for acl_filter in _filters(args, [(args.principal or "", "", "")], [""])
            for acl in admin.describe_acls(acl_filter)
        ]
    _print(list(dict.fromkeys(found)), args, "")
    return 0


def run_remove(args: argparse.Namespace) -> int:
    if not _principals(args) and not _resources(args):
        raise CliError(
            "name a principal (--allow-principal/--deny-principal) or a resource: remove does not remove every ACL"
        )
    filters = _filters(args, _principals(args) or [("", "", "")], args.operation or [""])
    with open_admin(args) as admin:
        removed = admin.delete_acls(filters)
    _print(removed, args, f"Removed {len(removed)} ACL(s):")
    return 0


def _filters(
    args: argparse.Namespace, principals: list[tuple[str, str, str]], operations: list[str]
) -> list[AclBinding]:
    resources = _resources(args) or [("", "")]
    return [
        AclBinding(principal, operation, kind, name, _pattern(args), permission, host)
        for (principal, permission, host), operation, (kind, name) in itertools.product(
            principals, operations, resources
        )
    ]


def _print(acls: list[AclBinding], args: argparse.Namespace, heading: str) -> None:
    rows: list[dict[str, Any]] = [
        {
            "principal": a.principal,
            "permission": a.permission_type,
            "operation": a.operation,
            "resource_type": a.resource_type,
            "resource_name": a.resource_name,
            "pattern_type": a.pattern_type,
            "host": a.host,
        }
        for a in acls
    ]
    if args.output == "json":
        print(output.to_json(rows))
        return
    if heading:
        print(heading)
    print(
        output.table(
            ("PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE", "NAME", "PATTERN", "HOST"),
            [tuple(r.values()) for r in rows],
        )
    )
