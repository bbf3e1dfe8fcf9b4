"""Topic configs: every key's good values (normalized) and bad ones (refused, key named)."""

from __future__ import annotations

import pytest

from raftka.metadata.broker_configs import BROKER_CONFIGS, validate_broker_config
from raftka.metadata.topic_configs import (
    TOPIC_CONFIGS,
    check_compaction_lags,
    check_min_insync_replicas,
    describe_configs,
    throttled_partitions,
    validate_config,
    validate_configs,
)
from raftka.metadata.validation import ValidationError
from raftka.v1 import controller_pb2

INT64_MAX = str(2**63 - 1)

DEFAULTS = {
    "cleanup.policy": "delete",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "9223372036854775807",
    "delete.retention.ms": "86400000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "index.interval.bytes": "4096",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.type": "CreateTime",
    "segment.ms": "604800000",
    "max.message.bytes": "1048588",
    "min.insync.replicas": "1",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "unclean.leader.election.enable": "false",
    "leader.replication.throttled.replicas": "",
    "follower.replication.throttled.replicas": "",
}


def test_the_schema_and_kafkas_defaults() -> None:
    assert {name: d.default for name, d in TOPIC_CONFIGS.items()} == DEFAULTS
    for name, definition in TOPIC_CONFIGS.items():
        assert definition.name == name and definition.doc
        assert validate_config(name, definition.default) == definition.default


@pytest.mark.parametrize(
    ("key", "value", "normalized"),
    [
        ("retention.ms", "-1", "-1"),
        ("retention.ms", "0", "0"),
        ("retention.ms", " 86400000 ", "86400000"),
        ("retention.ms", "+0100", "100"),
        ("retention.ms", INT64_MAX, INT64_MAX),
        ("retention.ms", "0" * 5000 + "7", "7"),
        ("retention.bytes", "-1", "-1"),
        ("retention.bytes", "0", "0"),
        ("retention.bytes", "1073741824000", "1073741824000"),
        ("segment.bytes", "1024", "1024"),
        ("segment.bytes", "1073741824", "1073741824"),
        ("segment.bytes", "\t1048576\n", "1048576"),
        ("min.insync.replicas", "1", "1"),
        ("min.insync.replicas", "2", "2"),
        ("max.message.bytes", "0", "0"),
        ("max.message.bytes", "2147483647", "2147483647"),
        ("cleanup.policy", "delete", "delete"),
        ("cleanup.policy", " delete ", "delete"),
        ("cleanup.policy", "delete,delete", "delete"),
        ("cleanup.policy", "compact", "compact"),
        ("cleanup.policy", "compact,delete", "compact,delete"),
        ("cleanup.policy", " delete , compact ", "compact,delete"),
        ("min.cleanable.dirty.ratio", "0", "0.0"),
        ("min.cleanable.dirty.ratio", ".25", "0.25"),
        ("min.cleanable.dirty.ratio", "1", "1.0"),
        ("min.compaction.lag.ms", "0", "0"),
        ("max.compaction.lag.ms", "1", "1"),
        ("delete.retention.ms", "0", "0"),
        ("leader.replication.throttled.replicas", "*", "*"),
        ("leader.replication.throttled.replicas", " * ", "*"),
        ("leader.replication.throttled.replicas", "", ""),
        ("leader.replication.throttled.replicas", "0:1, 1:2 ,007:3", "0:1,1:2,7:3"),
        ("follower.replication.throttled.replicas", "3:4", "3:4"),
    ],
)
def test_good_values_are_normalized(key: str, value: str, normalized: str) -> None:
    assert validate_config(key, value) == normalized


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("retention.ms", "", "not a number of type LONG"),
        ("retention.ms", "12abc", "not a number of type LONG"),
        ("retention.ms", "1.5", "not a number"),
        ("retention.ms", "1_000", "not a number"),
        ("retention.ms", "١٢", "not a number"),
        ("retention.ms", "-2", "at least -1"),
        ("retention.ms", str(2**63), "out of range for type LONG"),
        ("retention.ms", "9" * 5000, "out of range for type LONG"),
        ("retention.bytes", "-5", "at least -1"),
        ("retention.bytes", "lots", "not a number"),
        ("retention.bytes", str(-(2**63) - 1), "out of range"),
        ("segment.bytes", "1023", "at least 1024"),
        ("segment.bytes", "1073741825", "at most 1073741824"),
        ("segment.bytes", str(2**31), "out of range for type INT"),
        ("segment.bytes", "1e6", "not a number of type INT"),
        ("min.insync.replicas", "0", "at least 1"),
        ("min.insync.replicas", "-1", "at least 1"),
        ("min.insync.replicas", "two", "not a number"),
        ("max.message.bytes", "-1", "at least 0"),
        ("max.message.bytes", str(2**31), "out of range for type INT"),
        ("cleanup.policy", "", "'' is not a policy"),
        ("cleanup.policy", "compact,", "'' is not a policy"),
        ("cleanup.policy", "DELETE", "'DELETE' is not a policy"),
        ("cleanup.policy", "compact,shred", "'shred' is not a policy"),
        ("min.cleanable.dirty.ratio", "1.01", "between 0 and 1"),
        ("min.cleanable.dirty.ratio", "-0.1", "between 0 and 1"),
        ("min.cleanable.dirty.ratio", "nan", "between 0 and 1"),
        ("min.cleanable.dirty.ratio", "half", "not a number of type DOUBLE"),
        ("min.compaction.lag.ms", "-1", "at least 0"),
        ("max.compaction.lag.ms", "0", "at least 1"),
        ("delete.retention.ms", "-1", "at least 0"),
        ("leader.replication.throttled.replicas", "0:1,*", "entry '*' is not partition:broker"),
        ("leader.replication.throttled.replicas", "0-1", "entry '0-1' is not partition:broker"),
        ("follower.replication.throttled.replicas", "0:1,,1:2", "entry '' is not partition:broker"),
        ("follower.replication.throttled.replicas", "-1:2", "entry '-1:2' is not partition:broker"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str, says: str) -> None:
    with pytest.raises(ValidationError) as error:
        validate_config(key, value)
    assert error.value.code == controller_pb2.INVALID_CONFIG
    assert key in error.value.message and repr(value) in error.value.message
    assert says in error.value.message


