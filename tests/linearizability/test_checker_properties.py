"""Properties: histories made from a sequential run with random overlaps always pass,
and on small histories (mutated or not) the checker agrees with a brute-force search
over every real-time-respecting order of the whole history (which also checks that
splitting per key loses nothing for these models)."""

from __future__ import annotations

import random
import time
from collections.abc import Hashable, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.linearizability.checker import Verdict, check
from tests.linearizability.generate import linearizable_history, mutate
from tests.linearizability.history import Operation
from tests.linearizability.models import (
    NO_OFFSET,
    OK,
    TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION,
    CommitOffset,
    CreateTopic,
    DeleteTopic,
    FetchOffset,
    Model,
    OffsetModel,
    TopicExists,
    TopicModel,
)

TOPICS = TopicModel()
OFFSETS = OffsetModel()
NAMES = ("a", "b")
OFFSET_VALUES = (1, 2, 3)

topic_inputs = st.builds(
    lambda kind, name: kind(name),
    st.sampled_from([CreateTopic, DeleteTopic, TopicExists]),
    st.sampled_from(NAMES),
)
offset_inputs = st.one_of(
    st.builds(
        lambda p, o: CommitOffset("g", "t", p, o), st.sampled_from([0, 1]), st.sampled_from(OFFSET_VALUES)
    ),
    st.builds(lambda p: FetchOffset("g", "t", p), st.sampled_from([0, 1])),
)


def topic_outputs(op_input: Hashable) -> Sequence[Any]:
    if isinstance(op_input, TopicExists):
        return (True, False)
    return (OK, TOPIC_ALREADY_EXISTS, UNKNOWN_TOPIC_OR_PARTITION)


def offset_outputs(op_input: Hashable) -> Sequence[Any]:
    return (NO_OFFSET, *OFFSET_VALUES) if isinstance(op_input, FetchOffset) else (OK, "REQUEST_TIMED_OUT")


def brute_force(model: Model[Any], ops: Sequence[Operation]) -> bool:
    """Try every order that respects real time, over the whole history (no keys); an
    ambiguous operation may be placed anywhere after its call, or left out."""

    def search(remaining: frozenset[int], states: dict[Hashable, Any]) -> bool:
        if all(ops[i].ambiguous for i in remaining):
            return True
        for i in remaining:
            op = ops[i]
            if any(ops[j].ret < op.call for j in remaining if j != i):
                continue  # something still unplaced had returned before this was called
            key = model.key(op.input)
            expected, after = model.apply(states.get(key, model.init()), op.input)
            if (op.ambiguous or op.output == expected) and search(remaining - {i}, {**states, key: after}):
                return True
        return False

    return search(frozenset(range(len(ops))), {})


@settings(max_examples=300, deadline=None)
@given(
    st.lists(topic_inputs, max_size=40),
    st.randoms(use_true_random=False),
    st.floats(0, 4),
    st.sampled_from([0.0, 0.2]),
)
def test_generated_topic_histories_are_linearizable(inputs, rng, overlap, ambiguous_rate) -> None:
    ops = linearizable_history(TOPICS, inputs, rng, overlap=overlap, ambiguous_rate=ambiguous_rate)
    assert check(TOPICS, ops).verdict is Verdict.LINEARIZABLE


@settings(max_examples=300, deadline=None)
@given(
    st.lists(offset_inputs, max_size=40),
    st.randoms(use_true_random=False),
    st.floats(0, 4),
    st.sampled_from([0.0, 0.2]),
)
def test_generated_offset_histories_are_linearizable(inputs, rng, overlap, ambiguous_rate) -> None:
    ops = linearizable_history(OFFSETS, inputs, rng, overlap=overlap, ambiguous_rate=ambiguous_rate)
    assert check(OFFSETS, ops).verdict is Verdict.LINEARIZABLE


@settings(max_examples=400, deadline=None)
@given(
    st.lists(topic_inputs, max_size=7),
    st.randoms(use_true_random=False),
    st.floats(0, 3),
    st.integers(0, 2),
)
def test_topic_checker_agrees_with_brute_force(inputs, rng, overlap, mutations) -> None:
    ops = linearizable_history(TOPICS, inputs, rng, overlap=overlap, ambiguous_rate=0.2)
    for _ in range(mutations):
        ops = mutate(ops, rng, topic_outputs)
    expected = Verdict.LINEARIZABLE if brute_force(TOPICS, ops) else Verdict.NOT_LINEARIZABLE
    assert check(TOPICS, ops).verdict is expected


@settings(max_examples=400, deadline=None)
@given(
    st.lists(offset_inputs, max_size=7),
    st.randoms(use_true_random=False),
    st.floats(0, 3),
    st.integers(0, 2),
)
def test_offset_checker_agrees_with_brute_force(inputs, rng, overlap, mutations) -> None:
    ops = linearizable_history(OFFSETS, inputs, rng, overlap=overlap, ambiguous_rate=0.2)
    for _ in range(mutations):
        ops = mutate(ops, rng, offset_outputs)
    expected = Verdict.LINEARIZABLE if brute_force(OFFSETS, ops) else Verdict.NOT_LINEARIZABLE
    assert check(OFFSETS, ops).verdict is expected


def test_mutations_do_produce_violations() -> None:
    """The agreement tests mean something only if mutated histories often fail."""
    rng = random.Random(7)
    failing = 0
    for _ in range(200):
        inputs = [CreateTopic("a") if rng.random() < 0.5 else TopicExists("a") for _ in range(6)]
        ops = mutate(linearizable_history(TOPICS, inputs, rng, overlap=0.5), rng, topic_outputs)
        failing += not brute_force(TOPICS, ops)
    assert failing > 100


def test_a_long_history_of_eight_clients_checks_quickly() -> None:
    """The size the fault tests produce: thousands of ops over a few keys, with
    ambiguous ones; the search must finish well inside its bound."""
    rng = random.Random(1)
    inputs = [rng.choice([CreateTopic, DeleteTopic, TopicExists])(rng.choice("abcd")) for _ in range(4000)]
    ops = linearizable_history(TOPICS, inputs, rng, clients=8, overlap=8, ambiguous_rate=0.01)
    start = time.monotonic()
    result = check(TOPICS, ops)
    assert result.verdict is Verdict.LINEARIZABLE, result.summary()
    assert time.monotonic() - start < 20
