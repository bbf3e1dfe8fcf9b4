"""The authorizer decides as Kafka's StandardAuthorizer: super users first, a matching
DENY over any ALLOW whatever the order, literal, wildcard and prefixed patterns, hosts,
the DESCRIBE (and DESCRIBE_CONFIGS) that an ALLOW of a stronger operation implies (and a
DENY does not), and ``allow_everyone_if_no_acl_found`` for resources no ACL names.
Named cases for each rule, then properties over generated ACL sets."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.metadata import acls
from raftka.metadata.acls import Acl, Authorizer

ALICE = "User:CN=alice,OU=client,O=raftka"
BOB = "User:CN=bob,OU=client,O=raftka"
HOST = "10.0.0.5"


def acl(
    operation: str,
    name: str = "orders",
    *,
    principal: str = ALICE,
    permission: str = acls.ALLOW,
    pattern: str = acls.LITERAL,
    resource_type: str = acls.TOPIC,
    host: str = "*",
) -> Acl:
    return Acl(resource_type, name, pattern, principal, host, operation, permission)


def authorizer(*granted: Acl, super_users: tuple[str, ...] = (), everyone: bool = False) -> Authorizer:
    return Authorizer(super_users, lambda: {a.id: a for a in granted}, everyone)


@pytest.mark.parametrize(
    ("granted", "operation", "name", "expected"),
    [
        # patterns
        (acl(acls.READ), acls.READ, "orders", True),
        (acl(acls.READ), acls.READ, "orders-eu", False),  # a literal name is not a prefix
        (acl(acls.READ, "orders", pattern=acls.PREFIXED), acls.READ, "orders-eu", True),
        (acl(acls.READ, "orders", pattern=acls.PREFIXED), acls.READ, "order", False),
        (acl(acls.READ, "*"), acls.READ, "anything", True),
        # operations: ALL covers every one; one implies DESCRIBE only by ALLOW
        (acl(acls.ALL), acls.IDEMPOTENT_WRITE, "orders", True),
        (acl(acls.READ), acls.WRITE, "orders", False),
        (acl(acls.READ), acls.DESCRIBE, "orders", True),
        (acl(acls.WRITE), acls.DESCRIBE, "orders", True),
        (acl(acls.DELETE), acls.DESCRIBE, "orders", True),
        (acl(acls.ALTER), acls.DESCRIBE, "orders", True),
        (acl(acls.CREATE), acls.DESCRIBE, "orders", False),
        (acl(acls.DESCRIBE), acls.READ, "orders", False),
        (acl(acls.ALTER_CONFIGS), acls.DESCRIBE_CONFIGS, "orders", True),
        (acl(acls.DESCRIBE_CONFIGS), acls.ALTER_CONFIGS, "orders", False),
        (acl(acls.ALTER), acls.DESCRIBE_CONFIGS, "orders", False),
        # principals
        (acl(acls.READ, principal="User:*"), acls.READ, "orders", True),
        (acl(acls.READ, principal=BOB), acls.READ, "orders", False),
    ],
)
def test_an_acl_allows_what_kafka_says_it_does(
    granted: Acl, operation: str, name: str, expected: bool
) -> None:
    assert authorizer(granted).allowed(ALICE, operation, acls.TOPIC, name, HOST) is expected


def test_a_deny_of_read_does_not_deny_describe() -> None:
    judge = authorizer(acl(acls.ALL), acl(acls.READ, permission=acls.DENY))
    assert not judge.allowed(ALICE, acls.READ, acls.TOPIC, "orders", HOST)
    assert judge.allowed(ALICE, acls.DESCRIBE, acls.TOPIC, "orders", HOST)
    assert judge.allowed(ALICE, acls.WRITE, acls.TOPIC, "orders", HOST)


def test_a_prefixed_deny_wins_over_a_literal_allow_and_a_wildcard_deny_over_everything() -> None:
    judge = authorizer(acl(acls.READ), acl(acls.READ, "ord", pattern=acls.PREFIXED, permission=acls.DENY))
    assert not judge.allowed(ALICE, acls.READ, acls.TOPIC, "orders", HOST)
    judge = authorizer(acl(acls.ALL), acl(acls.ALL, "*", principal="User:*", permission=acls.DENY))
    assert not judge.allowed(ALICE, acls.DESCRIBE, acls.TOPIC, "orders", HOST)


def test_hosts_match_the_clients_address_or_any() -> None:
    judge = authorizer(acl(acls.READ, host=HOST))
    assert judge.allowed(ALICE, acls.READ, acls.TOPIC, "orders", HOST)
    assert not judge.allowed(ALICE, acls.READ, acls.TOPIC, "orders", "10.0.0.6")
    assert not judge.allowed(ALICE, acls.READ, acls.TOPIC, "orders", "")  # unknown: only "*" matches
    judge = authorizer(acl(acls.ALL), acl(acls.READ, host="10.0.0.6", permission=acls.DENY))
    assert judge.allowed(ALICE, acls.READ, acls.TOPIC, "orders", HOST)
    assert not judge.allowed(ALICE, acls.READ, acls.TOPIC, "orders", "10.0.0.6")


def test_a_resource_no_acl_names_is_open_only_with_allow_everyone_if_no_acl_found() -> None:
    bobs = acl(acls.READ, "payments", principal=BOB)
    assert not authorizer(bobs).allowed(ALICE, acls.READ, acls.TOPIC, "orders", HOST)
    assert authorizer(bobs, everyone=True).allowed(ALICE, acls.READ, acls.TOPIC, "orders", HOST)
    # an ACL for anyone on the resource makes it guarded: the flag no longer opens it
    assert not authorizer(bobs, everyone=True).allowed(ALICE, acls.READ, acls.TOPIC, "payments", HOST)
    # nor does it open another resource type's check
    assert not authorizer(bobs).allowed(ALICE, acls.READ, acls.GROUP, "payments", HOST)


def test_super_users_are_allowed_everything_even_against_a_deny() -> None:
    judge = authorizer(acl(acls.ALL, "*", principal="User:*", permission=acls.DENY), super_users=(ALICE,))
    assert judge.allowed(ALICE, acls.CLUSTER_ACTION, acls.CLUSTER, acls.CLUSTER_NAME, HOST)
    assert not judge.allowed(BOB, acls.READ, acls.TOPIC, "orders", HOST)


def test_write_on_some_topic_is_found_unless_a_deny_covers_it() -> None:
    """Kafka's authorizeByResourceType (KIP-679), which lets an idempotent producer init."""
    assert authorizer(acl(acls.WRITE, "team-", pattern=acls.PREFIXED)).allowed_on_any(
        ALICE, acls.WRITE, acls.TOPIC, HOST
    )
    assert not authorizer(acl(acls.READ)).allowed_on_any(ALICE, acls.WRITE, acls.TOPIC, HOST)
    covered = authorizer(
        acl(acls.WRITE, "team-a"), acl(acls.WRITE, "team-", pattern=acls.PREFIXED, permission=acls.DENY)
    )
    assert not covered.allowed_on_any(ALICE, acls.WRITE, acls.TOPIC, HOST)
    assert not authorizer(acl(acls.WRITE, host="10.0.0.6")).allowed_on_any(
        ALICE, acls.WRITE, acls.TOPIC, HOST
    )


