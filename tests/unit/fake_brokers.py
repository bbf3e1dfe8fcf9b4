"""Brokers that speak the data protocol from logs in memory, for client tests: the test
decides which broker leads each partition (and at which epoch), scripts failed answers,
and reads back what each broker was asked and what each log holds.

Only what producers and consumers use is served (Metadata, Produce, Fetch,
ListOffsets), with the real broker's error codes for the cases these tests drive. Logs
are per partition, shared by the brokers: a leader change moves no data, which is what
a client sees of a committed log.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from raftka.v1 import broker_pb2 as pb
from raftka.v1 import controller_pb2

from broker.data_service import wire_produce_answer
from records.batch import assign, iter_batches
from wire import frames
from wire.server import FrameServer, Handler

E = controller_pb2.ErrorCode
TOPIC = "t"
TOPIC_ID = b"\x01" * 16


@dataclass
class FakeLog:
    batches: list[bytes] = field(default_factory=list)  # offsets assigned
    end: int = 0

    def append(self, payload: bytes) -> int:
        base = self.end
        data = bytearray(payload)
        for position, header in list(iter_batches(data)):
            assign(data, position, self.end, 0)
            self.end += header.record_count
        self.batches.append(bytes(data))
        return base

    def read_from(self, offset: int) -> bytes:
        return b"".join(batch for batch in self.batches if _last_offset(batch) >= offset)


def _last_offset(batch: bytes) -> int:
    return max(header.last_offset for _, header in iter_batches(batch))


class FakeCluster:
    def __init__(self, broker_ids: tuple[int, ...] = (1, 2), partitions: int = 2) -> None:
        self.broker_ids = broker_ids
        self.leaders = {p: (broker_ids[0], 0) for p in range(partitions)}  # partition -> (leader, epoch)
        self.logs = {p: FakeLog() for p in range(partitions)}
        self.failures: dict[int, collections.deque[int]] = collections.defaultdict(collections.deque)  # produce, by partition
        self.produced: list[tuple[int, int]] = []  # (broker, partition) of every produce a broker was asked
        self.fetched: list[tuple[int, int]] = []  # likewise for fetches
        self.addresses: dict[int, str] = {}
        self._servers: list[FrameServer] = []

    async def start(self) -> FakeCluster:
        for broker_id in self.broker_ids:
            server = FrameServer(self._handlers(broker_id))
            port = await server.start("127.0.0.1", 0)
            self.addresses[broker_id] = f"127.0.0.1:{port}"
            self._servers.append(server)
        return self

    async def close(self) -> None:
        for server in self._servers:
            await server.close()

    @property
    def bootstrap(self) -> str:
        return ",".join(self.addresses.values())

    def move_leader(self, partition: int, to: int) -> None:
        self.leaders[partition] = (to, self.leaders[partition][1] + 1)

    def fail_next_produces(self, partition: int, code: int, times: int = 1) -> None:
        self.failures[partition].extend([code] * times)

    def _handlers(self, broker_id: int) -> dict[int, Handler]:
        broker = _FakeBroker(self, broker_id)
        return {
            frames.METADATA.key: broker.metadata,
            frames.PRODUCE.key: broker.produce,
            frames.FETCH.key: broker.fetch,
            frames.LIST_OFFSETS.key: broker.list_offsets,
        }


class _FakeBroker:
    def __init__(self, cluster: FakeCluster, broker_id: int) -> None:
        self.cluster = cluster
        self.broker_id = broker_id

    async def metadata(self, request: pb.MetadataRequest) -> pb.MetadataResponse:
        response = pb.MetadataResponse(cluster_id="fake")
        for other, address in self.cluster.addresses.items():
            host, _, port = address.rpartition(":")
            response.brokers.add(broker_id=other, host=host, port=int(port))
        topic = response.topics.add(name=TOPIC, topic_id=TOPIC_ID)
        replicas = self.cluster.broker_ids
        for partition, (leader, epoch) in self.cluster.leaders.items():
            topic.partitions.add(partition=partition, leader=leader, leader_epoch=epoch, replicas=replicas, isr=replicas)
        return response

    async def produce(self, request: pb.ProduceRequest) -> pb.ProduceResponse | None:
        response = pb.ProduceResponse()
        for topic in request.topics:
            answer = response.topics.add(name=topic.name)
            for data in topic.partitions:
                result = answer.partitions.add(partition=data.partition, base_offset=-1, log_append_time_ms=-1)
                self.cluster.produced.append((self.broker_id, data.partition))
                if self._refused(data.partition, result):
                    continue
                failures = self.cluster.failures[data.partition]
                if failures:
                    result.error = failures.popleft()
                    result.message = "scripted by the test"
                    continue
                result.base_offset = self.cluster.logs[data.partition].append(data.records)
        return wire_produce_answer(request, response)

    async def fetch(self, request: pb.FetchRequest) -> pb.FetchResponse:
        response = pb.FetchResponse()
        for topic in request.topics:
            answer = response.topics.add(name=topic.name, topic_id=TOPIC_ID)
            for data in topic.partitions:
                result = answer.partitions.add(partition=data.partition)
                self.cluster.fetched.append((self.broker_id, data.partition))
                if self._refused(data.partition, result):
                    continue
                log = self.cluster.logs[data.partition]
                result.high_watermark = result.log_end_offset = log.end
                result.records = log.read_from(data.fetch_offset)
        return response

    async def list_offsets(self, request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
        response = pb.ListOffsetsResponse()
        for topic in request.topics:
            answer = response.topics.add(name=topic.name)
            for data in topic.partitions:
                result = answer.partitions.add(partition=data.partition, timestamp=-1)
                if not self._refused(data.partition, result):
                    result.offset = 0 if data.timestamp == -2 else self.cluster.logs[data.partition].end
        return response

    def _refused(self, partition: int, result) -> bool:  # noqa: ANN001: any per-partition result
        leader, epoch = self.cluster.leaders[partition]
        if leader == self.broker_id:
            return False
        result.error = E.NOT_LEADER_OR_FOLLOWER
        result.message = f"broker {self.broker_id} does not lead {TOPIC}-{partition}"
        result.leader_id, result.leader_epoch = leader, epoch
        return True
