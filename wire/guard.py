"""What a listener's connections may hold, and the closing of those that hold too much or
too long, so that no client, and no number of idle sockets, keeps others out.

- Connections: at most ``connections_per_ip_max`` per client address (Kafka's
  ``max.connections.per.ip``, unbounded there: one client's 4,096 idle sockets closed every
  new connection), beyond which a new one is closed at once; at most ``connections_max``
  per listener (Kafka's ``max.connections``), and none while no more than half the node's
  descriptor reserve is free (``raftka.node.descriptors``): at either bound a new
  connection takes the place of the one idle longest, if that one has been idle
  ``EVICTABLE_IDLE_S`` (so idle sockets, from however many addresses, cannot keep a
  client out, and a connection that just did work is not the one to go), and is closed
  at once otherwise.
- Time: a connection with nothing in flight for ``idle_ms`` is closed (Kafka's
  ``connections.max.idle.ms``), and so is one whose request frame, begun, is not whole
  ``partial_request_ms`` after its last whole frame (a client that trickles a frame a
  byte at a time is never idle). A TLS handshake gets ``handshake_ms`` (or that, if less).
- Handshakes: a connection in its TLS handshake holds asyncio's TLS buffers (~290 KB each
  before a certificate was seen; waves of idle sockets took a broker from 87 MB to 1.2 GB);
  at most ``handshakes_max`` are under way, beyond which the oldest is closed for a new one.
  Once they fall from a peak of ``GIVE_BACK_HANDSHAKES`` or more to a quarter, the
  collector runs (a failed handshake leaves its connection in reference cycles, through
  the exception asyncio keeps) and the memory goes back to the system.
- Memory: the bytes of requests not yet whole, over all connections of the listener, stay
  within ``buffered_bytes_max`` plus one read per connection: beyond, the connection
  holding the most is closed (20 connections each holding a 16 MiB frame less a byte
  pinned 320 MB). Whole requests arriving in one read are not buffered and never count.
  The answers its connections have not read share ``answer_bytes_max`` (``answers``, an
  ``AnswerPool``: a fetch reads no more than it leaves); while they take more than half
  of it, a connection whose client has read none of its answers for ``partial_request_ms``
  is closed, the one holding the most first. Once they fall from a large peak, the memory
  they took is given back to the system (``raftka.node.memory``).

Each closing is counted by reason (``closed``) and logged at most once a minute per
listener, since clients cause them at will.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import time
from dataclasses import dataclass
from typing import Protocol

import structlog

from raftka.node import memory
from raftka.node.descriptors import DESCRIPTORS
from raftka.node.logs import RateLimitedLog
from raftka.wire.acceptor import Verdict
from raftka.wire.answer_room import AnswerBudget, AnswerPool

log = structlog.get_logger("raftka.wire.guard")

MIB = 1 << 20
LOG_INTERVAL_S = 60.0
SWEEPS_PER_TIMEOUT = 4  # a timed-out connection is closed within a quarter of its timeout more
SWEEP_INTERVAL_MAX_S = 5.0
EVICTABLE_IDLE_S = 1.0

# reasons a connection was closed (the label of raftka_listener_connections_closed_total)
CONNECTIONS_MAX = "connections_max"
PER_IP = "connections_per_ip_max"
DESCRIPTORS_LOW = "descriptors"
EVICTED = "evicted"  # idle longest when a new connection needed its place
IDLE = "idle"
PARTIAL_REQUEST = "partial_request"
BUFFERED_BYTES = "buffered_bytes"
HANDSHAKES = "handshakes_max"  # the oldest TLS handshake under way, for a new one
ANSWER_BYTES = "answer_bytes"  # its client read none of its answers while the listener's were full
REASONS = (
    CONNECTIONS_MAX,
    PER_IP,
    DESCRIPTORS_LOW,
    EVICTED,
    IDLE,
    PARTIAL_REQUEST,
    BUFFERED_BYTES,
    ANSWER_BYTES,
    HANDSHAKES,
)
GIVE_BACK_HANDSHAKES = 64


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    connections_max: int = 4_096
    connections_per_ip_max: int = 1_024
    idle_ms: int = 600_000
    partial_request_ms: int = 30_000
    buffered_bytes_max: int = 64 * MIB
    answer_bytes_max: int = 256 * MIB  # answers not yet sent, over all connections
    handshake_ms: int = 10_000
    handshakes_max: int = 256  # TLS handshakes under way at once


DEFAULT_LIMITS = ConnectionLimits()


class Guarded(Protocol):
    """What the guard reads of a connection."""

    host: str
    last_active_s: float  # monotonic: the last bytes in, or answer out
    partial_since_s: float | None  # monotonic: since when a begun frame is not whole
    answers: AnswerBudget

    def queued_answer_bytes(self) -> int: ...  # answers not yet sent

    def busy(self) -> bool: ...  # requests in flight

    def reading(self) -> bool: ...  # not paused by the listener's own bounds

    def abort(self) -> None: ...


class ConnectionGuard:
    """One listener's connections against its ``ConnectionLimits``."""

    def __init__(self, name: str, limits: ConnectionLimits) -> None:
        self.name = name
        self.limits = limits
        self.connections: set[Guarded] = set()
        self.closed: collections.Counter[str] = collections.Counter()
        self.buffered_bytes = 0
        self._buffered: dict[Guarded, int] = {}  # connections holding bytes not yet requests
        self.answers = AnswerPool(limits.answer_bytes_max)
        self._handshaking: dict[Guarded, None] = {}  # oldest first
        self._handshakes_peak = 0
        # connections with answers unsent: (bytes, since when none of them were sent)
        self._unsent: dict[Guarded, tuple[int, float]] = {}
        self._per_host: collections.Counter[str] = collections.Counter()
        self._log = RateLimitedLog(log, LOG_INTERVAL_S)
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def handshake_timeout_s(self) -> float:
        return min(self.limits.partial_request_ms, self.limits.handshake_ms) / 1000

    def handshaking(self, connection: Guarded) -> None:
        """``connection`` starts its TLS handshake: the oldest under way makes room if need be."""
        if len(self._handshaking) >= self.limits.handshakes_max:
            self._close(next(iter(self._handshaking)), HANDSHAKES)
        self._handshaking[connection] = None
        self._handshakes_peak = max(self._handshakes_peak, len(self._handshaking))

    def handshake_done(self, connection: Guarded) -> None:
        self._handshaking.pop(connection, None)

    def start(self) -> None:
        timeout_ms = min(self.limits.idle_ms, self.limits.partial_request_ms)
        interval_s = min(timeout_ms / 1000 / SWEEPS_PER_TIMEOUT, SWEEP_INTERVAL_MAX_S)
        self._sweeper = asyncio.create_task(self._sweep_every(interval_s), name=f"{self.name}-guard")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)

    def room_for(self, fd: int, host: str) -> Verdict:
        """Whether a socket just accepted on descriptor ``fd`` may stay while the node's
        descriptors run short: an idle connection gives way if need be. Judged as it is
        accepted, before the next (``raftka.wire.acceptor``)."""
        if DESCRIPTORS.room_for_connection(fd):
            return Verdict.KEEP
        return Verdict.KEEP_AFTER_EVICTION if self._make_room(DESCRIPTORS_LOW, host) else Verdict.CLOSE

    def admit(self, connection: Guarded) -> bool:
        """Whether a new connection may stay, by the connection bounds; counted if so."""
        if self._per_host[connection.host] >= self.limits.connections_per_ip_max:
            self._closing(PER_IP, connection.host)
            return False
        if len(self.connections) >= self.limits.connections_max and not self._make_room(
            CONNECTIONS_MAX, connection.host
        ):
            return False
        self.connections.add(connection)
        self._per_host[connection.host] += 1
        return True

    def _make_room(self, reason: str, host: str) -> bool:
        """Close the connection idle longest to make room for one from ``host``; False (and
        counted under ``reason``) when none has been idle long enough."""
        idlest = self._idlest(time.monotonic())
        if idlest is None:
            self._closing(reason, host)
            return False
        self._close(idlest, EVICTED)
        return True

    def _idlest(self, now_s: float) -> Guarded | None:
        """The connection idle longest, if it has been idle ``EVICTABLE_IDLE_S``."""
        idle = (c for c in self.connections if not c.busy())
        idlest = min(idle, key=lambda c: c.last_active_s, default=None)
        if idlest is None or now_s - idlest.last_active_s < EVICTABLE_IDLE_S:
            return None
        return idlest

    def release(self, connection: Guarded) -> None:
        if connection not in self.connections:
            return
        self.connections.discard(connection)
        self._per_host[connection.host] -= 1
        if not self._per_host[connection.host]:
            del self._per_host[connection.host]
        self.buffered_bytes -= self._buffered.pop(connection, 0)
        self.answers.release(connection.answers)
        self._handshaking.pop(connection, None)
        self._unsent.pop(connection, None)

    def holding(self, connection: Guarded, size: int) -> None:
        """``connection`` holds ``size`` bytes read and not yet taken as requests; over the
        bound, the connections holding the most are closed until it holds again."""
        if connection not in self.connections:
            return
        self.buffered_bytes += size - self._buffered.pop(connection, 0)
        if size:
            self._buffered[connection] = size
        while self.buffered_bytes > self.limits.buffered_bytes_max:
            largest = max(self._buffered, key=self._buffered.__getitem__)
            self._close(largest, BUFFERED_BYTES)

    def sweep(self, now_s: float) -> None:
        """Close the connections idle or stuck on a partial frame past their timeouts."""
        idle_s = self.limits.idle_ms / 1000
        partial_s = self.limits.partial_request_ms / 1000
        for connection in list(self.connections):
            started = connection.partial_since_s
            if started is not None and connection.reading() and now_s - started >= partial_s:
                self._close(connection, PARTIAL_REQUEST)
            elif not connection.busy() and now_s - connection.last_active_s >= idle_s:
                self._close(connection, IDLE)
        self._close_unread(now_s, partial_s)
        if self._handshakes_drained():
            gc.collect()
            memory.give_back()
        elif self.answers.drained():
            memory.give_back()

    def _handshakes_drained(self) -> bool:
        under_way = len(self._handshaking)
        if self._handshakes_peak < GIVE_BACK_HANDSHAKES or under_way * 4 > self._handshakes_peak:
            return False
        self._handshakes_peak = under_way
        return True

    def _close_unread(self, now_s: float, unread_s: float) -> None:
        """While the listener's answers take more than half their bound, close the
        connections whose clients have read none of their answers for ``unread_s`` (their
        unsent bytes never went down), those holding the most first."""
        for connection in self.connections:
            unsent = connection.queued_answer_bytes()
            seen = self._unsent.get(connection)
            if not unsent:
                self._unsent.pop(connection, None)
            elif seen is None or unsent < seen[0]:
                self._unsent[connection] = (unsent, now_s)
            else:
                self._unsent[connection] = (unsent, seen[1])
        unread = [c for c, (_, since_s) in self._unsent.items() if now_s - since_s >= unread_s]
        for connection in sorted(unread, key=lambda c: c.answers.used, reverse=True):
            if self.answers.used * 2 <= self.answers.limit:
                return
            self._close(connection, ANSWER_BYTES)

    async def _sweep_every(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            self.sweep(time.monotonic())

    def _close(self, connection: Guarded, reason: str) -> None:
        self.release(connection)  # at once: its bytes no longer count, its slot is free
        connection.abort()
        self._closing(reason, connection.host)

    def _closing(self, reason: str, host: str) -> None:
        self.closed[reason] += 1
        self._log.log(
            logging.WARNING,
            "closing a connection",
            listener=self.name,
            reason=reason,
            client=host,
        )
