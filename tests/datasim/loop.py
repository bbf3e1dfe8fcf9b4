"""The brokers' coroutines run on an asyncio loop that the scheduler turns by hand.

Produce with acks=all parks on asyncio futures until the high watermark passes it; the
loop runs only when the scheduler settles it after an event, and nothing on it waits on
I/O or on the wall clock (the simulation's fetches never park, ``max_wait_ms=0``; a
produce's timeout is longer than any run, the clients time out in simulated time), so
the same seed runs the same callbacks in the same order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class SimLoop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def spawn(self, coro: Coroutine[Any, Any, T], done: Callable[[T], None]) -> asyncio.Task[T]:
        """Run ``coro`` as a task; ``done(result)`` when it returns (not if cancelled)."""
        task = self.loop.create_task(coro)
        task.add_done_callback(lambda t: None if t.cancelled() else done(t.result()))
        return task

    def settle(self) -> None:
        """Run every callback that is ready, and those they make ready, until none is."""
        while self.loop._ready:  # private: the one way to see that the loop has work, without waiting
            self.loop.call_soon(self.loop.stop)
            self.loop.run_forever()

    def close(self, tasks: list[asyncio.Task[Any]]) -> None:
        for task in tasks:
            task.cancel()
        self.settle()
        self.loop.close()


def run_now(coro: Coroutine[Any, Any, T]) -> T:
    """A coroutine that never waits (a fetch with ``max_wait_ms=0``), run to its end."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("the coroutine waited; the simulation only runs ones that never wait")
