"""An event loop on a private daemon thread, for the synchronous facades of clients that
must keep working between calls (a producer's sender, a consumer's prefetching and its
group's heartbeats), as Kafka's Java clients run their network threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the loop and wait for its result in the calling thread."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    @property
    def closed(self) -> bool:
        return self.loop.is_closed()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()
