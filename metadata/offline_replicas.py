"""Partitions a broker reports offline: moved off it at once, never elected back while reported.

A partition goes offline on one broker when its log fails there
(``raftka.broker.replica.manager``: its metadata cannot be applied; ``fetcher``: its log
cannot be written). Left at that, a partition the broker led would stay unavailable until
its next change although healthy replicas exist, and a follower would stay in the ISR.
Kafka's brokers report a failed log directory in their heartbeat (KIP-858's
``OfflineLogDirs``) and the controller moves every partition on it as it does a fenced
broker's. raftka isolates failures per partition, so its brokers list partitions
(``BrokerHeartbeatRequest.offline_replicas``), and for each one the controller:

- takes the broker out of the ISR, but as its last member (which stays, as when fencing:
  the one replica known to hold every committed record), and, if it led, elects the first
  other ISR member in replica order that is unfenced and does not report the partition
  offline itself, else none, in a new leader epoch: one PartitionChangeRecord per
  partition, through ``elections.remove_broker``, in steps of at most
  ``raft.append_max_records`` as fencing is;
- elects it there for nothing while it reports it: not when it is unfenced, not as the
  preferred leader, not when another broker is fenced (``may_lead``);
- once it stops reporting it (the broker's retry succeeded: on the partition's next
  change, or a restart), lets it catch up as a follower and rejoin the ISR through the
  leader's AlterPartition, as any follower; a partition left without a leader whose ISR
  names it elects it then, as it would on its unfencing.

Why the heartbeat, not an RPC of its own: the report is the broker's whole current set,
sent every heartbeat, so a lost one is simply sent again, and the active controller keeps
only the last one per broker, in memory, as it keeps sessions: a new controller learns
each broker's from its next heartbeat, and every heartbeat brings the partitions back in
line with it (what the report did to them is in the log). The report comes with the
identity a heartbeat proves (broker certificate, current broker epoch), is bounded
(``validation.OFFLINE_REPLICAS_MAX``, with the other request bounds), and is read against the image:
topic ids it does not know (deleted since) and partitions the broker does not host are
ignored.

Between a new controller's claim and a broker's first heartbeat to it, the controller
does not know that broker's report; the partitions it reported are out of their ISR by
then (in the log), so only one it is the last ISR member of could be elected, by a
preferred election in that window, and the next heartbeat moves it off again.
"""

from __future__ import annotations

from collections.abc import Iterable

from raftka.metadata import elections
from raftka.metadata.image import MetadataImage
from raftka.metadata.plan import MetadataRecord
from raftka.v1 import controller_pb2

Replica = tuple[bytes, int]  # (topic id, partition)


def reported(image: MetadataImage, request: controller_pb2.BrokerHeartbeatRequest) -> frozenset[Replica]:
    """The partitions of the heartbeat's report that exist and that its broker hosts."""
    return hosted(image, request.broker_id, request.offline_replicas)


def hosted(
    image: MetadataImage, broker_id: int, listed: Iterable[controller_pb2.OfflineTopicReplicas]
) -> frozenset[Replica]:
    """The partitions ``listed`` that exist and that ``broker_id`` hosts."""
    found: set[Replica] = set()
    for topic in listed:
        image_topic = image.topics_by_id.get(topic.topic_id)
        if image_topic is None:
            continue
        for partition in topic.partitions:
            state = image_topic.partitions.get(partition)
            if state is not None and broker_id in state.replicas:
                found.add((topic.topic_id, partition))
    return frozenset(found)


class OfflineReplicas:
    """The last report heard from each broker: kept by the active controller, in memory."""

    def __init__(self) -> None:
        self._reports: dict[int, frozenset[Replica]] = {}  # bounded by the registrations

    def hear(
        self, image: MetadataImage, request: controller_pb2.BrokerHeartbeatRequest
    ) -> frozenset[Replica]:
        """Keep (and return) the report of a heartbeat the controller accepted, planned on ``image``."""
        offline = self._reports[request.broker_id] = reported(image, request)
        return offline

    def last_heard(self, broker_id: int) -> frozenset[Replica] | None:
        """None before this controller heard from the broker (since its claim or the
        broker's registration)."""
        return self._reports.get(broker_id)

    def forget(self, broker_id: int) -> None:
        self._reports.pop(broker_id, None)

    def clear(self) -> None:
        self._reports.clear()

    def may_lead(self, broker_id: int, topic_id: bytes, partition: int) -> bool:
        """``broker_id`` does not report the partition offline (``elections.MayLead``)."""
        replicas = self._reports.get(broker_id)
        return replicas is None or (topic_id, partition) not in replicas


def reconcile(
    image: MetadataImage,
    broker_id: int,
    offline: frozenset[Replica],
    before: frozenset[Replica] | None,
    offline_elsewhere: elections.MayLead,
    limit: int,
) -> list[MetadataRecord]:
    """One step of bringing an unfenced broker's partitions in line with its report
    ``offline`` (``before``: the report heard last, None if none): at most ``limit`` of
    them moved off it, then those it brought back that wait for it without a leader
    elected. ``offline_elsewhere``: the other brokers' reports."""
    records = elections.remove_broker(
        image, broker_id, limit, among=sorted(offline), may_lead=offline_elsewhere
    )
    if len(records) == limit:
        return records  # the rest at the next step, planned on the image these make
    back = None if before is None else sorted(before - offline)
    not_offline = lambda b, topic_id, partition: (topic_id, partition) not in offline  # noqa: E731
    return records + elections.restore_broker(image, broker_id, among=back, may_lead=not_offline)
