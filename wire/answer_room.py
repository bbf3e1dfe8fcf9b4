"""How many bytes a request's answer may take, so that one connection's answers, and all
the answers of a listener's connections together, stay within a bound however many
requests run at once.

Kafka bounds a connection's answers by reading nothing more from it until its answer is
sent; raftka's listeners run up to 64 requests of a connection at once, so 64 fetches
from a client that never reads could each pin a 64 MiB answer. Instead they share the
connection's bound: a listener gives each request it starts an ``AnswerRoom`` (in
``current_answer_room``), and a handler whose answer can be large (a fetch) reads no
more than ``available()`` and ``hold``s what it read until its answer is queued, where
the connection counts it until it is sent. A fetch still returns its first batch whole
when there is any room (Kafka's KIP-74), so a connection's answers reach at most the
bound plus one batch, and the next fetch, finding no room, reads nothing. Requests
served elsewhere (gRPC) have none.

The connections of one listener share an ``AnswerPool`` as well: 24 connections that
sent fetches and read nothing each pinned their own 64 MiB (a broker went from 104 MB to
1.66 GB). A fetch's room is the least of its connection's and its listener's, so the
listener's answers reach at most its bound plus one batch per fetch being read.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

GIVE_BACK_BYTES = 64 << 20  # answers freed from a peak this large are worth giving back


class AnswerPool:
    """A listener's bytes of answers: the sum of its connections' ``AnswerBudget``s. Only
    those holding bytes are summed (a connection says so when it queues an answer)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._holding: set[AnswerBudget] = set()
        self.peak = 0  # the most ``used`` has been since the last ``drained``

    @property
    def used(self) -> int:
        total = 0
        for budget in list(self._holding):
            used = budget.used
            if not used:
                self._holding.discard(budget)
            total += used
        self.peak = max(self.peak, total)
        return total

    def drained(self) -> bool:
        """Whether answers have fallen from a peak of ``GIVE_BACK_BYTES`` or more to a
        quarter of it since this last said so: the memory they took is free again."""
        used = self.used
        if self.peak < GIVE_BACK_BYTES or used * 4 > self.peak:
            return False
        self.peak = used
        return True

    def holding(self, budget: AnswerBudget) -> None:
        self._holding.add(budget)

    def release(self, budget: AnswerBudget) -> None:
        """``budget``'s connection is gone: its answers with it."""
        self._holding.discard(budget)


class AnswerBudget:
    """One connection's bytes of answers: those queued (unsent, or finished and waiting
    for an earlier answer) and those held by requests still being answered."""

    def __init__(self, limit: int, queued: Callable[[], int], pool: AnswerPool | None = None) -> None:
        self.limit = limit
        self._queued = queued
        self.pool = pool
        self.held = 0

    @property
    def used(self) -> int:
        return self._queued() + self.held

    def room(self) -> int:
        """Bytes more this connection's answers may take (its listener's bound too)."""
        own = self.limit - self.used
        return own if self.pool is None else min(own, self.pool.limit - self.pool.used)

    def queued(self) -> None:
        """An answer went to the connection's write buffer: the pool counts it until sent."""
        if self.pool is not None:
            self.pool.holding(self)


class AnswerRoom:
    """One request's share of its connection's ``AnswerBudget``."""

    def __init__(self, budget: AnswerBudget) -> None:
        self._budget = budget
        self.held = 0

    def available(self) -> int:
        """Bytes this answer may take in all."""
        return max(0, self._budget.room() + self.held)

    def hold(self, size: int) -> None:
        """This answer now takes ``size`` bytes (0: it is queued, or will not be)."""
        self._budget.held += size - self.held
        self.held = size
        if size:
            self._budget.queued()


current_answer_room: contextvars.ContextVar[AnswerRoom | None] = contextvars.ContextVar(
    "current_answer_room", default=None
)
