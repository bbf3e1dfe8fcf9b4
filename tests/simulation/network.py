"""The simulated network: per-link delays, loss, duplication, reordering, partitions, clogs.

Every message takes its own random delay, so messages reorder freely (gRPC gives no
order between concurrent calls). A *partition* (cut link) silently drops; a *clog*
holds messages and releases them, late, when the link unclogs (FoundationDB's
swizzle-clogging). A request to a crashed node is dropped and, sometimes, the sender
hears ``unreachable`` (connection refused) a moment later.

Messages are RPCs, as over gRPC: every request opens a *call* and the caller sees at most
one response per call. A duplicated request (a transport retry) is handled twice by the
receiver, but only the first response to arrive completes the call; later ones, and any
response for a caller that has since restarted (its connection is gone), are dropped.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from raftka.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    Envelope,
    FetchRequest,
    FetchSnapshotRequest,
    VoteRequest,
)
from tests.simulation.scheduler import Scheduler

REQUEST_TYPES = (
    VoteRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
)
Link = tuple[int, int]


class Endpoint(Protocol):
    """What the network needs from a node."""

    up: bool
    incarnation: int

    def deliver(self, env: Envelope, call_id: int) -> None: ...
    def on_unreachable(self, peer_id: int, incarnation: int) -> None: ...


@dataclass(slots=True)
class NetworkParams:
    delay_min_ms: int = 1
    delay_max_ms: int = 10
    spike_probability: float = 0.0  # a message occasionally takes much longer
    spike_max_ms: int = 200
    loss_probability: float = 0.0
    duplicate_probability: float = 0.0
    unreachable_probability: float = 0.7  # a request to a dead node reports unreachable

    def quiet(self) -> NetworkParams:
        """The same latencies with every fault off (the liveness phase)."""
        return NetworkParams(self.delay_min_ms, self.delay_max_ms, 0.0, self.spike_max_ms, 0.0, 0.0, 1.0)


@dataclass(slots=True)
class _Flight:
    env: Envelope
    src_incarnation: int
    call_id: int  # the call a request opens, or a response completes


@dataclass(slots=True)
class NetworkStats:
    sent: int = 0
    delivered: int = 0
    lost: int = 0
    duplicated: int = 0
    cut: int = 0
    to_dead: int = 0
    clogged: int = 0


@dataclass(slots=True)
class Network:
    scheduler: Scheduler
    rng: random.Random
    params: NetworkParams
    nodes: dict[int, Endpoint] = field(default_factory=dict)
    on_drop: Callable[[Envelope, str], None] | None = None
    stats: NetworkStats = field(default_factory=NetworkStats)
    _cut: set[Link] = field(default_factory=set)
    _clogged: dict[Link, list[_Flight]] = field(default_factory=dict)
    _link_extra_ms: dict[Link, int] = field(default_factory=dict)  # slowed links (a fault)
    _link_base_ms: dict[Link, int] = field(default_factory=dict)  # each link's own latency
    _open_calls: dict[int, tuple[int, int]] = field(
        default_factory=dict
    )  # call id -> caller incarnation, rpc_id
    _next_call: int = 0

    # sending ---------------------------------------------------------------------------
    def send(self, env: Envelope, src_incarnation: int, call_id: int | None = None) -> None:
        """Send a request (``call_id`` None: it opens a call) or the response completing ``call_id``."""
        self.stats.sent += 1
        if call_id is None:
            self._next_call += 1
            call_id = self._next_call
            self._open_calls[call_id] = (src_incarnation, env.rpc_id)
        flight = _Flight(env, src_incarnation, call_id)
        link = (env.src, env.dst)
        if link in self._cut:
            self.stats.cut += 1
            return
        dst = self.nodes[env.dst]
        if not dst.up:
            self._to_dead(flight)
            return
        if self.rng.random() < self.params.loss_probability:
            self.stats.lost += 1
            return
        self.scheduler.after(self._delay(link), self._arrive, flight)
        if self.rng.random() < self.params.duplicate_probability:
            self.stats.duplicated += 1
            self.scheduler.after(self._delay(link), self._arrive, flight)

    def _delay(self, link: Link) -> int:
        p = self.params
        delay = self.rng.randint(p.delay_min_ms, p.delay_max_ms)
        delay += self._link_base_ms.get(link, 0) + self._link_extra_ms.get(link, 0)
        if p.spike_probability and self.rng.random() < p.spike_probability:
            delay += self.rng.randint(0, p.spike_max_ms)
        return delay

    def _to_dead(self, flight: _Flight) -> None:
        self.stats.to_dead += 1
        env = flight.env
        if isinstance(env.msg, REQUEST_TYPES) and self.rng.random() < self.params.unreachable_probability:
            sender = self.nodes[env.src]
            self.scheduler.after(
                self.rng.randint(1, 5), sender.on_unreachable, env.dst, flight.src_incarnation
            )
        if self.on_drop is not None:
            self.on_drop(env, "dead")

    def _arrive(self, flight: _Flight) -> None:
        env = flight.env
        link = (env.src, env.dst)
        if link in self._cut:
            self.stats.cut += 1
            if self.on_drop is not None:
                self.on_drop(env, "cut")
            return
        if link in self._clogged:
            self.stats.clogged += 1
            self._clogged[link].append(flight)
            return
        dst = self.nodes[env.dst]
        if not dst.up:
            self._to_dead(flight)
            return
        if not isinstance(env.msg, REQUEST_TYPES):
            caller = self._open_calls.pop(flight.call_id, None)
            if caller is None or caller[0] != dst.incarnation:
                if self.on_drop is not None:
                    self.on_drop(env, "stale" if caller is not None else "answered")
                return
            env = Envelope(env.src, env.dst, env.msg, caller[1])
        self.stats.delivered += 1
        dst.deliver(env, flight.call_id)

    # faults ------------------------------------------------------------------------------
    def links(self) -> list[Link]:
        ids = sorted(self.nodes)
        return [(a, b) for a in ids for b in ids if a != b]

    def cut(self, links: list[Link]) -> None:
        self._cut.update(links)

    def partition(self, side_a: list[int], side_b: list[int]) -> None:
        """Cut every link between the two sides, both directions."""
        self.cut([(a, b) for a in side_a for b in side_b] + [(b, a) for a in side_a for b in side_b])

    def isolate(self, node_id: int) -> None:
        others = [n for n in sorted(self.nodes) if n != node_id]
        self.partition([node_id], others)

    def clog(self, link: Link) -> None:
        self._clogged.setdefault(link, [])

    def unclog(self, link: Link) -> None:
        for flight in self._clogged.pop(link, []):
            self.scheduler.after(self._delay(link), self._arrive, flight)

    def skew(self, skew_max_ms: int) -> None:
        """Give every link its own extra latency in [0, skew_max_ms] (kept across heals)."""
        for link in self.links():
            self._link_base_ms[link] = self.rng.randint(0, skew_max_ms)

    def slow(self, link: Link, extra_ms: int) -> None:
        self._link_extra_ms[link] = extra_ms

    def heal(self) -> None:
        """Remove every partition, clog and slow link (held messages are released)."""
        self._cut.clear()
        for link in sorted(self._clogged):
            self.unclog(link)
        self._link_extra_ms.clear()

    def cut_links(self) -> list[Link]:
        return sorted(self._cut)

    def clogged_links(self) -> list[Link]:
        return sorted(self._clogged)
