"""The partitions this broker tells the controller it cannot serve, in every heartbeat.

A partition whose log failed here is offline on this broker alone: the replica manager
took it offline (its metadata could not be applied, ``raftka.broker.replica.manager``) or
its fetcher stopped on an error writing its log (``raftka.broker.replica.fetcher``).
Listed in the heartbeat (``BrokerHeartbeatRequest.offline_replicas``, the whole set every
time), the controller moves the partition's leadership and ISR membership off this
broker and elects it there for nothing until it is no longer listed
(``raftka.metadata.offline_replicas``), as Kafka's controller does with a failed log
directory. Once the partition comes back (a retry succeeded on its next change, or a
restart), it is no longer listed and catches up as any follower.

At most ``OFFLINE_REPLICAS_MAX`` are listed, the same ones every time (sorted); a broker
with more has lost more than a few logs, and the rest stay as they were before reports
existed: offline here, moved when their leader epoch next changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from itertools import groupby

import structlog

from raftka.metadata.validation import OFFLINE_REPLICAS_MAX
from raftka.node.logs import RateLimitedLog
from raftka.v1 import controller_pb2

log = structlog.get_logger("raftka.broker.offline_report")
OVER_BOUND_LOG_INTERVAL_S = 60.0


class OfflineReport:
    """The heartbeat's list, from ``offline``: the (topic id, partition) of every partition
    offline on this broker (or wiped: ``raftka.broker.wiped_replicas``)."""

    def __init__(
        self,
        offline: Callable[[], Iterable[tuple[bytes, int]]],
        over_bound: str = "more partitions offline than a heartbeat may report; the rest stay unreported",
    ) -> None:
        """``over_bound``: the warning when more are listed than a heartbeat carries."""
        self._offline = offline
        self._over_bound_message = over_bound
        self._over_bound = RateLimitedLog(log, OVER_BOUND_LOG_INTERVAL_S)

    def __call__(self) -> list[controller_pb2.OfflineTopicReplicas]:
        listed = sorted(set(self._offline()))
        if len(listed) > OFFLINE_REPLICAS_MAX:
            self._over_bound.log(
                logging.WARNING,
                self._over_bound_message,
                listed=len(listed),
                reported=OFFLINE_REPLICAS_MAX,
            )
            listed = listed[:OFFLINE_REPLICAS_MAX]
        return [
            controller_pb2.OfflineTopicReplicas(topic_id=topic_id, partitions=[p for _, p in partitions])
            for topic_id, partitions in groupby(listed, key=lambda replica: replica[0])
        ]
