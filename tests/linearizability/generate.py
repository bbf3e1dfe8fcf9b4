"""Histories that are linearizable by construction, for testing the checker.

Operations run through the model one after another at linearization points 1, 2, 3,
...; each gets a call some time before its point and a return some time after, so
neighbours overlap at random. An ambiguous operation loses its return, and may or may
not have been applied (when not, it gets a call time but no point).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from tests.linearizability.history import Operation
from tests.linearizability.models import Model


def linearizable_history(
    model: Model[Any],
    inputs: Sequence[Hashable],
    rng: random.Random,
    *,
    clients: int = 8,
    overlap: float = 2.0,
    ambiguous_rate: float = 0.0,
) -> list[Operation]:
    """One operation per input, in this linearization order; ``overlap``: how many
    neighbouring points a call or a return may reach over."""
    states: dict[Hashable, Any] = {}
    ops = []
    for point, op_input in enumerate(inputs, start=1):
        key = model.key(op_input)
        call = point - rng.uniform(0, overlap)
        client = point % clients
        if rng.random() < ambiguous_rate:
            if rng.random() < 0.5:  # applied, unbeknownst to the client
                states[key] = model.apply(states.get(key, model.init()), op_input)[1]
            ops.append(Operation(client, op_input, call, math.inf))
            continue
        output, states[key] = model.apply(states.get(key, model.init()), op_input)
        ops.append(Operation(client, op_input, call, point + rng.uniform(0, overlap), output))
    return ops


def mutate(
    ops: list[Operation], rng: random.Random, outputs: Callable[[Hashable], Sequence[Any]]
) -> list[Operation]:
    """Change one completed operation's output to another one its kind can return."""
    completed = [i for i, op in enumerate(ops) if not op.ambiguous]
    if not completed:
        return ops
    i = rng.choice(completed)
    others = [out for out in outputs(ops[i].input) if out != ops[i].output]
    if not others:
        return ops
    op = ops[i]
    return [*ops[:i], Operation(op.client, op.input, op.call, op.ret, rng.choice(others)), *ops[i + 1 :]]
