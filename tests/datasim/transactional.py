"""The transactional producer: Kafka's transaction protocol as a client runs it, against the
real transaction coordinators of the simulated brokers.

One transactional id. The client finds its coordinator in the metadata of a broker it
picks (maybe stale), gets a producer id and epoch (InitProducerId), and runs one
transaction after another: AddPartitionsToTxn for some partitions, a transactional batch
to each partition's leader, then EndTxn, a commit or an abort. A request unanswered, or
refused with a retriable error, is sent again (EndTxn too: once its transaction completes
a retry is answered as the first; meanwhile it is CONCURRENT_TRANSACTIONS); a produce
that fails, or a fence, starts over with InitProducerId, which aborts the open
transaction under a bumped epoch (so a late batch of the old epoch is refused). Now and
then the client lets its transaction time out, for the coordinator's timeout sweep.

Each record a leader acknowledges is reported to ``Invariants`` as any producer's (an
aborted one stays in the log, marked aborted). ``running`` off: no new transaction
begins; the one under way is ended.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from raftka.broker.replica.manager import TIMEOUT_MS_MAX
from raftka.metadata.transactions import transaction_coordinator
from raftka.records.codec import BatchBuilder
from raftka.v1 import broker_pb2, controller_pb2
from tests.datasim.broker import TOPIC, SimBroker
from tests.datasim.clients import CLIENT_TIMEOUT_MS, T0_MS, leader_of
from tests.datasim.invariants import TRANSACTIONAL_PREFIX, Entry, Invariants, key_of
from tests.datasim.network import Network
from tests.simulation.scheduler import Scheduler

E = controller_pb2.ErrorCode
Pb = broker_pb2
TRANSACTIONAL_PRODUCER = 103  # its node id
TRANSACTIONAL_ID = "tx"
TXN_TIMEOUT_MS = 1_000  # transaction.timeout.ms, scaled to the simulation
RETRY_MS = 50
STALL_SHARE = 0.05  # of transactions the client lets time out
COMMIT_SHARE = 0.7
_RETRIABLE = frozenset(
    {E.CONCURRENT_TRANSACTIONS, E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.REQUEST_TIMED_OUT}
)


class TransactionalProducer:
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
        self.partitions = partitions
        self.producer = (-1, -1)  # (producer id, epoch) once InitProducerId answered
        self.sequences: dict[int, int] = {}  # partition -> next sequence, for this epoch
        self.next_value = 0
        self.written: list[Entry] = []  # the open transaction's records acknowledged so far
        self.call = 0  # the request in flight (its answer is the one awaited)
        self.running = True
        self.ended = 0  # transactions ended (EndTxn answered NONE)

    def start(self) -> None:
        self.network.incarnations[TRANSACTIONAL_PRODUCER] = 1
        self.scheduler.after(1, self._init)

    # the steps --------------------------------------------------------------------------

    def _init(self) -> None:
        request = Pb.InitProducerIdRequest(
            transactional_id=TRANSACTIONAL_ID,
            transaction_timeout_ms=TXN_TIMEOUT_MS,
            producer_id=-1,
            producer_epoch=-1,
        )
        self._ask("init_producer_id", request, self._initialized, self._init)

    def _initialized(self, response: Pb.InitProducerIdResponse) -> None:
        if response.status.error != E.NONE:
            self.scheduler.after(RETRY_MS, self._init)
            return
        self.producer = (response.producer_id, response.producer_epoch)
        self.sequences = {}
        self.trace(f"txn producer: producer {response.producer_id} epoch {response.producer_epoch}")
        self._begin()

    def _begin(self) -> None:
        if not self.running:
            return
        self.written = []
        chosen = sorted(self.rng.sample(range(self.partitions), self.rng.randint(1, self.partitions)))
        producer_id, epoch = self.producer
        request = Pb.AddPartitionsToTxnRequest(
            transactional_id=TRANSACTIONAL_ID,
            producer_id=producer_id,
            producer_epoch=epoch,
            topics=[Pb.TxnTopic(name=TOPIC, partitions=chosen)],
        )
        self._ask("add_partitions", request, lambda r: self._added(r, chosen), self._begin)

    def _added(self, response: Pb.AddPartitionsToTxnResponse, chosen: list[int]) -> None:
        errors = {p.error for t in response.topics for p in t.partitions}
        if errors == {E.NONE}:
            self._produce(chosen)
        elif errors <= _RETRIABLE:
            self.scheduler.after(RETRY_MS, self._begin)
        else:
            self._init()  # fenced, or refused: start over

    def _produce(self, remaining: list[int]) -> None:
        if not remaining:
            if self.rng.random() < STALL_SHARE:  # the coordinator aborts it; EndTxn is then fenced
                self.scheduler.after(3 * TXN_TIMEOUT_MS, self._end, self.rng.random() < COMMIT_SHARE)
            else:
                self._end(self.rng.random() < COMMIT_SHARE)
            return
        partition = remaining[0]
        leader = leader_of(self.brokers, self.rng, partition)
        if leader is None:
            self.scheduler.after(RETRY_MS, self._produce, remaining)
            return
        producer_id, epoch = self.producer
        values = [self._value() for _ in range(self.rng.randint(1, 3))]
        builder = BatchBuilder(
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=self.sequences.get(partition, 0),
            transactional=True,
        )
        for key, value in values:
            assert builder.append(T0_MS, key, value)
        request = Pb.ProduceRequest(acks=-1, timeout_ms=TIMEOUT_MS_MAX, transactional_id=TRANSACTIONAL_ID)
        request.topics.add(name=TOPIC).partitions.add(partition=partition, records=bytes(builder.build()))
        call = self._next_call(self._init)  # no answer: its fate is unknown, so start over
        self.network.send(
            TRANSACTIONAL_PRODUCER,
            leader.id,
            leader.serve_produce,
            request,
            lambda r: self.network.send(
                leader.id, TRANSACTIONAL_PRODUCER, self._produced, call, r, remaining, values
            ),
        )

    def _produced(
        self, call: int, response: Pb.ProduceResponse, remaining: list[int], values: list[Entry]
    ) -> None:
        if call != self.call:
            return
        self.call = 0
        result = response.topics[0].partitions[0] if response.status.error == E.NONE else None
        if result is None or result.error != E.NONE:
            self._init()
            return
        partition = remaining[0]
        self.sequences[partition] = self.sequences.get(partition, 0) + len(values)
        for i, entry in enumerate(values):
            self.invariants.acknowledged(partition, result.base_offset + i, entry)
        self.written.extend(values)
        self._produce(remaining[1:])

    def _end(self, committed: bool) -> None:
        producer_id, epoch = self.producer
        request = Pb.EndTxnRequest(
            transactional_id=TRANSACTIONAL_ID,
            producer_id=producer_id,
            producer_epoch=epoch,
            committed=committed,
        )
        self._ask("end_txn", request, lambda r: self._ended(r, committed), lambda: self._end(committed))

    def _ended(self, response: Pb.EndTxnResponse, committed: bool) -> None:
        error = response.status.error
        if error == E.NONE:
            self.ended += 1
            if committed:
                self.invariants.transaction_committed(self.written)
            self.trace(f"txn producer: {'committed' if committed else 'aborted'} (epoch {self.producer[1]})")
            self.scheduler.after(self.rng.randint(5, 40), self._begin)
        elif error in _RETRIABLE:
            self.scheduler.after(RETRY_MS, self._end, committed)
        else:
            self.trace(f"txn producer: EndTxn refused {E.Name(error)}: starting over")
            self._init()

    # requests to the coordinator ---------------------------------------------------------

    def _ask(
        self, kind: str, request: Any, answered: Callable[[Any], None], again: Callable[[], None]
    ) -> None:
        """``kind`` at the id's coordinator (as a broker picked at random sees it); ``again``
        when there is none or no answer comes."""
        up = [b for b in self.brokers.values() if b.process is not None]
        coordinator = None
        if up:
            image = self.rng.choice(up).process.transactions.image  # type: ignore[union-attr]
            coordinator = transaction_coordinator(image, TRANSACTIONAL_ID)
        if coordinator is None:
            self.scheduler.after(RETRY_MS, again)
            return
        broker = self.brokers[coordinator]
        call = self._next_call(again)
        self.network.send(
            TRANSACTIONAL_PRODUCER,
            broker.id,
            broker.serve_txn,
            kind,
            request,
            lambda r: self.network.send(broker.id, TRANSACTIONAL_PRODUCER, self._answer, call, r, answered),
        )

    def _next_call(self, on_timeout: Callable[[], None]) -> int:
        self.call = self.rng.randrange(1, 1 << 30)
        self.scheduler.after(CLIENT_TIMEOUT_MS, self._timed_out, self.call, on_timeout)
        return self.call

    def _answer(self, call: int, response: Any, answered: Callable[[Any], None]) -> None:
        if call == self.call:
            self.call = 0
            answered(response)

    def _timed_out(self, call: int, on_timeout: Callable[[], None]) -> None:
        if call == self.call:
            self.call = 0
            on_timeout()

    def _value(self) -> Entry:
        self.next_value += 1
        return key_of(self.next_value), b"%s%d" % (TRANSACTIONAL_PREFIX, self.next_value)
