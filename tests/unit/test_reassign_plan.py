"""Reassignment plans: kafka-reassign-partitions' JSON shapes read and written (bad files
refused naming the field), proposals that keep each topic's replication factor over the
brokers given, and a drain that moves a broker's replicas, only those, spread evenly."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.metadata import reassign_plan
from raftka.metadata.image import BrokerRegistration
from raftka.metadata.placement import PlacementError, replace_broker
from raftka.metadata.reassign_plan import PlanError


def brokers(*ids: int, rack: str = "") -> list[BrokerRegistration]:
    return [BrokerRegistration(b, "", 0, (), rack, False) for b in ids]


def test_a_plan_reads_back_what_it_writes_in_kafkas_shape() -> None:
    plan = {("foo", 1): (3, 1), ("foo", 0): (1, 2)}
    text = reassign_plan.to_json(plan)
    assert json.loads(text) == {
        "version": 1,
        "partitions": [
            {"topic": "foo", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]},
            {"topic": "foo", "partition": 1, "replicas": [3, 1], "log_dirs": ["any", "any"]},
        ],
    }
    assert reassign_plan.parse_reassignment(text) == plan
    assert reassign_plan.parse_topics_to_move('{"topics": [{"topic": "foo"}], "version": 1}') == ["foo"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("nope", "not JSON"),
        ('{"version": 2, "partitions": []}', "version: only 1"),
        ('{"partitions": []}', "partitions: a non-empty list"),
        ('{"partitions": [{"partition": 0, "replicas": [1]}]}', "partitions[0].topic"),
        ('{"partitions": [{"topic": "a", "partition": -1, "replicas": [1]}]}', "partitions[0].partition"),
        ('{"partitions": [{"topic": "a", "partition": 0, "replicas": ["x"]}]}', "partitions[0].replicas"),
        ('{"partitions": [{"topic": "a", "partition": 0, "replicas": []}]}', "partitions[0].replicas"),
        ('{"partitions": [{"topic": "a", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]}', "log_dirs"),
        (
            '{"partitions": [{"topic": "a", "partition": 0, "replicas": [1]},'
            ' {"topic": "a", "partition": 0, "replicas": [2]}]}',
            "partitions[1]: partition a-0 appears more than once",
        ),
    ],
)
def test_a_bad_plan_file_is_refused_naming_the_field(text: str, words: str) -> None:
    with pytest.raises(PlanError, match=words.replace("[", r"\[").replace("]", r"\]")):
        reassign_plan.parse_reassignment(text)


def test_a_cancel_file_may_leave_the_replicas_out() -> None:
    plan = reassign_plan.parse_reassignment(
        '{"partitions": [{"topic": "a", "partition": 0}]}', need_replicas=False
    )
    assert plan == {("a", 0): ()}


def test_a_proposal_spreads_each_topic_over_the_brokers_keeping_its_replication_factor() -> None:
    current = {("foo", p): (1, 2) for p in range(6)} | {("bar", 0): (1,)}
    proposed = reassign_plan.propose(current, {4: "", 5: "", 6: ""})
    assert set(proposed) == set(current)
    assert all(len(proposed[k]) == len(current[k]) and set(proposed[k]) <= {4, 5, 6} for k in current)
    assert set(Counter(b for p in range(6) for b in proposed[("foo", p)]).values()) == {4}


@settings(max_examples=100, deadline=None)
@given(
    count=st.integers(4, 7),
    rf=st.integers(1, 3),
    partitions=st.integers(1, 30),
    leaving_index=st.integers(0, 6),
)
def test_a_drain_moves_only_the_leaving_brokers_replicas_and_keeps_the_replication_factor(
    count: int, rf: int, partitions: int, leaving_index: int
) -> None:
    ids = list(range(1, count + 1))
    leaving = ids[leaving_index % count]
    current = {("t", p): tuple(ids[(p + i) % count] for i in range(rf)) for p in range(partitions)}
    before = Counter(b for r in current.values() for b in r)
    spread_before = max(before[b] for b in ids if b != leaving) - min(before[b] for b in ids if b != leaving)
    moved = replace_broker(brokers(*ids), current, leaving)
    assert set(moved) == {k for k, r in current.items() if leaving in r}
    for key, replicas in moved.items():
        before = current[key]
        assert len(replicas) == len(before) == len(set(replicas)) and leaving not in replicas
        assert [a for a, b in zip(before, replicas, strict=True) if a != b] == [leaving]  # in place
    after = {**current, **moved}
    load = Counter(b for r in after.values() for b in r)
    spread = max(load[b] for b in ids if b != leaving) - min(load[b] for b in ids if b != leaving)
    assert spread <= max(spread_before, 1) + 1  # the layout drained may be uneven already


def test_a_drain_with_no_broker_left_to_take_a_replica_is_refused() -> None:
    with pytest.raises(PlacementError, match="no broker outside"):
        replace_broker(brokers(1, 2), {("t", 0): (1, 2)}, 2)
