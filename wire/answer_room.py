"""How many bytes a request's answer may take, so that one connection's answers stay
within a bound however many of its requests run at once.

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
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable


class AnswerBudget:
    """One connection's bytes of answers: those queued (unsent, or finished and waiting
    for an earlier answer) and those held by requests still being answered."""

    def __init__(self, limit: int, queued: Callable[[], int]) -> None:
        self.limit = limit
        self._queued = queued
        self.held = 0

    @property
    def used(self) -> int:
        return self._queued() + self.held


class AnswerRoom:
    """One request's share of its connection's ``AnswerBudget``."""

    def __init__(self, budget: AnswerBudget) -> None:
        self._budget = budget
        self.held = 0

    def available(self) -> int:
        """Bytes this answer may take in all."""
        return max(0, self._budget.limit - self._budget.used + self.held)

    def hold(self, size: int) -> None:
        """This answer now takes ``size`` bytes (0: it is queued, or will not be)."""
        self._budget.held += size - self.held
        self.held = size


current_answer_room: contextvars.ContextVar[AnswerRoom | None] = contextvars.ContextVar(
    "current_answer_room", default=None
)