# properties -------------------------------------------------------------------------------

NAMES = st.sampled_from(["orders", "orders-eu", "ord", "payments", "*"])
some_acl = st.builds(
    acl,
    st.sampled_from(acls.OPERATIONS),
    NAMES,
    principal=st.sampled_from([ALICE, BOB, "User:*"]),
    permission=st.sampled_from(acls.PERMISSION_TYPES),
    pattern=st.sampled_from(acls.PATTERN_TYPES),
    host=st.sampled_from(["*", HOST, "10.0.0.6"]),
).filter(lambda a: not (a.pattern_type == acls.PREFIXED and a.resource_name == "*"))
question = st.tuples(
    st.sampled_from(acls.OPERATIONS[1:]), st.sampled_from(["orders", "orders-eu", "payments"])
)


@settings(max_examples=300, deadline=None)
@given(st.lists(some_acl, max_size=8), question, st.randoms(use_true_random=False), st.booleans())
def test_the_order_of_acls_never_changes_a_decision(
    granted: list[Acl], asked: tuple[str, str], rng: object, everyone: bool
) -> None:
    shuffled = list(granted)
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    operation, name = asked
    assert authorizer(*granted, everyone=everyone).allowed(
        ALICE, operation, acls.TOPIC, name, HOST
    ) == authorizer(*shuffled, everyone=everyone).allowed(ALICE, operation, acls.TOPIC, name, HOST)


@settings(max_examples=300, deadline=None)
@given(st.lists(some_acl, max_size=8), question, st.booleans())
def test_a_matching_deny_refuses_whatever_else_allows(
    granted: list[Acl], asked: tuple[str, str], everyone: bool
) -> None:
    operation, name = asked
    deny = acl(operation, name, permission=acls.DENY, host=HOST)
    assert not authorizer(*granted, deny, everyone=everyone).allowed(ALICE, operation, acls.TOPIC, name, HOST)
    assert not authorizer(deny, *granted, everyone=everyone).allowed(ALICE, operation, acls.TOPIC, name, HOST)


@settings(max_examples=300, deadline=None)
@given(st.lists(some_acl, max_size=8), some_acl, question)
def test_an_allow_never_takes_a_right_away_and_a_deny_never_gives_one(
    granted: list[Acl], extra: Acl, asked: tuple[str, str]
) -> None:
    operation, name = asked
    before = authorizer(*granted).allowed(ALICE, operation, acls.TOPIC, name, HOST)
    with_allow = authorizer(*granted, dataclasses.replace(extra, permission_type=acls.ALLOW))
    with_deny = authorizer(*granted, dataclasses.replace(extra, permission_type=acls.DENY))
    assert with_allow.allowed(ALICE, operation, acls.TOPIC, name, HOST) >= before
    assert with_deny.allowed(ALICE, operation, acls.TOPIC, name, HOST) <= before


@settings(max_examples=300, deadline=None)
@given(st.lists(some_acl, max_size=8), st.sampled_from(["orders", "payments"]))
def test_what_allows_read_write_delete_or_alter_allows_describe(granted: list[Acl], name: str) -> None:
    judge = authorizer(*[a for a in granted if a.permission_type == acls.ALLOW])
    stronger = [acls.READ, acls.WRITE, acls.DELETE, acls.ALTER]
    if any(judge.allowed(ALICE, op, acls.TOPIC, name, HOST) for op in stronger):
        assert judge.allowed(ALICE, acls.DESCRIBE, acls.TOPIC, name, HOST)
