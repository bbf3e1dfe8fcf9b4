"""Hand-made histories: what the checker must accept, and the classic anomalies it must
catch (a stale read, a lost acknowledged write, a create applied twice), with ambiguous
operations counted both as applied and as not."""

from __future__ import annotations

import math

import pytest

from tests.linearizability.checker import Verdict, check
from tests.linearizability.history import HistoryRecorder, Operation
from tests.linearizability.models import (
    OK,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    CommitOffset,
    CreateTopic,
    DeleteTopic,
    FetchOffset,
    OffsetModel,
    TopicExists,
    TopicModel,
)

INF = math.inf
TOPICS = TopicModel()
OFFSETS = OffsetModel()


def op(client: int, op_input: object, call: float, ret: float = INF, output: object = None) -> Operation:
    return Operation(client, op_input, call, ret, output)


def create(client: int, call: float, ret: float = INF, output: object = None, name: str = "t") -> Operation:
    return op(client, CreateTopic(name), call, ret, output)


def delete(client: int, call: float, ret: float = INF, output: object = None, name: str = "t") -> Operation:
    return op(client, DeleteTopic(name), call, ret, output)


def exists(client: int, call: float, ret: float, present: bool, name: str = "t") -> Operation:
    return op(client, TopicExists(name), call, ret, present)


def commit(client: int, offset: int, call: float, ret: float = INF, output: object = OK) -> Operation:
    return op(client, CommitOffset("g", "t", 0, offset), call, ret, output if ret != INF else None)


def fetch(client: int, call: float, ret: float, offset: int) -> Operation:
    return op(client, FetchOffset("g", "t", 0), call, ret, offset)


def verdict_topics(*ops: Operation) -> Verdict:
    return check(TOPICS, ops).verdict


def verdict_offsets(*ops: Operation) -> Verdict:
    return check(OFFSETS, ops).verdict


LINEARIZABLE = Verdict.LINEARIZABLE
NOT = Verdict.NOT_LINEARIZABLE


# topics ------------------------------------------------------------------------------


def test_a_sequential_topic_lifecycle_is_linearizable() -> None:
    assert (
        verdict_topics(
            exists(1, 0, 1, False),
            create(1, 2, 3, OK),
            exists(2, 4, 5, True),
            create(2, 6, 7, TOPIC_ALREADY_EXISTS),
            delete(1, 8, 9, OK),
            delete(2, 10, 11, UNKNOWN_TOPIC_OR_PARTITION),
            exists(1, 12, 13, False),
        )
        is LINEARIZABLE
    )


def test_concurrent_creates_one_wins_whichever_started_first() -> None:
    assert verdict_topics(create(1, 0, 10, TOPIC_ALREADY_EXISTS), create(2, 1, 2, OK)) is LINEARIZABLE


def test_a_create_applied_twice_is_caught() -> None:
    assert verdict_topics(create(1, 0, 1, OK), create(2, 2, 3, OK)) is NOT
    assert verdict_topics(create(1, 0, 5, OK), create(2, 1, 4, OK)) is NOT, (
        "concurrent, still only one may win"
    )


def test_a_stale_read_after_a_completed_create_is_caught() -> None:
    assert verdict_topics(create(1, 0, 1, OK), exists(2, 2, 3, False)) is NOT


def test_reads_during_a_create_may_see_either_but_never_go_back() -> None:
    assert verdict_topics(create(1, 0, 10, OK), exists(2, 1, 2, False), exists(2, 3, 4, True)) is LINEARIZABLE
    assert verdict_topics(create(1, 0, 10, OK), exists(2, 1, 2, True), exists(3, 3, 4, False)) is NOT


def test_touching_operations_count_as_concurrent() -> None:
    assert verdict_topics(exists(1, 0, 1, True), create(2, 1, 2, OK)) is LINEARIZABLE


def test_an_ambiguous_create_may_have_happened() -> None:
    assert verdict_topics(create(1, 0), exists(2, 5, 6, True), delete(2, 7, 8, OK)) is LINEARIZABLE


def test_an_ambiguous_create_may_not_have_happened() -> None:
    assert verdict_topics(create(1, 0), exists(2, 5, 6, False), create(2, 7, 8, OK)) is LINEARIZABLE


def test_an_ambiguous_create_happens_at_most_once() -> None:
    history = (create(1, 0), exists(2, 1, 2, True), exists(2, 3, 4, False), exists(2, 5, 6, True))
    assert verdict_topics(*history) is NOT


