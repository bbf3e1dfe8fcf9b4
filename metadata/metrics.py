"""A controller's Prometheus metrics, named after KRaft's ``kafka.controller`` MBeans.

As in KRaft (KIP-835's note: every controller reports them, so a standby that lags
shows it), the counts come from this controller's committed image, read at scrape
time and computed once per image (the image is immutable). Only the active controller
reports ``ActiveControllerCount`` 1, so its sum over the controllers is 1 in a healthy
cluster.

Event queue time: KRaft's controller runs every event on one thread, and
``EventQueueTimeMs`` is how long an event waits for it. Ours runs every request on the
node's asyncio loop, and grpc hands a request to it only once the loop is free, so a
request's wait is invisible from inside its handler: a probe stands in for it, an
event due every ``EVENT_QUEUE_PROBE_INTERVAL_S`` whose lateness is what any request
arriving then would have waited.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from raftka.metadata.controller import QuorumController
from raftka.metadata.image import NO_LEADER, MetadataImage
from raftka.metadata.state_machine import MetadataStateMachine
from raftka.raft.metrics import Histogram, gauge, histogram_family, now_s

CONTROLLER = "kafka_controller_kafkacontroller_"
EVENT_MANAGER = "kafka_controller_controllereventmanager_"
EVENT_QUEUE_PROBE_INTERVAL_S = 0.25


@dataclass(frozen=True, slots=True)
class ImageCounts:
    offline_partitions: int
    preferred_replica_imbalance: int
    fenced_brokers: int
    active_brokers: int
    topics: int
    partitions: int


def image_counts(image: MetadataImage) -> ImageCounts:
    """One pass over the partitions. Offline as the brokers tell clients: no leader, or a
    leader that is fenced or gone; imbalanced as Kafka: led by other than its first replica."""
    offline = imbalanced = partitions = 0
    brokers = image.brokers
    for topic in image.topics_by_id.values():
        partitions += len(topic.partitions)
        for state in topic.partitions.values():
            leader = brokers.get(state.leader) if state.leader != NO_LEADER else None
            if leader is None or leader.fenced:
                offline += 1
            if state.leader != state.replicas[0]:
                imbalanced += 1
    fenced = sum(1 for broker in brokers.values() if broker.fenced)
    return ImageCounts(
        offline, imbalanced, fenced, len(brokers) - fenced, len(image.topics_by_id), partitions
    )


class EventQueueProbe:
    """See the module doc."""

    def __init__(self, interval_s: float = EVENT_QUEUE_PROBE_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.wait = Histogram()

    async def run(self) -> None:
        while True:
            due = now_s() + self.interval_s
            await asyncio.sleep(self.interval_s)
            self.wait.observe(max(0.0, now_s() - due) * 1000)


class ControllerCollector(Collector):
    def __init__(
        self, controller: QuorumController, state_machine: MetadataStateMachine, probe: EventQueueProbe
    ) -> None:
        self._controller = controller
        self._state_machine = state_machine
        self._probe = probe
        self._counted: tuple[MetadataImage, ImageCounts] | None = None

    def _counts(self) -> ImageCounts:
        image = self._state_machine.image
        if self._counted is None or self._counted[0] is not image:
            self._counted = (image, image_counts(image))
        return self._counted[1]

    def collect(self) -> Iterator[Metric]:
        counts = self._counts()
        yield gauge(
            CONTROLLER + "activecontrollercount",
            "1 on the active controller, else 0.",
            1 if self._controller.is_active else 0,
        )
        yield gauge(
            CONTROLLER + "offlinepartitionscount",
            "Partitions without a leader, or led by a fenced or unregistered broker.",
            counts.offline_partitions,
        )
        yield gauge(
            CONTROLLER + "preferredreplicaimbalancecount",
            "Partitions not led by their preferred (first) replica.",
            counts.preferred_replica_imbalance,
        )
        yield gauge(
            CONTROLLER + "fencedbrokercount", "Registered brokers that are fenced.", counts.fenced_brokers
        )
        yield gauge(
            CONTROLLER + "activebrokercount", "Registered brokers that are not fenced.", counts.active_brokers
        )
        yield gauge(CONTROLLER + "globaltopiccount", "Topics in the cluster.", counts.topics)
        yield gauge(CONTROLLER + "globalpartitioncount", "Partitions in the cluster.", counts.partitions)
        yield histogram_family(
            EVENT_MANAGER + "eventqueuetimems",
            "Milliseconds an event due on the controller's event loop waited past its time.",
            [((), self._probe.wait)],
        )
