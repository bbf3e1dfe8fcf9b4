"""The simulation's clients: an acks=all producer and a consumer, over the simulated network.

Both find the partition's leader in the metadata of a broker they pick (which may be
stale, as a real client's is) and retry on any error or silence. Every value the producer
sends is new (a retry sends a new one: this producer is not idempotent, so a retry may
add a second copy, which is allowed; what the checks forbid is losing an acknowledged
one). The idempotent producer (one batch in flight, a producer id of its own) instead sends a
failed batch again as it was, same values, same sequence: the leader must then answer with
the offsets the batch already has rather than append it twice. The producers report each
acknowledged record, the consumer each record it reads, to the invariants.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from raftka.broker.replica.manager import TIMEOUT_MS_MAX
from raftka.records.codec import BatchBuilder, read_records
from raftka.v1 import broker_pb2, controller_pb2
from tests.datasim.broker import TOPIC, SimBroker
from tests.datasim.invariants import IDEMPOTENT_PREFIX, Invariants
from tests.datasim.network import Network
from tests.simulation.scheduler import Scheduler

E = controller_pb2.ErrorCode
PRODUCER, CONSUMER, IDEMPOTENT_PRODUCER = 100, 101, 102
PRODUCER_ID = 4000  # the idempotent producer's, as InitProducerId would hand it out
T0_MS = 1_700_000_000_000  # every record's timestamp: nothing in a run reads the wall clock
CLIENT_TIMEOUT_MS = 500
IN_FLIGHT_MAX = 2


def _leader(brokers: dict[int, SimBroker], rng: random.Random) -> SimBroker | None:
    up = [b for b in brokers.values() if b.process is not None]
    if not up:
        return None
    image = rng.choice(up).process.replicas.image  # type: ignore[union-attr]
    topic = image.topic(TOPIC)
    state = None if topic is None else topic.partitions.get(0)
    return None if state is None or state.leader < 0 else brokers[state.leader]


class Producer:
    def __init__(
        self,
        brokers: dict[int, SimBroker],
        scheduler: Scheduler,
        network: Network,
        rng: random.Random,
        invariants: Invariants,
        trace: Callable[[str], None],
        idempotent: bool,
    ) -> None:
        self.brokers, self.scheduler, self.network, self.rng = brokers, scheduler, network, rng
        self.invariants = invariants
        self.trace = trace
        self.idempotent = idempotent
        self.node = IDEMPOTENT_PRODUCER if idempotent else PRODUCER
        self.prefix = IDEMPOTENT_PREFIX if idempotent else b"v"
        self.next_value = 0
        self.sequence = 0  # the idempotent producer's next batch's
        self.unacked: list[bytes] = []  # its batch, until acknowledged
        self.in_flight: dict[int, list[bytes]] = {}
        self.calls = 0
        self.running = True
        self.acked = 0

    def start(self) -> None:
        self.network.incarnations[self.node] = 1
        self.scheduler.after(1, self._tick)

    def _tick(self) -> None:
        if self.running and len(self.in_flight) < (1 if self.idempotent else IN_FLIGHT_MAX):
            self._send()
        self.scheduler.after(self.rng.randint(5, 40), self._tick)

    def _send(self) -> None:
        leader = _leader(self.brokers, self.rng)
        if leader is None:
            return
        if not self.idempotent:
            values = [self._value() for _ in range(self.rng.randint(1, 3))]
            builder = BatchBuilder()
        else:
            self.unacked = self.unacked or [self._value() for _ in range(self.rng.randint(1, 3))]
            values = self.unacked
            builder = BatchBuilder(producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=self.sequence)
        for value in values:
            assert builder.append(T0_MS, None, value)
        request = broker_pb2.ProduceRequest(acks=-1, timeout_ms=TIMEOUT_MS_MAX)
        request.topics.add(name=TOPIC).partitions.add(partition=0, records=bytes(builder.build()))
        self.calls += 1
        call = self.calls
        self.in_flight[call] = values
        self.network.send(self.node, leader.id, self._at_broker, leader, request, call)
        self.scheduler.after(CLIENT_TIMEOUT_MS, self.in_flight.pop, call, None)

    def _value(self) -> bytes:
        self.next_value += 1
        return b"%s%d" % (self.prefix, self.next_value)

    def _at_broker(self, broker: SimBroker, request: broker_pb2.ProduceRequest, call: int) -> None:
        broker.serve_produce(
            request, lambda response: self.network.send(broker.id, self.node, self._answered, response, call)
        )

    def _answered(self, response: broker_pb2.ProduceResponse, call: int) -> None:
        values = self.in_flight.pop(call, None)
        if values is None or response.status.error != E.NONE:
            return
        result = response.topics[0].partitions[0]
        if result.error != E.NONE:
            return
        self.acked += len(values)
        if self.idempotent:
            self.sequence += len(values)
            self.unacked = []
        self.trace(
            f"producer: {values[0]!r}.. acknowledged at {result.base_offset}..{result.base_offset + len(values) - 1}"
        )
        for i, value in enumerate(values):
            self.invariants.acknowledged(result.base_offset + i, value)


class Consumer:
    def __init__(
        self,
        brokers: dict[int, SimBroker],
        scheduler: Scheduler,
        network: Network,
        rng: random.Random,
        invariants: Invariants,
        trace: Callable[[str], None],
    ) -> None:
        self.brokers, self.scheduler, self.network, self.rng = brokers, scheduler, network, rng
        self.invariants = invariants
        self.trace = trace
        self.position = 0
        self.calls = 0

    def start(self) -> None:
        self.network.incarnations[CONSUMER] = 1
        self.scheduler.after(1, self._tick)

    def _tick(self) -> None:
        leader = _leader(self.brokers, self.rng)
        if leader is not None:
            request = broker_pb2.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20)
            request.topics.add(name=TOPIC).partitions.add(
                partition=0, fetch_offset=self.position, partition_max_bytes=1 << 20
            )
            self.calls += 1
            self.network.send(
                CONSUMER, leader.id, self._at_broker, leader, request, self.calls, self.position
            )
        self.scheduler.after(self.rng.randint(10, 50), self._tick)

    def _at_broker(
        self, broker: SimBroker, request: broker_pb2.FetchRequest, call: int, position: int
    ) -> None:
        broker.serve_client_fetch(
            request,
            lambda response: self.network.send(broker.id, CONSUMER, self._answered, response, position),
        )

    def _answered(self, response: broker_pb2.FetchResponse, position: int) -> None:
        if response.status.error != E.NONE or position != self.position:
            return
        result = response.topics[0].partitions[0]
        if result.error != E.NONE:
            return
        for record in read_records(result.records):
            if record.offset >= self.position:
                self.invariants.consumed(record.offset, record.value)
                self.position = record.offset + 1
        if self.position != position:
            self.trace(f"consumer: read {position}..{self.position - 1} (hw {result.high_watermark})")
