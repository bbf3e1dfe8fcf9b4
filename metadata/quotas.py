"""Client quotas: what they are in the image, which may be set, and which one applies to
a client (Kafka's ``ClientQuotaManager`` entities and its default quota callback).

A quota entity names a user, a client id, or both; either may be the default entity
(``<default>``: every user, or every client id, without a quota of its own). An entity
holds values for three keys: ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per
second, whole numbers) and ``request_percentage`` (the share of the broker's event loop,
in percent, a client's requests may take; 100 is the whole loop, raftka's one "thread").

The quota that applies to a client is the first entity of Kafka's order that has the
key, looked up per key:

    user + client-id, user + <default> client-id, user,
    <default> user + client-id, <default> user + <default> client-id, <default> user,
    client-id, <default> client-id

and the client shares it with every client that the matched entity covers by name: a
quota set on user alice is one budget for all of alice's client ids, while a default
entity's quota is a budget per user (or per client id) it covers. ``QuotaMatch.bucket``
says which budget (Kafka's metric tags).

Quotas are records in the metadata log (``ClientQuotaRecord``), so every broker replays
the same ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from raftka.v1 import metadata_pb2

USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
WHOLE_NUMBER_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})
DEFAULT_SHOWN = "<default>"  # how tools print the default entity
NAME_CHARS_MAX = 1_000
QUOTA_VALUE_MAX = float(2**63 - 1)  # Kafka's Long.MAX_VALUE: "no quota"
ANONYMOUS = "ANONYMOUS"  # the user of a connection without TLS or a login, as Kafka names it
ENTITIES_MAX = 100_000  # quota entities in the cluster; more are refused
QUOTA_ENTRIES_PER_REQUEST_MAX = 1_000


class _Default:
    """The default entity of a type (Kafka's null entity name)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return DEFAULT_SHOWN


DEFAULT = _Default()
Name = str | _Default | None  # None: the entity does not name this type


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    user: Name = None
    client_id: Name = None

    def components(self) -> Iterator[tuple[str, str | None]]:
        """(entity type, name or None for the default), by type."""
        for entity_type, name in ((CLIENT_ID, self.client_id), (USER, self.user)):
            if name is not None:
                yield entity_type, None if name is DEFAULT else name  # type: ignore[misc]

    def sort_key(self) -> tuple[tuple[str, bool, str], ...]:
        """A total order (snapshots write entities in it): by type, the default first."""
        return tuple((t, n is not None, n or "") for t, n in self.components())

    def to_pb(self) -> list[metadata_pb2.ClientQuotaEntity]:
        out = []
        for entity_type, name in self.components():
            component = metadata_pb2.ClientQuotaEntity(entity_type=entity_type)
            if name is not None:
                component.entity_name = name
            out.append(component)
        return out

    def __str__(self) -> str:
        return ", ".join(f"{t}={DEFAULT_SHOWN if n is None else n}" for t, n in self.components())


class QuotaMatch(NamedTuple):
    """The quota a client is held to: its value, and whose budget it shares."""

    value: float  # math.inf: no quota
    bucket: tuple[str, str]  # (user, client id) the budget is counted for; "" where shared


NO_QUOTA = math.inf


def entity_problem(components: Iterable[metadata_pb2.ClientQuotaEntity], where: str) -> str | None:
    """Why ``components`` do not name a quota entity (None: they do); names the field."""
    seen: set[str] = set()
    for i, component in enumerate(components):
        field = f"{where}[{i}]"
        if component.entity_type not in ENTITY_TYPES:
            return (
                f"{field}.entity_type: {component.entity_type!r} is not one of {', '.join(ENTITY_TYPES)}"
                + (" (raftka has no ip quotas)" if component.entity_type == "ip" else "")
            )
        if component.entity_type in seen:
            return f"{field}.entity_type: {component.entity_type!r} appears twice"
        seen.add(component.entity_type)
        if component.HasField("entity_name"):
            name = component.entity_name
            if not name:
                return f"{field}.entity_name: empty (leave it out for the default entity)"
            if len(name) > NAME_CHARS_MAX:
                return f"{field}.entity_name: longer than {NAME_CHARS_MAX} characters"
    if not seen:
        return f"{where}: names no entity type (user, client-id or both)"
    return None


def entity_of(components: Iterable[metadata_pb2.ClientQuotaEntity]) -> QuotaEntity:
    """The entity ``components`` name (checked by ``entity_problem`` first)."""
    names: dict[str, Name] = {}
    for component in components:
        names[component.entity_type] = component.entity_name if component.HasField("entity_name") else DEFAULT
    return QuotaEntity(user=names.get(USER), client_id=names.get(CLIENT_ID))


def value_problem(key: str, value: float, where: str) -> str | None:
    """Why ``value`` cannot be set for ``key`` (None: it can); names the field."""
    if key not in KEYS:
        return f"{where}.key: {key!r} is not one of {', '.join(KEYS)}"
    if not math.isfinite(value) or value <= 0 or value > QUOTA_VALUE_MAX:
        return f"{where}.value: {key} must be above 0 and at most {QUOTA_VALUE_MAX:.0f}, got {value}"
    if key in WHOLE_NUMBER_KEYS and value != int(value):
        return f"{where}.value: {key} is in bytes per second, a whole number, got {value}"
    return None


def record_problem(r: metadata_pb2.ClientQuotaRecord) -> str | None:
    kind = "ClientQuotaRecord"
    problem = entity_problem(r.entity, f"{kind}.entity")
    if problem is None and [c.entity_type for c in r.entity] != sorted(c.entity_type for c in r.entity):
        problem = f"{kind}.entity: components not sorted by entity_type"
    if problem is None and r.remove:
        problem = None if r.key in KEYS else f"{kind}.key: {r.key!r} is not one of {', '.join(KEYS)}"
    elif problem is None:
        problem = value_problem(r.key, r.value, kind)
    return problem


def record(entity: QuotaEntity, key: str, value: float | None) -> metadata_pb2.ClientQuotaRecord:
    """The record that sets ``key`` of ``entity`` to ``value`` (None: removes it)."""
    message = metadata_pb2.ClientQuotaRecord(entity=entity.to_pb(), key=key)
    if value is None:
        message.remove = True
    else:
        message.value = value
    return message


def resolve(
    quotas: Mapping[QuotaEntity, Mapping[str, float]], user: str, client_id: str, key: str
) -> QuotaMatch:
    """The quota ``key`` that applies to ``user`` (without ``User:``) with ``client_id``, in
    Kafka's order; ``NO_QUOTA`` counted per client id (as Kafka counts it) when none does."""
    if quotas:
        for entity, bucket in _candidates(user, client_id):
            value = quotas.get(entity, {}).get(key)
            if value is not None:
                return QuotaMatch(value, bucket)
    return QuotaMatch(NO_QUOTA, ("", client_id))


def _candidates(user: str, client_id: str) -> Iterator[tuple[QuotaEntity, tuple[str, str]]]:
    both = (user, client_id)
    user_only = (user, "")
    client_only = ("", client_id)
    yield QuotaEntity(user, client_id), both
    yield QuotaEntity(user, DEFAULT), both
    yield QuotaEntity(user, None), user_only
    yield QuotaEntity(DEFAULT, client_id), both
    yield QuotaEntity(DEFAULT, DEFAULT), both
    yield QuotaEntity(DEFAULT, None), user_only
    yield QuotaEntity(None, client_id), client_only
    yield QuotaEntity(None, DEFAULT), client_only


def user_of(principal_name: str | None) -> str:
    """A quota's user for a principal (``User:alice`` -> ``alice``); ANONYMOUS without one."""
    if not principal_name:
        return ANONYMOUS
    return principal_name.removeprefix("User:")
