"""Topic configs: the keys a topic may set, their defaults (Kafka's) and their checks.

Values travel as strings (as in Kafka's protocol) and are stored in ``ConfigRecord``s
in normalized form: ``validate_config`` strips them, writes integers canonically
(``" +0100 "`` -> ``"100"``) and refuses anything else, naming the key, so a value in
the log always parses and two spellings of one value never look like a change.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from raftka.metadata.validation import ErrorCode, ValidationError

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
GIB = 1 << 30
_INTEGER = re.compile(r"[+-]?[0-9]+")  # ASCII only: int() would also take "1_000" and "١٢"
_INT64_DIGITS = len(str(2**63))
_REPLICA_ENTRY = re.compile(r"[0-9]{1,10}:[0-9]{1,10}")

RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
SEGMENT_BYTES = "segment.bytes"
MIN_INSYNC_REPLICAS = "min.insync.replicas"
MAX_MESSAGE_BYTES = "max.message.bytes"
CLEANUP_POLICY = "cleanup.policy"
COMPACT = "compact"
DELETE = "delete"
MIN_COMPACTION_LAG_MS = "min.compaction.lag.ms"
MAX_COMPACTION_LAG_MS = "max.compaction.lag.ms"
UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
ALL_REPLICAS = "*"
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


class BadValue(Exception):
    """Why a value is wrong; ``validate_config`` adds the key and the value."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    default: str
    doc: str
    parse: Callable[[str], str]  # stripped value -> normalized value; raises BadValue
    kind: str  # Kafka's config type: LONG, INT, DOUBLE, BOOLEAN, STRING or LIST


