"""Waiting for a topic no broker knows, as Kafka's producer waits up to ``max.block.ms``
in ``send`` for a topic's metadata, but saying so: a warning at once, then one every
``WARN_INTERVAL_S`` while the wait goes on (kafka-console-producer's log warns on every
retry), so a mistyped topic name is seen at once, not after the whole wait.

Sends for one missing topic share one wait: the first sets its deadline, later ones end
by the same moment, and once it has passed a send for a topic still unknown fails after
one refresh. A stream of records for a missing topic so ends within one ``max_block_ms``,
not one per record. Once the topic is known its wait is forgotten. Time comes from the
clock given (monotonic seconds), so a test can run the wait on a clock of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from raftka.client.cluster_metadata import ClusterMetadata, TopicInfo
from raftka.client.errors import KafkaError

log = structlog.get_logger("raftka.client.producer")
WARN_INTERVAL_S = 5.0  # how often a wait still going on says so again
UNKNOWN = "UNKNOWN_TOPIC_OR_PARTITION"


@dataclass
class _Wait:
    started: float
    deadline: float
    warn_at: float


class TopicWaits:
    """The producer's waits for topics, one per missing topic."""

    def __init__(
        self,
        metadata: ClusterMetadata,
        retry_backoff_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metadata = metadata
        self._retry_backoff_s = retry_backoff_s
        self.clock = clock
        self._waits: dict[str, _Wait] = {}

    async def topic(self, name: str, max_wait_s: float) -> TopicInfo:
        """The topic's metadata, waiting up to ``max_wait_s`` (on ``clock``) for one the
        brokers do not know yet (created a moment ago); KafkaError UNKNOWN_TOPIC_OR_PARTITION
        when it is still unknown then. A known topic costs a lookup: every send comes here."""
        info = self._metadata.topics.get(name)
        if info is not None:
            if self._waits:
                self._waits.pop(name, None)
            return info
        deadline = self.clock() + max_wait_s
        while True:
            try:
                info = await self._metadata.topic(name)  # refreshes once when unknown
            except KafkaError as e:
                if e.code != UNKNOWN:
                    raise
                self._still_unknown(name, deadline, max_wait_s)
                await asyncio.sleep(self._retry_backoff_s)
                continue
            self._waits.pop(name, None)
            return info

    def _still_unknown(self, name: str, deadline: float, max_wait_s: float) -> None:
        """Warn (at once, then every WARN_INTERVAL_S), or raise once the wait is over."""
        now = self.clock()
        wait = self._waits.setdefault(name, _Wait(started=deadline - max_wait_s, deadline=deadline, warn_at=now))
        if now >= min(deadline, wait.deadline):
            raise KafkaError(
                UNKNOWN, f"no topic {name!r}: not created within {wait.deadline - wait.started:g} s (max_block_ms)"
            )
        if now >= wait.warn_at:
            log.warning(
                "topic does not exist; waiting for it to be created",
                topic=name,
                max_wait_s=round(wait.deadline - wait.started, 1),
                waited_s=round(now - wait.started, 1),
            )
            wait.warn_at = now + WARN_INTERVAL_S
