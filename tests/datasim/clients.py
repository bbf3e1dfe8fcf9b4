"""The simulation's clients: an acks=all producer and a consumer, over the simulated network.

Both find a partition's leader in the metadata of a broker they pick (which may be
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
from raftka.records.codec import BatchBuilder
from raftka.v1 import broker_pb2, controller_pb2
from tests.datasim.broker import T0_MS, TOPIC, SimBroker
from tests.datasim.invariants import IDEMPOTENT_PREFIX, Entry, Invariants, key_of, records_and_end
from tests.datasim.network import Network
from tests.simulation.scheduler import Scheduler

E = controller_pb2.ErrorCode
PRODUCER, CONSUMER, IDEMPOTENT_PRODUCER = 100, 101, 102
PRODUCER_ID = 4000  # the idempotent producer's, as InitProducerId would hand it out
CLIENT_TIMEOUT_MS = 500
IN_FLIGHT_MAX = 2
TOMBSTONE_EVERY = 7  # of the plain producer's records, one in this many deletes its key


def leader_of(brokers: dict[int, SimBroker], rng: random.Random, partition: int) -> SimBroker | None:
    """The partition's leader in the metadata of a broker picked at random (maybe stale)."""
    up = [b for b in brokers.values() if b.process is not None]
    if not up:
        return None
    image = rng.choice(up).process.replicas.image  # type: ignore[union-attr]
    topic = image.topic(TOPIC)
    state = None if topic is None else topic.partitions.get(partition)
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
        partitions: int,
    ) -> None:
        self.brokers, self.scheduler, self.network, self.rng = brokers, scheduler, network, rng
        self.partitions = partitions
        self.invariants = invariants
        self.trace = trace
        self.idempotent = idempotent
        self.node = IDEMPOTENT_PRODUCER if idempotent else PRODUCER
        self.prefix = IDEMPOTENT_PREFIX if idempotent else b"v"
        self.next_value = 0
        self.sequences = [0] * partitions  # the idempotent producer's next batch's, per partition
        self.unacked: tuple[int, list[Entry]] | None = None  # its batch and partition, until acknowledged
        self.in_flight: dict[int, tuple[int, list[Entry]]] = {}
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
        if not self.idempotent:
            partition = self.rng.randrange(self.partitions)
            values = [self._value() for _ in range(self.rng.randint(1, 3))]
            builder = BatchBuilder()
        else:
            if self.unacked is None:
                values = [self._value() for _ in range(self.rng.randint(1, 3))]
                self.unacked = (self.rng.randrange(self.partitions), values)
            partition, values = self.unacked
            builder = BatchBuilder(
                producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=self.sequences[partition]
            )
        leader = leader_of(self.brokers, self.rng, partition)
        if leader is None:
            return
        for key, value in values:
            assert builder.append(T0_MS, key, value)
        request = broker_pb2.ProduceRequest(acks=-1, timeout_ms=TIMEOUT_MS_MAX)
        request.topics.add(name=TOPIC).partitions.add(partition=partition, records=bytes(builder.build()))
        self.calls += 1
        call = self.calls
        self.in_flight[call] = (partition, values)
        self.network.send(self.node, leader.id, self._at_broker, leader, request, call)
        self.scheduler.after(CLIENT_TIMEOUT_MS, self.in_flight.pop, call, None)

    def _value(self) -> Entry:
        """A new record: a key of a few (keys are overwritten again and again, for compacted
        topics), now and then (the plain producer) a tombstone."""
        self.next_value += 1
        n = self.next_value
        if not self.idempotent and n % TOMBSTONE_EVERY == 0:
            return key_of(n), None
        return key_of(n), b"%s%d" % (self.prefix, n)

    def _at_broker(self, broker: SimBroker, request: broker_pb2.ProduceRequest, call: int) -> None:
        broker.serve_produce(
            request, lambda response: self.network.send(broker.id, self.node, self._answered, response, call)
        )

    def _answered(self, response: broker_pb2.ProduceResponse, call: int) -> None:
        sent = self.in_flight.pop(call, None)
        if sent is None or response.status.error != E.NONE:
            return
        result = response.topics[0].partitions[0]
        if result.error != E.NONE:
            return
        partition, values = sent
        self.acked += len(values)
        if self.idempotent:
            self.sequences[partition] += len(values)
            self.unacked = None
        self.trace(
            f"producer: {values[0][1]!r}.. acknowledged at {partition}/{result.base_offset}.."
            f"{result.base_offset + len(values) - 1}"
        )
        for i, entry in enumerate(values):
            self.invariants.acknowledged(partition, result.base_offset + i, entry)


class Consumer:
    """Reads every partition from its start, one partition per fetch, in turn."""

    def __init__(
        self,
        brokers: dict[int, SimBroker],
        scheduler: Scheduler,
        network: Network,
        rng: random.Random,
        invariants: Invariants,
        trace: Callable[[str], None],
        partitions: int,
    ) -> None:
        self.brokers, self.scheduler, self.network, self.rng = brokers, scheduler, network, rng
        self.invariants = invariants
        self.trace = trace
        self.positions = [0] * partitions
        self.turn = 0

    def start(self) -> None:
        self.network.incarnations[CONSUMER] = 1
        self.scheduler.after(1, self._tick)

    def _tick(self) -> None:
        partition = self.turn = (self.turn + 1) % len(self.positions)
        leader = leader_of(self.brokers, self.rng, partition)
        if leader is not None:
            request = fetch_request(partition, self.positions[partition])
            self.network.send(
                CONSUMER, leader.id, self._at_broker, leader, request, partition, self.positions[partition]
            )
        self.scheduler.after(self.rng.randint(10, 50), self._tick)

    def _at_broker(
        self, broker: SimBroker, request: broker_pb2.FetchRequest, partition: int, position: int
    ) -> None:
        broker.serve_client_fetch(
            request,
            lambda response: self.network.send(
                broker.id, CONSUMER, self._answered, response, partition, position
            ),
        )

    def _answered(self, response: broker_pb2.FetchResponse, partition: int, position: int) -> None:
        if position != self.positions[partition]:
            return
        end = read_fetched(self.invariants, response, partition, position)
        if end != position:
            self.positions[partition] = end
            self.trace(f"consumer: read {partition}/{position}..{end - 1}")


def fetch_request(partition: int, position: int) -> broker_pb2.FetchRequest:
    """A consumer's fetch of one partition from ``position``; it never parks."""
    request = broker_pb2.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20)
    request.topics.add(name=TOPIC).partitions.add(
        partition=partition, fetch_offset=position, partition_max_bytes=1 << 20
    )
    return request


def read_fetched(
    invariants: Invariants, response: broker_pb2.FetchResponse, partition: int, position: int
) -> int:
    """Report each record of a fetch answer from ``position`` as read; the next position."""
    if response.status.error != E.NONE or response.topics[0].partitions[0].error != E.NONE:
        return position
    records, end = records_and_end(response.topics[0].partitions[0].records, position)
    for record in records:
        if record.offset >= position:
            invariants.consumed(partition, record.offset, (record.key, record.value))
    return end
