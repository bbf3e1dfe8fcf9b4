"""Brokers that speak the data protocol from logs in memory, for client tests: the test
decides which broker leads each partition (and at which epoch), scripts failed answers,
and reads back what each broker was asked and what each log holds.

Only what producers and consumers use is served (Metadata, Produce, Fetch,
ListOffsets, InitProducerId), with the real broker's error codes for the cases these
tests drive, and the real broker's producer state rules (``ProducerState``) for
idempotent batches. Logs are per partition, shared by the brokers: a leader change
moves no data, which is what a client sees of a committed log. Besides refusals, a test
can have a batch written and its answer lost (an error, or the connection closed) and
can hold produce answers back, to see how many batches a producer keeps in flight. A
test can also cut a log (an unclean leader change); a fetch that says which epoch it last
read is answered with the diverging epoch, as the real leader answers it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from dataclasses import dataclass, field

from raftka.broker.data_service import wire_produce_answer
from raftka.broker.log.producer_state import ProducerState, ProducerStateError
from raftka.records.batch import BatchHeader, assign, iter_batches
from raftka.v1 import broker_pb2 as pb
from raftka.v1 import controller_pb2
from raftka.wire import frames
from raftka.wire.server import CloseConnection, FrameServer, Handler

E = controller_pb2.ErrorCode
TOPIC = "t"
TOPIC_ID = b"\x01" * 16


@dataclass
class FakeLog:
    batches: list[bytes] = field(default_factory=list)  # offsets assigned
    end: int = 0
    producers: ProducerState = field(default_factory=ProducerState)

    def append(self, payload: bytes, leader_epoch: int = 0) -> int:
        """The base offset written at, or of the batch a producer's retry repeats;
        ProducerStateError for a batch out of its producer's order."""
        data = bytearray(payload)
        headers = list(iter_batches(data))
        for _, header in headers:
            if header.has_producer_id and (duplicate := self.producers.check(header)) is not None:
                return duplicate.first_offset
        base = self.end
        for position, header in headers:
            assign(data, position, self.end, leader_epoch)
            self.producers.apply(dataclasses.replace(header, base_offset=self.end))
            self.end += header.record_count
        self.batches.append(bytes(data))
        return base

    def headers(self) -> list[BatchHeader]:
        return [header for batch in self.batches for _, header in iter_batches(batch)]

    def read_from(self, offset: int) -> bytes:
        return b"".join(batch for batch in self.batches if _last_offset(batch) >= offset)

    def truncate_to(self, offset: int) -> None:
        """Drop the batches from ``offset`` on (a batch boundary): what an unclean leader
        never had."""
        self.batches = [batch for batch in self.batches if _last_offset(batch) < offset]
        self.end = offset

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(the largest leader epoch at most ``epoch``, where it ends), (-1, -1) if none:
        the real log's answer."""
        found, end = -1, -1
        for header in self.headers():
            if header.partition_leader_epoch > epoch:
                return found, header.base_offset
            found, end = header.partition_leader_epoch, header.next_offset
        return found, end


def _last_offset(batch: bytes) -> int:
    return max(header.last_offset for _, header in iter_batches(batch))


