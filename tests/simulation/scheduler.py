"""A seeded discrete-event scheduler: a heap of callbacks ordered by (time, sequence).

Nothing here reads the wall clock. Two events at the same simulated millisecond run in
the order they were scheduled, so a seed replays the exact same schedule.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class _Event:
    time_ms: int
    fn: Callable[..., None]
    args: tuple[Any, ...]
    cancelled: bool = False


class Handle:
    """Lets the owner of a scheduled event cancel it (a cancelled event is skipped)."""

    __slots__ = ("_event",)

    def __init__(self, event: _Event) -> None:
        self._event = event

    def cancel(self) -> None:
        self._event.cancelled = True

    @property
    def time_ms(self) -> int:
        return self._event.time_ms


class EventBudgetExceeded(Exception):
    """The run scheduled more events than its bound: a busy loop in the core or the sim."""


class Scheduler:
    """Runs callbacks in simulated time. ``now_ms`` only moves forward."""

    def __init__(self, events_max: int) -> None:
        self.now_ms = 0
        self.events_run = 0
        self.events_max = events_max
        self._heap: list[tuple[int, int, _Event]] = []  # (time, sequence, event)
        self._seq = 0

    def at(self, time_ms: int, fn: Callable[..., None], *args: Any) -> Handle:
        """Run ``fn(*args)`` at ``time_ms`` (never in the past)."""
        assert time_ms >= self.now_ms, (time_ms, self.now_ms)
        self._seq += 1
        event = _Event(time_ms, fn, args)
        heapq.heappush(self._heap, (time_ms, self._seq, event))
        return Handle(event)

    def after(self, delay_ms: int, fn: Callable[..., None], *args: Any) -> Handle:
        return self.at(self.now_ms + max(0, delay_ms), fn, *args)

    def step(self) -> bool:
        """Run the next live event; False when nothing is left."""
        while self._heap:
            time_ms, _, event = heapq.heappop(self._heap)
            if event.cancelled:
                continue
            self.now_ms = time_ms
            self.events_run += 1
            if self.events_run > self.events_max:
                raise EventBudgetExceeded(f"more than {self.events_max} events (a busy loop?)")
            event.fn(*event.args)
            return True
        return False

    def run_until(self, time_ms: int) -> None:
        """Run every event due at or before ``time_ms``; then the clock reads ``time_ms``."""
        heap = self._heap
        while heap:
            head_ms, _, head = heap[0]
            if head.cancelled:
                heapq.heappop(heap)
                continue
            if head_ms > time_ms:
                break
            self.step()
        self.now_ms = max(self.now_ms, time_ms)
