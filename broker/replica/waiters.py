"""Requests parked on a partition until it moves: Kafka's purgatories, on asyncio futures.

``OffsetWaiters`` holds acks=all produces until the high watermark passes their last
offset; ``Wakeups`` holds long-polling fetches until a partition gains records (its log
end for followers, its high watermark for consumers). Both are bounded by their owner,
which refuses or answers early rather than parking more.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Hashable, Iterable


class OffsetWaiters:
    """Futures per partition, each done once that partition reaches an offset.

    A waiter cancelled before then (its produce timed out) is let go at once: while the
    high watermark stands still (an ISR shrink the controller keeps refusing), producers
    retrying on timeouts would otherwise pile up waiters until it moves. A partition's
    heap is rebuilt without them once they are half of it, so it never holds more than
    twice the live waiters, and none once every one is gone."""

    def __init__(self) -> None:
        self._waiting: dict[Hashable, list[tuple[int, int, asyncio.Future[int]]]] = {}
        self._cancelled: dict[Hashable, int] = {}  # cancelled waiters still in a heap, per key
        self._order = itertools.count()

    def wait_for(self, key: Hashable, offset: int) -> asyncio.Future[int]:
        """A future resolved with the error code ``reached``/``fail`` gives it; cancel it to
        stop waiting."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting.setdefault(key, []), (offset, next(self._order), future))
        future.add_done_callback(lambda f: self._release(key) if f.cancelled() else None)
        return future

    def _release(self, key: Hashable) -> None:
        """A waiter of ``key`` was cancelled: drop the cancelled ones once they are half."""
        heap = self._waiting.get(key)
        if heap is None:
            return
        cancelled = self._cancelled.get(key, 0) + 1
        if 2 * cancelled < len(heap):
            self._cancelled[key] = cancelled
            return
        live = [entry for entry in heap if not entry[2].cancelled()]
        self._cancelled.pop(key, None)
        if live:
            heapq.heapify(live)
            self._waiting[key] = live
        else:
            del self._waiting[key]

    def reached(self, key: Hashable, offset: int, code: int) -> None:
        """Resolve every waiter of ``key`` for an offset at or below ``offset`` with ``code``."""
        heap = self._waiting.get(key)
        while heap and heap[0][0] <= offset:
            _, _, future = heapq.heappop(heap)
            if future.cancelled():
                self._cancelled[key] = max(0, self._cancelled.get(key, 0) - 1)
            elif not future.done():
                future.set_result(code)
        if heap == []:
            del self._waiting[key]
            self._cancelled.pop(key, None)

    def fail(self, key: Hashable, code: int) -> None:
        self._cancelled.pop(key, None)
        for _, _, future in self._waiting.pop(key, []):
            if not future.done():
                future.set_result(code)

    def __len__(self) -> int:
        return sum(len(heap) for heap in self._waiting.values())


class Wakeups:
    """One-shot wake-ups per partition for parked fetches."""

    def __init__(self) -> None:
        self._parked: dict[Hashable, set[asyncio.Future[None]]] = {}
        self.count = 0  # fetches parked now

    async def wait(self, keys: Iterable[Hashable], timeout_s: float) -> None:
        """Until any of ``keys`` is woken or ``timeout_s`` passes."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for key in keys:
            self._parked.setdefault(key, set()).add(future)
        self.count += 1
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            pass
        finally:
            self.count -= 1
            for key in keys:
                parked = self._parked.get(key)
                if parked is not None:
                    parked.discard(future)
                    if not parked:
                        del self._parked[key]

    def wake(self, key: Hashable) -> None:
        for future in self._parked.pop(key, ()):
            if not future.done():
                future.set_result(None)
