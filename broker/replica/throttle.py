"""Replication throttles, as Kafka's KIP-73 (``ReplicationQuotaManager``).

A topic names the replicas it throttles (``leader.replication.throttled.replicas`` and
``follower.replication.throttled.replicas``: ``partition:broker`` entries, or ``*``), and a
broker bounds the bytes of those replicas' replication per second
(``leader.replication.throttled.rate``, ``follower.replication.throttled.rate``: its own
value, else the cluster default). Both are read from the metadata image, so an
alteration applies at the next fetch.

Kafka's rules, one quota per side per broker:

- the leader counts the bytes it sends for throttled partitions; while their rate is over
  the bound, a follower fetch gets no records for a throttled partition of a follower
  not in its ISR (the other partitions are answered as usual);
- the follower counts the bytes it fetches for throttled partitions; while over the
  bound, it leaves out of its fetches the throttled partitions it has not caught up on
  (it was behind the leader's high watermark at its last answer);
- a replica in sync is never held back (it would fall out of the ISR), but its bytes count.

The rate is Kafka's: 11 samples of one second (``replication.quota.window.num`` and
``.size.seconds``), so a throttle allows one answer's burst, then bytes at the rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from raftka.broker.quota.rate import SampledRate
from raftka.metadata.broker_configs import (
    FOLLOWER_THROTTLED_RATE,
    LEADER_THROTTLED_RATE,
    broker_value,
)
from raftka.metadata.image import TOPIC, MetadataImage
from raftka.metadata.topic_configs import (
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_REPLICAS,
    throttled_partitions,
)

WINDOWS = 11  # Kafka's replication.quota.window.num
WINDOW_MS = 1000  # Kafka's replication.quota.window.size.seconds


@dataclass(frozen=True, slots=True)
class Side:
    name: str  # "leader" or "follower"
    replicas_key: str
    rate_key: str


LEADER = Side("leader", LEADER_THROTTLED_REPLICAS, LEADER_THROTTLED_RATE)
FOLLOWER = Side("follower", FOLLOWER_THROTTLED_REPLICAS, FOLLOWER_THROTTLED_RATE)


class ReplicationQuota:
    """One side's throttle on one broker."""

    def __init__(
        self,
        side: Side,
        local_id: int,
        image: Callable[[], MetadataImage],
        clock_ms: Callable[[], float] = lambda: time.monotonic() * 1000,
    ) -> None:
        self.side = side
        self._local_id = local_id
        self._image = image
        self._clock_ms = clock_ms
        self._rate = SampledRate(WINDOWS, WINDOW_MS, clock_ms())
        self._configs_seen: object = None
        self._throttled: dict[str, frozenset[int] | None] = {}  # topic -> its partitions; None: all
        self._bound = 0
        self.recorded_bytes = 0  # bytes of throttled partitions replicated (metrics)
        self.held_back = 0  # times a throttled partition was passed over while over the bound (metrics)

    def throttles_any(self) -> bool:
        """Some topic names replicas of this broker for this side: a fast way past the rest."""
        self._refresh()
        return bool(self._throttled)

    def is_throttled(self, topic: str, partition: int) -> bool:
        self._refresh()
        if topic not in self._throttled:
            return False
        partitions = self._throttled[topic]
        return partitions is None or partition in partitions

    def exceeded(self) -> bool:
        """Over the bound (Kafka's ``isQuotaExceeded``): throttled replicas catching up wait."""
        self._refresh()
        return self._rate.rate(self._clock_ms()) > self._bound

    def record(self, size: int) -> None:
        self._rate.record(size, self._clock_ms())
        self.recorded_bytes += size

    def hold_back(self, topic: str, partition: int, in_sync: bool) -> bool:
        """Whether a replica's data waits: throttled, catching up, and the quota is over."""
        held = not in_sync and self.is_throttled(topic, partition) and self.exceeded()
        self.held_back += held
        return held

    def _refresh(self) -> None:
        image = self._image()
        if image.configs is self._configs_seen:
            return
        self._configs_seen = image.configs
        self._bound = int(broker_value(image, self._local_id, self.side.rate_key))
        self._throttled = {}
        for (resource_type, name), values in image.configs.items():
            value = values.get(self.side.replicas_key) if resource_type == TOPIC else None
            if value:
                partitions = throttled_partitions(value, self._local_id)
                if partitions is None or partitions:
                    self._throttled[name] = partitions
