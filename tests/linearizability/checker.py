"""Wing & Gong's linearizability search with Lowe's memoization, per key.

For one key, the operations' calls and returns go into one list ordered by time (a
call before a return at the same instant, so touching operations count as
concurrent). The search walks it: a call may be linearized next if the model accepts
it in the current state; it is then lifted out of the list and the walk restarts. A
return reached before its call was linearized means the order so far cannot be
extended, so the last choice is undone. The set of linearized operations plus the
model state is remembered, so a configuration is never explored twice (Lowe; the same
as Porcupine). A bound on steps turns a search that would take too long into the
answer UNKNOWN instead of a hang.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tests.linearizability.history import Operation
from tests.linearizability.models import Model

DEFAULT_MAX_STEPS = 2_000_000  # per key; about a few seconds of search
_EXPLAIN_OPS_MAX = 6


class Verdict(enum.Enum):
    LINEARIZABLE = "linearizable"
    NOT_LINEARIZABLE = "not linearizable"
    UNKNOWN = "unknown"  # the search hit its step bound


@dataclass(frozen=True, slots=True)
class KeyResult:
    key: Hashable
    verdict: Verdict
    operations: int
    steps: int
    explanation: str = ""


@dataclass(frozen=True, slots=True)
class CheckResult:
    verdict: Verdict
    keys: tuple[KeyResult, ...]

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.LINEARIZABLE

    def summary(self) -> str:
        """One line per key that is not linearizable or unknown (empty when all are)."""
        bad = [k for k in self.keys if k.verdict is not Verdict.LINEARIZABLE]
        head = f"{self.verdict.value}: {len(self.keys)} keys, {sum(k.operations for k in self.keys)} ops"
        return "\n".join([head, *(f"  {k.key!r}: {k.verdict.value}; {k.explanation}" for k in bad)])


def check(
    model: Model[Any], operations: Iterable[Operation], max_steps: int = DEFAULT_MAX_STEPS
) -> CheckResult:
    """Check every key's sub-history; the whole is linearizable iff each key's is."""
    by_key: dict[Hashable, list[Operation]] = defaultdict(list)
    for op in operations:
        by_key[model.key(op.input)].append(op)
    results = tuple(_check_key(model, key, ops, max_steps) for key, ops in by_key.items())
    verdicts = {r.verdict for r in results}
    if Verdict.NOT_LINEARIZABLE in verdicts:
        verdict = Verdict.NOT_LINEARIZABLE
    elif Verdict.UNKNOWN in verdicts:
        verdict = Verdict.UNKNOWN
    else:
        verdict = Verdict.LINEARIZABLE
    return CheckResult(verdict, results)


class _Entries:
    """The time-ordered calls and returns as a doubly linked list with O(1) lift/unlift.

    Operation i has call node 2i and return node 2i+1; ``head`` is a sentinel; -1 ends
    the list. Lifting removes a call and its return; unlifting puts them back, which is
    exact as long as lifts are undone in reverse order (dancing links).
    """

    def __init__(self, ops: Sequence[Operation]) -> None:
        events = sorted(
            [(op.call, 0, 2 * i) for i, op in enumerate(ops)]
            + [(op.ret, 1, 2 * i + 1) for i, op in enumerate(ops)]
        )
        self.head = 2 * len(ops)
        order = [self.head] + [node for _, _, node in events]
        self.next = [-1] * (self.head + 1)
        self.prev = [-1] * (self.head + 1)
        for a, b in zip(order, order[1:], strict=False):
            self.next[a] = b
            self.prev[b] = a

    def _remove(self, node: int) -> None:
        self.next[self.prev[node]] = self.next[node]
        if self.next[node] != -1:
            self.prev[self.next[node]] = self.prev[node]

    def _restore(self, node: int) -> None:
        self.next[self.prev[node]] = node
        if self.next[node] != -1:
            self.prev[self.next[node]] = node

    def lift(self, call: int) -> None:
        self._remove(call)
        self._remove(call + 1)

    def unlift(self, call: int) -> None:
        self._restore(call + 1)
        self._restore(call)


def _check_key(model: Model[Any], key: Hashable, ops: Sequence[Operation], max_steps: int) -> KeyResult:
    entries = _Entries(ops)
    twins = _earlier_twins(ops)
    state = model.init()
    linearized = 0  # bit i: operation i is linearized
    definite_left = sum(not op.ambiguous for op in ops)
    stack: list[tuple[int, Any]] = []  # (call node, state before it)
    seen: set[tuple[int, Any]] = set()
    deepest: tuple[int, list[int]] = (-1, [])  # (linearized count, candidates there): for the explanation
    entry = entries.next[entries.head]
    steps = 0
    while definite_left:  # ambiguous operations left over simply never took effect
        steps += 1
        if steps > max_steps:
            return KeyResult(key, Verdict.UNKNOWN, len(ops), steps, f"gave up after {max_steps} steps")
        if entry % 2 == 0:  # a call
            i = entry // 2
            after = _try(model, ops[i], state, twins[i] < 0 or bool(linearized >> twins[i] & 1))
            marked = linearized | (1 << i)
            if after is not _ILLEGAL and (marked, after) not in seen:
                seen.add((marked, after))
                stack.append((entry, state))
                state, linearized = after, marked
                definite_left -= not ops[i].ambiguous
                entries.lift(entry)
                entry = entries.next[entries.head]
            else:
                entry = entries.next[entry]
        else:  # the return of an operation nothing could linearize before: backtrack
            if len(stack) > deepest[0]:
                deepest = (len(stack), _candidates(entries))
            if not stack:
                return KeyResult(key, Verdict.NOT_LINEARIZABLE, len(ops), steps, _explain(ops, deepest))
            call, state = stack.pop()
            linearized &= ~(1 << (call // 2))
            definite_left += not ops[call // 2].ambiguous
            entries.unlift(call)
            entry = entries.next[call]
    return KeyResult(key, Verdict.LINEARIZABLE, len(ops), steps)


_ILLEGAL = object()


def _try(model: Model[Any], op: Operation, state: Any, twin_done: bool) -> Any:
    """The state after linearizing ``op`` next, or _ILLEGAL.

    Two prunings keep ambiguous operations from multiplying the search, and lose no
    linearization: one that would not change the state is never placed (leaving it out
    is equivalent), and of ambiguous operations with equal inputs, a later-called one
    is placed only after every earlier-called one (any placement can be relabelled so).
    """
    if op.ambiguous and not twin_done:
        return _ILLEGAL
    expected, after = model.apply(state, op.input)
    if op.ambiguous:
        return _ILLEGAL if after == state else after
    return after if op.output == expected else _ILLEGAL


def _earlier_twins(ops: Sequence[Operation]) -> list[int]:
    """For each ambiguous op, the latest-called earlier ambiguous op with an equal input; else -1."""
    last: dict[Hashable, int] = {}
    twins = [-1] * len(ops)
    for i in sorted((i for i, op in enumerate(ops) if op.ambiguous), key=lambda i: ops[i].call):
        twins[i] = last.get(ops[i].input, -1)
        last[ops[i].input] = i
    return twins


def _candidates(entries: _Entries) -> list[int]:
    """The operations that could be linearized next: calls before the first return."""
    found = []
    node = entries.next[entries.head]
    while node != -1 and node % 2 == 0:
        found.append(node // 2)
        node = entries.next[node]
    if node != -1:
        found.append(node // 2)  # the operation whose return stopped the search
    return found


def _explain(ops: Sequence[Operation], deepest: tuple[int, list[int]]) -> str:
    done, candidates = deepest
    shown = ", ".join(_describe(ops[i]) for i in candidates[:_EXPLAIN_OPS_MAX])
    more = f" and {len(candidates) - _EXPLAIN_OPS_MAX} more" if len(candidates) > _EXPLAIN_OPS_MAX else ""
    return f"at most {done} of {len(ops)} ops linearize; then none of these can go next: {shown}{more}"


def _describe(op: Operation) -> str:
    result = "?" if op.ambiguous else repr(op.output)
    ret = "inf" if op.ambiguous else f"{op.ret:.6f}"
    return f"client {op.client} {op.input!r} -> {result} [{op.call:.6f}, {ret}]"