def test_an_ambiguous_operation_cannot_take_effect_before_its_call() -> None:
    assert verdict_topics(exists(2, 0, 1, True), create(1, 2)) is NOT


def test_a_failed_create_must_see_the_topic() -> None:
    assert verdict_topics(create(1, 0, 1, TOPIC_ALREADY_EXISTS)) is NOT
    assert verdict_topics(delete(1, 0, 1, OK)) is NOT


# offsets ------------------------------------------------------------------------------


def test_a_lost_acknowledged_commit_is_caught() -> None:
    assert verdict_offsets(commit(1, 5, 0, 1), fetch(2, 2, 3, -1)) is NOT
    assert verdict_offsets(commit(1, 5, 0, 1), commit(1, 7, 2, 3), fetch(2, 4, 5, 5)) is NOT


def test_overlapping_commits_may_land_in_either_order() -> None:
    history = (commit(1, 5, 0, 10), commit(2, 7, 1, 9), fetch(3, 11, 12, 5))
    assert verdict_offsets(*history) is LINEARIZABLE
    assert verdict_offsets(*history[:2], fetch(3, 11, 12, 7)) is LINEARIZABLE
    assert verdict_offsets(*history[:2], fetch(3, 11, 12, -1)) is NOT


def test_an_ambiguous_commit_is_seen_or_not_but_not_undone() -> None:
    assert verdict_offsets(commit(1, 5, 0), fetch(2, 1, 2, 5)) is LINEARIZABLE
    assert verdict_offsets(commit(1, 5, 0), fetch(2, 1, 2, -1)) is LINEARIZABLE
    assert verdict_offsets(commit(1, 5, 0), fetch(2, 1, 2, 5), fetch(2, 3, 4, -1)) is NOT


def test_a_value_nobody_wrote_is_caught() -> None:
    assert verdict_offsets(commit(1, 5, 0, 1), fetch(2, 2, 3, 6)) is NOT


# per key, results and bounds -------------------------------------------------------------


def test_keys_are_checked_apart_and_the_bad_one_is_named() -> None:
    result = check(
        TOPICS,
        [
            create(1, 0, 1, OK, name="a"),
            exists(2, 0.5, 0.7, False, name="b"),
            create(3, 2, 3, OK, name="b"),
            exists(2, 4, 5, False, name="a"),
        ],
    )
    assert result.verdict is NOT
    assert {k.key: k.verdict for k in result.keys} == {"a": NOT, "b": LINEARIZABLE}
    summary = result.summary()
    assert "'a': not linearizable" in summary and "TopicExists(name='a')" in summary


def test_a_search_over_its_bound_is_unknown_not_a_hang() -> None:
    # 12 overlapping commits and a fetch of a value nobody wrote: a full search is large.
    history = [commit(c, c, 0, 100) for c in range(12)] + [fetch(99, 101, 102, 1000)]
    result = check(OFFSETS, history, max_steps=50)
    assert result.verdict is Verdict.UNKNOWN
    assert "gave up after 50 steps" in result.summary()


def test_an_empty_history_is_linearizable() -> None:
    assert check(TOPICS, []).ok


def test_an_operation_cannot_return_before_its_call() -> None:
    with pytest.raises(ValueError, match="before its call"):
        Operation(1, CreateTopic("t"), 2.0, 1.0, OK)


def test_the_recorder_keeps_times_outputs_and_ambiguity() -> None:
    now = iter(float(t) for t in range(100))
    recorder = HistoryRecorder(clock=lambda: next(now))
    a = recorder.invoke(1, CreateTopic("t"))
    b = recorder.invoke(2, TopicExists("t"))
    c = recorder.invoke(3, DeleteTopic("t"))
    d = recorder.invoke(4, DeleteTopic("t"))
    recorder.invoke(5, DeleteTopic("t"))  # never answered
    recorder.complete(b, False)
    recorder.ambiguous(a)
    recorder.discard(c)
    recorder.complete(d, UNKNOWN_TOPIC_OR_PARTITION)
    assert recorder.operations() == [
        Operation(2, TopicExists("t"), 1.0, 5.0, False),
        Operation(1, CreateTopic("t"), 0.0),
        Operation(4, DeleteTopic("t"), 3.0, 6.0, UNKNOWN_TOPIC_OR_PARTITION),
        Operation(5, DeleteTopic("t"), 4.0),  # still pending: ambiguous
    ]
