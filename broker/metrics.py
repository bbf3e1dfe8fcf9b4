"""A broker's Prometheus metrics, named after Kafka's ``BrokerTopicMetrics``,
``ReplicaManager`` and ``RequestMetrics`` MBeans (docs/metrics.md lists them).

Counts of what the broker holds (partitions led, under-replicated) are read from the
replica manager at scrape time. Traffic and latency are counted at the point of work,
once per request or per partition append, never per record: bytes and records in when
a leader appends a producer's batches (``ReplicaManager``), bytes and records out when
a consumer's fetch is answered (here, two header fields read per batch), and each Produce and
Fetch timed from the handler's start to its answer, long-poll and acks=all waits
included, as Kafka's ``TotalTimeMs``. All of it on the loop thread, without locks.

Follower traffic is not counted as bytes in or out (Kafka counts it apart, as
replication), but follower fetches are timed (``request="FetchFollower"``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from raftka.raft.metrics import Histogram, counter, gauge, histogram_family, now_s
from raftka.records.batch import count_records
from raftka.v1 import broker_pb2

if TYPE_CHECKING:
    from raftka.broker.replica.fetcher import ReplicaFetchers
    from raftka.broker.replica.isr import IsrChanges
    from raftka.broker.replica.manager import ReplicaManager

Pb = broker_pb2
TOPICS = "kafka_server_brokertopicmetrics_"
REPLICAS = "kafka_server_replicamanager_"
FETCHERS = "kafka_server_replicafetchermanager_"
REQUEST_TIME = "kafka_network_requestmetrics_totaltimems"


class BrokerTopicMetrics:
    """Traffic and request times, accumulated where the work happens."""

    def __init__(self) -> None:
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0
        self.messages_out = 0
        self.request_time = {
            "Produce": Histogram(),
            "FetchConsumer": Histogram(),
            "FetchFollower": Histogram(),
        }

    def appended(self, size_bytes: int, records: int) -> None:
        self.bytes_in += size_bytes
        self.messages_in += records

    def sent(self, response: Pb.FetchResponse) -> None:
        """A consumer's fetch answered: the record batches it carries."""
        for topic in response.topics:
            for partition in topic.partitions:
                records = partition.records
                if records:
                    self.bytes_out += len(records)
                    self.messages_out += count_records(records)


def timed_produce(
    produce: Callable[[Pb.ProduceRequest], Awaitable[Pb.ProduceResponse]], metrics: BrokerTopicMetrics
) -> Callable[[Pb.ProduceRequest], Awaitable[Pb.ProduceResponse]]:
    histogram = metrics.request_time["Produce"]

    async def handler(request: Pb.ProduceRequest) -> Pb.ProduceResponse:
        started = now_s()
        try:
            return await produce(request)
        finally:
            histogram.observe_since(started)

    return handler


def timed_fetch(
    fetch: Callable[[Pb.FetchRequest], Awaitable[Pb.FetchResponse]], metrics: BrokerTopicMetrics
) -> Callable[[Pb.FetchRequest], Awaitable[Pb.FetchResponse]]:
    async def handler(request: Pb.FetchRequest) -> Pb.FetchResponse:
        started = now_s()
        response = await fetch(request)
        if request.replica_id >= 0:
            metrics.request_time["FetchFollower"].observe_since(started)
        else:
            metrics.request_time["FetchConsumer"].observe_since(started)
            metrics.sent(response)
        return response

    return handler


class BrokerCollector(Collector):
    def __init__(self, replicas: ReplicaManager, isr_changes: IsrChanges, fetchers: ReplicaFetchers) -> None:
        self._replicas = replicas
        self._isr_changes = isr_changes
        self._fetchers = fetchers

    def collect(self) -> Iterator[Metric]:
        led = under_replicated = reassigning = partitions = 0
        topics = self._replicas.image.topics_by_id
        for partition in self._replicas.partitions():
            partitions += 1
            if partition.is_leader:
                led += 1
                topic = topics.get(partition.topic_id)
                state = None if topic is None else topic.partitions.get(partition.partition)
                removing = 0 if state is None else len(state.removing_replicas)
                # as Kafka: against the replicas a reassignment keeps (those it removes do not count)
                under_replicated += len(partition.isr) < len(partition.replicas) - removing
                reassigning += state is not None and state.reassigning
        traffic = self._replicas.metrics
        yield counter(
            TOPICS + "bytesinpersec",
            "Bytes producers appended to partitions this broker leads.",
            traffic.bytes_in,
        )
        yield counter(
            TOPICS + "messagesinpersec",
            "Records producers appended to partitions this broker leads.",
            traffic.messages_in,
        )
        yield counter(TOPICS + "bytesoutpersec", "Record batch bytes sent to consumers.", traffic.bytes_out)
        yield counter(TOPICS + "messagesoutpersec", "Records sent to consumers.", traffic.messages_out)
        yield gauge(
            REPLICAS + "underreplicatedpartitions",
            "Partitions this broker leads whose ISR is smaller than their replica set.",
            under_replicated,
        )
        yield gauge(
            REPLICAS + "reassigningpartitions",
            "Partitions this broker leads with a reassignment in progress (KIP-455).",
            reassigning,
        )
        yield gauge(REPLICAS + "leadercount", "Partitions this broker leads.", led)
        yield gauge(REPLICAS + "partitioncount", "Partitions this broker holds a replica of.", partitions)
        yield gauge(
            REPLICAS + "offlinereplicacount",
            "Partitions offline on this broker: applying their metadata or writing their log failed (the broker logs why).",
            len(self._replicas.offline()),
        )
        yield gauge(
            FETCHERS + "failedpartitionscount",
            "Partitions this broker follows that stopped replicating on an error writing their log.",
            len(self._fetchers.failed()),
        )
        for quota in (self._replicas.leader_quota, self._fetchers.quota):
            if quota is None:
                continue
            side = "kafka_server_" + quota.side.name + "replication_"
            yield counter(
                side + "byterate",
                f"Bytes of throttled replicas this broker replicated as {quota.side.name} "
                f"(counted against {quota.side.rate_key}).",
                quota.recorded_bytes,
            )
            yield counter(
                side + "heldback",
                f"Times this broker, as {quota.side.name}, passed over a throttled partition of a "
                "catching-up replica while its replication quota was over.",
                quota.held_back,
            )
        yield counter(
            REPLICAS + "isrshrinkspersec",
            "ISR shrinks the controller accepted from this broker.",
            self._isr_changes.shrinks,
        )
        yield counter(
            REPLICAS + "isrexpandspersec",
            "ISR expansions the controller accepted from this broker.",
            self._isr_changes.expands,
        )
        yield histogram_family(
            REQUEST_TIME,
            "Milliseconds from a Produce or Fetch request's start to its answer (waits included).",
            [((request,), histogram) for request, histogram in traffic.request_time.items()],
            labels=("request",),
        )