def integer(minimum: int, maximum: int, type_name: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if not _INTEGER.fullmatch(value):
            raise BadValue(f"not a number of type {type_name}")
        # Leading zeros dropped and the length bounded first: int() refuses over 4300 digits.
        digits = value.lstrip("+-").lstrip("0") or "0"
        if len(digits) > _INT64_DIGITS:
            raise BadValue(f"out of range for type {type_name}")
        number = -int(digits) if value.startswith("-") else int(digits)
        if not -maximum - 1 <= number <= maximum:
            raise BadValue(f"out of range for type {type_name}")
        if number < minimum:
            raise BadValue(f"must be at least {minimum}")
        return str(number)

    return parse


def _at_most(limit: int, parse: Callable[[str], str]) -> Callable[[str], str]:
    def bounded(value: str) -> str:
        normalized = parse(value)
        if int(normalized) > limit:
            raise BadValue(f"must be at most {limit}")
        return normalized

    return bounded


def _timestamp_type(value: str) -> str:
    if value not in TIMESTAMP_TYPES:
        raise BadValue(f"must be one of {', '.join(TIMESTAMP_TYPES)}")
    return value


def _boolean(value: str) -> str:
    if value.lower() not in ("true", "false"):
        raise BadValue("must be true or false")
    return value.lower()


def _throttled_replicas(value: str) -> str:
    """Kafka's ``ThrottledReplicaListValidator``: ``*`` or ``partition:broker`` entries."""
    if value == ALL_REPLICAS:
        return value
    entries = [entry.strip() for entry in value.split(",")] if value else []
    for entry in entries:
        if not _REPLICA_ENTRY.fullmatch(entry):
            raise BadValue(f"entry {entry!r} is not partition:broker (or give '*' alone)")
    return ",".join(f"{int(p)}:{int(b)}" for p, b in (entry.split(":") for entry in entries))


def throttled_partitions(value: str, broker_id: int) -> frozenset[int] | None:
    """The partitions a normalized throttled-replicas value names for ``broker_id``; None for all."""
    if value == ALL_REPLICAS:
        return None
    entries = (entry.split(":") for entry in value.split(",") if entry)
    return frozenset(int(p) for p, b in entries if int(b) == broker_id)


def _cleanup_policy(value: str) -> str:
    """Kafka's list of ``compact`` and ``delete`` (case as written); normalized sorted and
    without repeats, so ``delete,compact`` and ``compact,delete`` are one value."""
    policies = {policy.strip() for policy in value.split(",")}
    unknown = sorted(policies - {COMPACT, DELETE})
    if unknown:
        raise BadValue(f"{unknown[0]!r} is not a policy: give 'delete', 'compact' or both, comma-separated")
    return ",".join(sorted(policies))


def cleanup_policies(value: str) -> frozenset[str]:
    """The policies a normalized ``cleanup.policy`` value names."""
    return frozenset(value.split(","))


def _ratio(value: str) -> str:
    """A DOUBLE in 0..1, written as Python writes floats (``.5`` -> ``0.5``)."""
    try:
        number = float(value)
    except ValueError:
        raise BadValue("not a number of type DOUBLE") from None
    if not 0.0 <= number <= 1.0:  # also refuses nan
        raise BadValue("must be between 0 and 1")
    return repr(number)


TOPIC_CONFIGS: Mapping[str, ConfigDef] = MappingProxyType(
    {
        d.name: d
        for d in (
            ConfigDef(
                RETENTION_MS,
                "604800000",
                "how long a segment is kept after its last write (ms); -1 keeps it forever",
                integer(-1, INT64_MAX, "LONG"),
                "LONG",
            ),
            ConfigDef(
                RETENTION_BYTES,
                "-1",
                "the partition size above which old segments are deleted; -1 is unlimited",
                integer(-1, INT64_MAX, "LONG"),
                "LONG",
            ),
            ConfigDef(
                SEGMENT_BYTES,
                str(GIB),
                "the size at which a partition's log rolls to a new segment (1 KiB to 1 GiB)",
                _at_most(GIB, integer(1024, INT32_MAX, "INT")),
                "INT",
            ),
            ConfigDef(
                "segment.ms",
                "604800000",
                "the age (ms) at which the active segment rolls even if not full",
                integer(1, INT64_MAX, "LONG"),
                "LONG",
            ),
            ConfigDef(
                "index.interval.bytes",
                "4096",
                "bytes of log between two entries of the sparse offset index",
                integer(0, INT32_MAX, "INT"),
                "INT",
            ),
            ConfigDef(
                "flush.messages",
                str(INT64_MAX),
                "fsync once this many records are unflushed; 1 fsyncs each batch before it counts as written",
                integer(1, INT64_MAX, "LONG"),
                "LONG",
            ),
            ConfigDef(
                "flush.ms",
                str(INT64_MAX),
                "fsync once the oldest unflushed write is this old (ms); durability comes from replication",
                integer(0, INT64_MAX, "LONG"),
                "LONG",
            ),
            ConfigDef(
                "message.timestamp.type",
                "CreateTime",
                "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch on append",
                _timestamp_type,
                "STRING",
            ),
            ConfigDef(
                "message.timestamp.before.max.ms",
                str(INT64_MAX),
                "how far (ms) before the broker's clock a CreateTime timestamp may be",
                integer(0, INT64_MAX, "LONG"),
                "LONG",
            ),
            ConfigDef(
                "message.timestamp.after.max.ms",
                "3600000",
                "how far (ms) after the broker's clock a CreateTime timestamp may be",
                integer(0, INT64_MAX, "LONG"),
                "LONG",
            ),
            ConfigDef(
                MIN_INSYNC_REPLICAS,
                "1",
                "with acks=all, the in-sync replicas a write needs; at most the replication factor",
                integer(1, INT32_MAX, "INT"),
                "INT",
            ),
            ConfigDef(
                MAX_MESSAGE_BYTES,
                "1048588",
                "the largest record batch the partition accepts (bytes)",
                integer(0, INT32_MAX, "INT"),
                "INT",
            ),
            ConfigDef(
                UNCLEAN_LEADER_ELECTION_ENABLE,
                "false",
                "with no eligible replica left (ISR and ELR empty), elect another, losing what it lacks",
                _boolean,
                "BOOLEAN",
            ),
            ConfigDef(
                CLEANUP_POLICY,
                DELETE,
                "'delete': old segments go by retention.ms/bytes; 'compact': the log cleaner keeps the "
                "latest record of each key; 'compact,delete': both",
                _cleanup_policy,
                "LIST",
            ),
            ConfigDef(
                "min.cleanable.dirty.ratio",
                "0.5",
                "with compact: the cleaner takes a log once this share of it is not yet cleaned (0 to 1)",
                _ratio,
                "DOUBLE",
            ),
            ConfigDef(
                MIN_COMPACTION_LAG_MS,
                "0",
                "with compact: a record stays uncompacted at least this long (ms) after it is written",
                integer(0, INT64_MAX, "LONG"),
                "LONG",
            ),
            ConfigDef(
                MAX_COMPACTION_LAG_MS,
                str(INT64_MAX),
                "with compact: a record is compacted at most this long (ms) after it is written, "
                "whatever the dirty ratio",
                integer(1, INT64_MAX, "LONG"),
                "LONG",
            ),
            ConfigDef(
                "delete.retention.ms",
                "86400000",
                "with compact: how long (ms) a tombstone (a key with a null value) stays after the "
                "cleaner first passes it, so consumers see the delete",
                integer(0, INT64_MAX, "LONG"),
                "LONG",
            ),
            ConfigDef(
                LEADER_THROTTLED_REPLICAS,
                "",
                "replicas (partition:broker, or '*') whose leader limits what it serves catching-up followers "
                "to the broker's leader.replication.throttled.rate",
                _throttled_replicas,
                "LIST",
            ),
            ConfigDef(
                FOLLOWER_THROTTLED_REPLICAS,
                "",
                "replicas (partition:broker, or '*') that, catching up, fetch no faster than their broker's "
                "follower.replication.throttled.rate",
                _throttled_replicas,
                "LIST",
            ),
        )
    }
)


def validate_config(key: str, value: str) -> str:
    """The normalized value, or INVALID_CONFIG naming the key for an unknown key or a bad value."""
    return validate_entry(TOPIC_CONFIGS, "topic", key, value)


def validate_entry(definitions: Mapping[str, ConfigDef], entity: str, key: str, value: str) -> str:
    """``value`` of ``key`` checked and normalized by its definition in ``definitions``."""
    definition = definitions.get(key)
    if definition is None:
        raise ValidationError(ErrorCode.INVALID_CONFIG, f"unknown {entity} config {key!r}")
    try:
        return definition.parse(value.strip())
    except BadValue as e:
        raise ValidationError(
            ErrorCode.INVALID_CONFIG, f"invalid value {value!r} for config {key}: {e}"
        ) from None


def validate_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Every entry of a CreateTopics config map, normalized; the first bad one raises."""
    return {key: validate_config(key, value) for key, value in sorted(configs.items())}


def check_min_insync_replicas(explicit: Mapping[str, str], replication_factor: int) -> None:
    """``min.insync.replicas`` (set or default) must not exceed the topic's replication factor.

    Run at CreateTopics with the new configs and at AlterConfigs with the configs as they
    would be after the change: a topic whose writes with acks=all could never succeed is
    a mistake to refuse, not a state to store.
    """
    value = int(explicit.get(MIN_INSYNC_REPLICAS, TOPIC_CONFIGS[MIN_INSYNC_REPLICAS].default))
    if value > replication_factor:
        raise ValidationError(
            ErrorCode.INVALID_CONFIG,
            f"{MIN_INSYNC_REPLICAS} {value} is larger than the replication factor {replication_factor}",
        )


def check_compaction_lags(explicit: Mapping[str, str]) -> None:
    """``min.compaction.lag.ms`` must not exceed ``max.compaction.lag.ms`` (Kafka's
    ``LogConfig.validateValues``), checked with the configs as they would be after a
    CreateTopics or AlterConfigs."""
    lag_min, lag_max = (
        int(explicit.get(key, TOPIC_CONFIGS[key].default)) for key in (MIN_COMPACTION_LAG_MS, MAX_COMPACTION_LAG_MS)
    )
    if lag_min > lag_max:
        raise ValidationError(
            ErrorCode.INVALID_CONFIG,
            f"{MIN_COMPACTION_LAG_MS} {lag_min} is larger than {MAX_COMPACTION_LAG_MS} {lag_max}",
        )


def describe_configs(
    explicit: Mapping[str, str], definitions: Mapping[str, ConfigDef] = TOPIC_CONFIGS
) -> list[tuple[str, str, bool]]:
    """Every config of ``definitions`` as (name, value, is_default), sorted by name.

    A key set in the log but unknown to this version is still shown, not hidden.
    """
    return [
        (name, explicit[name], False) if name in explicit else (name, definitions[name].default, True)
        for name in sorted(definitions.keys() | explicit.keys())
    ]