class FakeCluster:
    def __init__(self, broker_ids: tuple[int, ...] = (1, 2), partitions: int = 2) -> None:
        self.broker_ids = broker_ids
        self.leaders = {p: (broker_ids[0], 0) for p in range(partitions)}  # partition -> (leader, epoch)
        self.logs = {p: FakeLog() for p in range(partitions)}
        self.failures: dict[int, collections.deque[int]] = collections.defaultdict(
            collections.deque
        )  # produce, by partition
        self.lost_answers: dict[int, collections.deque[int | None]] = collections.defaultdict(
            collections.deque
        )
        self.held: asyncio.Event | None = None  # produce answers wait for it while set
        self.in_flight: dict[int, int] = collections.Counter()  # produce answers held, by partition
        self.in_flight_max: dict[int, int] = collections.Counter()
        self.producer_ids_given = 0
        self.init_failures: collections.deque[int] = collections.deque()  # InitProducerId answers, in turn
        self.list_offsets_failures: dict[int, collections.deque[int]] = collections.defaultdict(
            collections.deque
        )  # ListOffsets answers, by partition
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

    def fail_next_list_offsets(self, partition: int, code: int, times: int = 1) -> None:
        self.list_offsets_failures[partition].extend([code] * times)

    def lose_next_answers(self, partition: int, code: int | None, times: int = 1) -> None:
        """Write the next produces' batches, then answer ``code`` (None: close the connection)."""
        self.lost_answers[partition].extend([code] * times)

    def hold_answers(self) -> asyncio.Event:
        """Produce answers wait until the returned event is set."""
        self.held = asyncio.Event()
        return self.held

    def _handlers(self, broker_id: int) -> dict[int, Handler]:
        broker = _FakeBroker(self, broker_id)
        return {
            frames.METADATA.key: broker.metadata,
            frames.PRODUCE.key: broker.produce,
            frames.FETCH.key: broker.fetch,
            frames.LIST_OFFSETS.key: broker.list_offsets,
            frames.INIT_PRODUCER_ID.key: broker.init_producer_id,
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
            topic.partitions.add(
                partition=partition, leader=leader, leader_epoch=epoch, replicas=replicas, isr=replicas
            )
        return response

    async def produce(self, request: pb.ProduceRequest) -> pb.ProduceResponse | None:
        cluster = self.cluster
        response = pb.ProduceResponse()
        lose: list[int | None] = []
        partitions = [data.partition for topic in request.topics for data in topic.partitions]
        for topic in request.topics:
            answer = response.topics.add(name=topic.name)
            for data in topic.partitions:
                result = answer.partitions.add(
                    partition=data.partition, base_offset=-1, log_append_time_ms=-1
                )
                cluster.produced.append((self.broker_id, data.partition))
                if self._refused(data.partition, result):
                    continue
                failures = cluster.failures[data.partition]
                if failures:
                    result.error = failures.popleft()
                    result.message = "scripted by the test"
                    continue
                try:
                    result.base_offset = cluster.logs[data.partition].append(
                        data.records, cluster.leaders[data.partition][1]
                    )
                except ProducerStateError as e:
                    result.error, result.message = e.code, e.message
                    continue
                if cluster.lost_answers[data.partition]:
                    lose.append(code := cluster.lost_answers[data.partition].popleft())
                    if code is not None:
                        result.error, result.message, result.base_offset = (
                            code,
                            "written, answer scripted by the test",
                            -1,
                        )
        if None in lose:
            raise CloseConnection("the test lost this answer")
        if cluster.held is not None and not cluster.held.is_set():
            for partition in partitions:
                cluster.in_flight[partition] += 1
                cluster.in_flight_max[partition] = max(
                    cluster.in_flight_max[partition], cluster.in_flight[partition]
                )
            try:
                await cluster.held.wait()
            finally:
                for partition in partitions:
                    cluster.in_flight[partition] -= 1
        return wire_produce_answer(request, response)

    async def init_producer_id(self, request: pb.InitProducerIdRequest) -> pb.InitProducerIdResponse:
        if self.cluster.init_failures:
            response = pb.InitProducerIdResponse(producer_id=-1, producer_epoch=-1)
            response.status.error, response.status.message = (
                self.cluster.init_failures.popleft(),
                "scripted by the test",
            )
            return response
        self.cluster.producer_ids_given += 1
        return pb.InitProducerIdResponse(producer_id=999 + self.cluster.producer_ids_given, producer_epoch=0)

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
                if data.HasField("last_fetched_epoch"):
                    epoch, end = log.end_offset_for_epoch(data.last_fetched_epoch)
                    if epoch != data.last_fetched_epoch or data.fetch_offset > end:
                        result.diverging_epoch.epoch, result.diverging_epoch.end_offset = epoch, end
                        continue
                result.records = log.read_from(data.fetch_offset)
        return response

    async def list_offsets(self, request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
        response = pb.ListOffsetsResponse()
        for topic in request.topics:
            answer = response.topics.add(name=topic.name)
            for data in topic.partitions:
                result = answer.partitions.add(partition=data.partition, timestamp=-1)
                failures = self.cluster.list_offsets_failures[data.partition]
                if self._refused(data.partition, result):
                    continue
                if failures:
                    result.error = failures.popleft()
                    continue
                result.offset = 0 if data.timestamp == -2 else self.cluster.logs[data.partition].end
        return response

    def _refused(self, partition: int, result) -> bool:  # noqa: ANN001 - any per-partition result
        leader, epoch = self.cluster.leaders[partition]
        if leader == self.broker_id:
            return False
        result.error = E.NOT_LEADER_OR_FOLLOWER
        result.message = f"broker {self.broker_id} does not lead {TOPIC}-{partition}"
        result.leader_id, result.leader_epoch = leader, epoch
        return True
