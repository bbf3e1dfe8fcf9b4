"""``raftka acls``: kafka-acls' spelling of operations, every principal given every
operation on every resource named, and the refusals that come before any request."""

from __future__ import annotations

import argparse

import pytest

from raftka.cli import acls
from raftka.cli.main import build_parser
from raftka.client.types import AclBinding
from raftka.command.errors import CliError

ALICE = "User:CN=alice,OU=client,O=raftka"


@pytest.mark.parametrize(
    ("text", "operation"),
    [
        ("Create", "CREATE"),
        ("AlterConfigs", "ALTER_CONFIGS"),
        ("alter-configs", "ALTER_CONFIGS"),
        ("ALL", "ALL"),
        ("ClusterAction", "CLUSTER_ACTION"),
        ("describe-configs", "DESCRIBE_CONFIGS"),
    ],
)
def test_operations_are_read_as_kafka_acls_spells_them(text: str, operation: str) -> None:
    assert acls._operation(text) == operation


def test_an_unknown_operation_is_a_usage_error() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected one of All, Read"):
        acls._operation("Eat")


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["acls", *argv])


def test_filters_cover_every_principal_operation_and_resource() -> None:
    args = parse(
        "remove", "--allow-principal", ALICE, "--deny-principal", "User:*", "--operation", "Delete",
        "--topic", "a", "--group", "g", "--resource-pattern-type", "prefixed", "--deny-host", "10.0.0.5",
    )  # fmt: skip
    filters = acls._filters(args, acls._principals(args), args.operation)
    assert filters == [
        AclBinding(ALICE, "DELETE", "TOPIC", "a", "PREFIXED", "ALLOW"),
        AclBinding(ALICE, "DELETE", "GROUP", "g", "PREFIXED", "ALLOW"),
        AclBinding("User:*", "DELETE", "TOPIC", "a", "PREFIXED", "DENY", "10.0.0.5"),
        AclBinding("User:*", "DELETE", "GROUP", "g", "PREFIXED", "DENY", "10.0.0.5"),
    ]


def test_an_acl_is_added_from_any_host_unless_hosts_are_named() -> None:
    args = parse(
        "add", "--allow-principal", ALICE, "--allow-host", "10.0.0.5", "--allow-host", "10.0.0.6",
        "--deny-principal", "User:*", "--operation", "IdempotentWrite", "--cluster",
    )  # fmt: skip
    assert acls._principals(args, "*") == [
        (ALICE, "ALLOW", "10.0.0.5"),
        (ALICE, "ALLOW", "10.0.0.6"),
        ("User:*", "DENY", "*"),
    ]
    assert args.operation == ["IDEMPOTENT_WRITE"]


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (("add", "--operation", "Create", "--topic", "t"), "name at least one principal"),
        (("add", "--allow-principal", ALICE, "--topic", "t"), "name at least one operation"),
        (("add", "--allow-principal", ALICE, "--operation", "Create"), "name at least one resource"),
        (("remove", "--operation", "Create"), "does not remove every ACL"),
    ],
)
def test_incomplete_commands_are_refused_before_any_request(argv: tuple[str, ...], problem: str) -> None:
    args = parse(*argv)
    with pytest.raises(CliError, match=problem):
        args.func(args)