@pytest.mark.parametrize("key", ["retention", "Retention.ms", "compression.type", ""])
def test_unknown_keys(key: str) -> None:
    with pytest.raises(ValidationError) as error:
        validate_config(key, "1")
    assert error.value.code == controller_pb2.INVALID_CONFIG
    assert f"unknown topic config {key!r}" in error.value.message


def test_validate_configs_normalizes_every_entry() -> None:
    assert validate_configs({"retention.ms": " 100", "cleanup.policy": "delete"}) == {
        "cleanup.policy": "delete",
        "retention.ms": "100",
    }
    assert validate_configs({}) == {}
    with pytest.raises(ValidationError, match="segment.bytes"):
        validate_configs({"retention.ms": "100", "segment.bytes": "1"})


@pytest.mark.parametrize(
    ("explicit", "rf"), [({}, 1), ({"min.insync.replicas": "2"}, 2), ({"min.insync.replicas": "2"}, 3)]
)
def test_min_insync_replicas_within_replication_factor(explicit: dict[str, str], rf: int) -> None:
    check_min_insync_replicas(explicit, rf)


def test_min_insync_replicas_above_replication_factor() -> None:
    with pytest.raises(ValidationError) as error:
        check_min_insync_replicas({"min.insync.replicas": "3"}, 2)
    assert error.value.code == controller_pb2.INVALID_CONFIG
    assert error.value.message == "min.insync.replicas 3 is larger than the replication factor 2"


def test_describe_marks_defaults() -> None:
    described = describe_configs({"retention.ms": "100"})
    assert [name for name, _, _ in described] == sorted(DEFAULTS)
    by_name = {name: (value, is_default) for name, value, is_default in described}
    assert by_name["retention.ms"] == ("100", False)
    assert by_name["segment.bytes"] == ("1073741824", True)
    assert all(is_default for name, (_, is_default) in by_name.items() if name != "retention.ms")


def test_describe_shows_keys_this_version_does_not_know() -> None:
    described = describe_configs({"future.key": "x"})
    assert ("future.key", "x", False) in described
    assert len(described) == len(DEFAULTS) + 1


def test_throttled_partitions_are_the_entries_naming_the_broker() -> None:
    assert throttled_partitions("0:1,1:2,2:1", 1) == {0, 2}
    assert throttled_partitions("0:1,1:2", 3) == frozenset()
    assert throttled_partitions("", 1) == frozenset()
    assert throttled_partitions("*", 1) is None  # every partition


@pytest.mark.parametrize("key", ["leader.replication.throttled.rate", "follower.replication.throttled.rate"])
def test_broker_rates_are_non_negative_longs_and_unknown_broker_keys_are_named(key: str) -> None:
    assert BROKER_CONFIGS[key].default == INT64_MAX
    assert validate_broker_config(key, " 1048576 ") == "1048576"
    with pytest.raises(ValidationError, match=f"invalid value '-1' for config {key}: must be at least 0"):
        validate_broker_config(key, "-1")
    with pytest.raises(ValidationError, match="unknown broker config 'retention.ms'"):
        validate_broker_config("retention.ms", "1")


def test_min_compaction_lag_may_not_exceed_max() -> None:
    check_compaction_lags({})
    check_compaction_lags({"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "5"})
    with pytest.raises(ValidationError) as error:
        check_compaction_lags({"min.compaction.lag.ms": "6", "max.compaction.lag.ms": "5"})
    assert error.value.code == controller_pb2.INVALID_CONFIG
    assert error.value.message == "min.compaction.lag.ms 6 is larger than max.compaction.lag.ms 5"
