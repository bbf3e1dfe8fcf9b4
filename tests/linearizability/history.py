"""Operations as a client saw them: when it called, when (and what) it got back.

An operation without a return (``ret`` is +inf) is *ambiguous*: it timed out, or the
server lost leadership after it was sent, so it may or may not have taken effect, at
any time after its call. The checker lets it take effect anywhere after its call, or
not at all, with any output.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Operation:
    client: int
    input: Hashable
    call: float  # monotonic seconds
    ret: float = math.inf  # +inf: ambiguous
    output: Any = None  # ignored when ambiguous

    def __post_init__(self) -> None:
        if not self.call <= self.ret:
            raise ValueError(f"operation returns ({self.ret}) before its call ({self.call})")

    @property
    def ambiguous(self) -> bool:
        return self.ret == math.inf


class HistoryRecorder:
    """Collects operations from concurrent asyncio clients (one thread: no lock needed).

    ``invoke`` just before a request is sent; then exactly one of ``complete`` (a
    definite answer), ``ambiguous`` (it may have taken effect) or ``discard`` (it
    certainly did not: rejected before it reached the controller). Operations still
    pending when the history is read count as ambiguous.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._pending: dict[int, tuple[int, Hashable, float]] = {}
        self._done: list[Operation] = []
        self._next = 0

    def invoke(self, client: int, op_input: Hashable) -> int:
        token = self._next
        self._next += 1
        self._pending[token] = (client, op_input, self._clock())
        return token

    def complete(self, token: int, output: Any) -> None:
        client, op_input, call = self._pending.pop(token)
        self._done.append(Operation(client, op_input, call, self._clock(), output))

    def ambiguous(self, token: int) -> None:
        client, op_input, call = self._pending.pop(token)
        self._done.append(Operation(client, op_input, call))

    def discard(self, token: int) -> None:
        del self._pending[token]

    def operations(self) -> list[Operation]:
        pending = [Operation(client, op_input, call) for client, op_input, call in self._pending.values()]
        return [*self._done, *pending]
