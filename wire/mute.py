"""Muting a throttled client's connection, as Kafka does after KIP-219: the broker answers
at once (the answer says how long the client is throttled) and then reads nothing more
from that connection until the throttle ends, so a client that ignores the throttle time
gains nothing by sending more. Its requests already being handled still finish and are
answered; the connection's other bounds are unchanged.

Once throttled, a connection's requests are handled one at a time (``throttled``), as
Kafka handles every connection's: a client coming out of a mute would otherwise push in
everything it queued meanwhile (librdkafka sends full batches, several requests deep),
and that burst is what other clients' latencies meet.

A listener gives each connection a ``Mute`` and each request's task the connection's (in
``current_mute``); a handler that throttles its client calls ``mute_for``. The listener
asks ``muted()`` before it starts requests or reads, and ``Mute`` calls it back
(``on_end``) when the mute ends. Requests served elsewhere (gRPC) have none.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable


class Mute:
    def __init__(self, on_end: Callable[[], None], clock: Callable[[], float] = time.monotonic) -> None:
        self._on_end = on_end
        self._clock = clock
        self._until = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.throttled = False  # ever: from then on, one request at a time

    def muted(self) -> bool:
        return self._clock() < self._until

    def mute_for(self, delay_ms: int) -> None:
        """Read nothing more for ``delay_ms`` from now (a longer mute already on stays)."""
        until = self._clock() + delay_ms / 1000
        if delay_ms <= 0 or until <= self._until:
            return
        self.throttled = True
        self._until = until
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay_ms / 1000, self.end)

    def cancel(self) -> None:
        """The connection is gone: no call back."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def end(self) -> None:
        """The throttle is over (its timer): read again."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._until = 0.0
        self._on_end()


current_mute: contextvars.ContextVar[Mute | None] = contextvars.ContextVar("current_mute", default=None)
