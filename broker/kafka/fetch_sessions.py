"""Kafka's incremental fetch sessions (KIP-227) on the Kafka listener.

A consumer of many partitions names each of them in every fetch and gets each back,
records or not: at a thousand partitions most of a fetch's cost is partitions with
nothing new. With a session the broker remembers what a client fetches and what it last
told it of each partition; the client sends only what changed (a new fetch offset, a
partition added or forgotten), and the answer holds only partitions with something new:
records, an error, a moved high watermark or log start.

The rules are Kafka's (``FetchManager``, ``FetchSessionCache``): session 0 with epoch 0
asks for a new session (the answer names it, or 0 when there is no room: the client
then fetches in full); epoch -1 (final) fetches in full without one, closing the session
it names; a named session with epoch 0 is closed and a new one made; any other epoch
must be the session's next, else ``INVALID_FETCH_SESSION_EPOCH``, and a session the
cache does not hold is ``FETCH_SESSION_ID_NOT_FOUND``: after either, clients start over
with a full fetch. The cache holds ``slots`` sessions (Kafka's
``max.incremental.fetch.session.cache.slots``, 1,000) and ``partitions_max`` partitions
across them; when full, a new session takes the place of the least recently used one
only if that one has been idle ``eviction_s`` (Kafka's 120 s) or has fewer partitions,
else the fetch is answered without a session.

Unlike Kafka's, a session belongs to the connection that made it, and a connection has
one at most: its id named on another connection is ``FETCH_SESSION_ID_NOT_FOUND``, so a
client cannot read or steer another's session by guessing its id, and a new session
replaces the connection's last one, so a client that asks for a new session on every
fetch (some do) cannot fill the cache and evict the others' (clients make one session
per connection, and a new one when they reconnect).
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse

from raftka.broker.kafka.errors import FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH

SESSIONS_FROM = 7  # Fetch versions with session ids and epochs
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
SLOTS = 1_000
PARTITIONS_MAX = 100_000  # across every session: what the cache may hold
EVICTION_S = 120.0
_EPOCH_MAX = 2**31 - 1

FetchTopic = FetchRequest.FetchTopic
FetchPartition = FetchRequest.FetchTopic.FetchPartition
Key = tuple[Hashable, int]  # (topic name, or topic id from Fetch v13), partition


@dataclass(slots=True)
class _Partition:
    asked: Any  # the client's latest FetchPartition for it
    told: tuple[int, int, int] | None = None  # (high watermark, last stable offset, log start) last answered


@dataclass(slots=True)
class Session:
    id: int
    owner: str
    epoch: int = 1  # the next incremental fetch's
    partitions: OrderedDict[Key, _Partition] = field(default_factory=OrderedDict)
    used_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Plan:
    """What one fetch reads: ``topics`` (the request's, or the session's), the session
    that answers it, whether its answer is incremental, or a top-level error."""

    topics: list[Any]
    session: Session | None = None
    incremental: bool = False
    error_code: int = 0

    @property
    def session_id(self) -> int:
        return self.session.id if self.session is not None else 0


class FetchSessions:
    """The Kafka listener's sessions (one cache per listener)."""

    def __init__(
        self,
        slots: int = SLOTS,
        partitions_max: int = PARTITIONS_MAX,
        eviction_s: float = EVICTION_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slots = slots
        self.partitions_max = partitions_max
        self.eviction_s = eviction_s
        self._clock = clock
        self._sessions: OrderedDict[int, Session] = OrderedDict()  # least recently used first
        self._by_owner: dict[str, int] = {}
        self._partitions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def plan(self, request: Any, version: int, owner: str) -> Plan:
        """How to answer ``request`` from the connection ``owner``: see the module's rules."""
        if version < SESSIONS_FROM:
            return Plan(request.topics)
        by_id = version >= 13
        session_id, epoch = request.session_id, request.session_epoch
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id:
                self._close(session_id, owner)
            if epoch == FINAL_EPOCH:
                return Plan(request.topics)
            return Plan(request.topics, self._open(request.topics, by_id, owner))
        session = self._sessions.get(session_id)
        if session is None or session.owner != owner:
            return Plan([], error_code=FETCH_SESSION_ID_NOT_FOUND)
        if epoch != session.epoch:
            return Plan([], error_code=INVALID_FETCH_SESSION_EPOCH)
        self._update(session, request, by_id)
        if self._partitions > self.partitions_max:
            self._close(session.id, owner)
            return Plan([], error_code=FETCH_SESSION_ID_NOT_FOUND)
        session.epoch = 1 if epoch == _EPOCH_MAX else epoch + 1
        self._touch(session)
        return Plan(_topics(session, by_id), session, incremental=True)

    def answered(self, plan: Plan, topics: list[Any], by_id: bool) -> list[Any]:
        """The answer's topics as the session gives them: each partition's state noted,
        and, for an incremental fetch, only the partitions with something new."""
        session = plan.session
        if session is None:
            return topics
        kept_topics = []
        for topic in topics:
            key = topic.topic_id if by_id else topic.topic
            kept = []
            for answered in topic.partitions:
                entry = session.partitions.get((key, answered.partition_index))
                told = (answered.high_watermark, answered.last_stable_offset, answered.log_start_offset)
                if entry is None:  # not in the session (an unknown topic id): always told
                    kept.append(answered)
                    continue
                changed = (
                    entry.told != told
                    or answered.error_code != 0
                    or bool(answered.records)
                    or _diverging(answered)
                )
                entry.told = told if answered.error_code == 0 else None  # after an error, any state is news
                if changed or not plan.incremental:
                    kept.append(answered)
            if kept:
                topic.partitions = kept
                kept_topics.append(topic)
        return kept_topics

    def _open(self, topics: list[Any], by_id: bool, owner: str) -> Session | None:
        if owner in self._by_owner:
            self._close(self._by_owner[owner], owner)
        size = sum(len(t.partitions) for t in topics)
        if not self._room_for(size):
            return None
        session_id = secrets.randbelow(_EPOCH_MAX) + 1
        while session_id in self._sessions:
            session_id = secrets.randbelow(_EPOCH_MAX) + 1
        session = Session(session_id, owner)
        for topic in topics:
            key = topic.topic_id if by_id else topic.topic
            for asked in topic.partitions:
                session.partitions[(key, asked.partition)] = _Partition(asked)
        self._sessions[session_id] = session
        self._by_owner[owner] = session_id
        self._partitions += len(session.partitions)
        self._touch(session)
        return session

    def _room_for(self, size: int) -> bool:
        """Whether a session of ``size`` partitions fits, evicting the least recently used
        one if it is idle or smaller (Kafka's rule)."""
        if size > self.partitions_max:
            return False
        while len(self._sessions) >= self.slots or self._partitions + size > self.partitions_max:
            oldest = next(iter(self._sessions.values()), None)
            if oldest is None:
                return False
            idle = self._clock() - oldest.used_at >= self.eviction_s
            if not (idle or len(oldest.partitions) < size):
                return False
            self._close(oldest.id, oldest.owner)
        return True

    def _update(self, session: Session, request: Any, by_id: bool) -> None:
        before = len(session.partitions)
        for topic in request.topics:
            key = topic.topic_id if by_id else topic.topic
            for asked in topic.partitions:
                entry = session.partitions.get((key, asked.partition))
                if entry is None:
                    session.partitions[(key, asked.partition)] = _Partition(asked)
                else:
                    entry.asked = asked
        for forgotten in request.forgotten_topics_data or ():
            key = forgotten.topic_id if by_id else forgotten.topic
            for partition in forgotten.partitions:
                session.partitions.pop((key, partition), None)
        self._partitions += len(session.partitions) - before

    def _touch(self, session: Session) -> None:
        session.used_at = self._clock()
        self._sessions.move_to_end(session.id)

    def _close(self, session_id: int, owner: str) -> None:
        session = self._sessions.get(session_id)
        if session is not None and session.owner == owner:
            del self._sessions[session_id]
            del self._by_owner[owner]
            self._partitions -= len(session.partitions)


def _topics(session: Session, by_id: bool) -> list[Any]:
    """The session's partitions as a full fetch would name them, topic by topic."""
    by_topic: dict[Hashable, list[Any]] = {}
    for (key, _), entry in session.partitions.items():
        by_topic.setdefault(key, []).append(entry.asked)
    return [
        FetchTopic(topic=None if by_id else key, topic_id=key if by_id else None, partitions=partitions)
        for key, partitions in by_topic.items()
    ]


def _diverging(answered: Any) -> bool:
    """Whether the answer tells the client its log diverged (KIP-320): always news."""
    diverging = answered.diverging_epoch
    return diverging is not None and diverging.epoch >= 0


def refused(plan: Plan) -> FetchResponse:
    """The answer to a fetch whose session cannot be used: the error, no partitions."""
    return FetchResponse(throttle_time_ms=0, error_code=plan.error_code, session_id=0, responses=[])
