"""The event-loop time one request takes: the time spent running its coroutine's steps
(each stretch between two awaits), not the time it waits. This is what a request quota
(``request_percentage``) bounds on raftka's one loop, as Kafka's bounds the time of its
request-handler threads.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


class LoopTime:
    """Seconds of loop time counted for one request."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds


class _Timed:
    """Awaits a coroutine step by step, adding each step's time to ``spent``."""

    __slots__ = ("_coroutine", "_spent")

    def __init__(self, coroutine: Coroutine[Any, Any, Any], spent: LoopTime) -> None:
        self._coroutine = coroutine
        self._spent = spent

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine = self._coroutine
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                waiting = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
            except StopIteration as done:
                return done.value
            finally:
                self._spent.seconds += time.perf_counter() - started
            try:
                sent, thrown = (yield waiting), None
            except BaseException as e:  # a cancellation, passed on to the coroutine
                sent, thrown = None, e


async def timed(coroutine: Coroutine[Any, Any, T], spent: LoopTime) -> T:
    """``await coroutine``, adding the loop time of its steps to ``spent``."""
    return await _Timed(coroutine, spent)
