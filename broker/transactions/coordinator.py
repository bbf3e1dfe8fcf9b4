"""A broker's transaction coordinator: the transactional ids the metadata puts on this
broker (Kafka's TransactionCoordinator).

Placement and the state machine: ``raftka.metadata.transactions``; the decisions:
``raftka.broker.transactions.state``. Every transition is written to the quorum through
the active controller before anyone hears of it (``WriteTransaction``), and the
controller takes it only from the id's current coordinator at its broker epoch, so a
coordinator that lost the id (or a stale incarnation of it) cannot write. This broker
remembers only what it wrote and its image has not caught up with yet; the image holds
the rest, which is why a new coordinator needs no hand-over: it finishes the
transactions its image shows prepared (writing their markers again) and times out the
ongoing ones, as this one does.

One operation per id at a time: a request for an id whose previous operation (a write,
or a prepared transaction's markers) is still running is answered
CONCURRENT_TRANSACTIONS, and Kafka's clients ask again.

EndTxn is answered once the commit or abort is recorded as prepared; the markers go to
every partition's leader (``markers``) and the completion is recorded after them.

Completion is a function of the image, not of the answer to a write (Kafka's
TransactionMarkerChannelManager is fed from the loaded state the same way): ``reconcile``,
run on every image that changes the transactions or the brokers and on a timer, gives
every prepared transaction this broker coordinates exactly one completion task, which
tries again with a backoff until the transaction is complete or no longer this broker's.
So a PREPARE_* write whose answer was lost (it timed out, and committed later) is
finished all the same, as is one whose completion failed midway.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from raftka.broker.controller_link import ControllerLink, LinkError
from raftka.broker.producer_ids import ProducerIdManager, ProducerIdsUnavailable
from raftka.broker.transactions import state
from raftka.broker.transactions.markers import MarkerWriter
from raftka.metadata import transactions
from raftka.metadata.image import MetadataImage
from raftka.metadata.transactions import KAFKA_STATE_NAMES, OPEN, State, TransactionRecord
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.frames import DATA_LISTENER

E = controller_pb2.ErrorCode
Pb = broker_pb2
log = structlog.get_logger("raftka.broker.transactions")

CONTROLLER_WRITE_TIMEOUT_S = 5.0
WRITE_RETRY_BACKOFF_S = 0.05
COMPLETION_RETRY_BACKOFF_S = 0.5
COMPLETION_RETRY_BACKOFF_MAX_S = 5.0
ABORT_CHECK_INTERVAL_S = 10.0  # Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms
TRANSACTION_MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms
# the controller's answers that mean this broker is not (or no longer) the id's coordinator
_NOT_COORDINATOR = frozenset({E.NOT_COORDINATOR, E.STALE_BROKER_EPOCH, E.BROKER_ID_NOT_REGISTERED})
PREPARED = frozenset({State.TXN_PREPARE_COMMIT, State.TXN_PREPARE_ABORT})
_KAFKA_STATES = {name: value for value, name in KAFKA_STATE_NAMES.items()}


def _wall_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    def __init__(
        self,
        broker_id: int,
        broker_epoch: Callable[[], int],
        link: ControllerLink,
        producer_ids: ProducerIdManager,
        markers: MarkerWriter,
        max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS,
        abort_check_interval_s: float = ABORT_CHECK_INTERVAL_S,
        wall_clock_ms: Callable[[], int] = _wall_ms,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """``sleep``: the timer's and the completion backoff's (a simulation passes its own)."""
        self.broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._link = link
        self._producer_ids = producer_ids
        self._markers = markers
        self.max_timeout_ms = max_timeout_ms
        self._abort_check_interval_s = abort_check_interval_s
        self._wall_clock_ms = wall_clock_ms
        self._sleep = sleep
        self._image = MetadataImage()
        self._written: dict[str, TransactionRecord] = {}  # what this broker wrote, newer than its image
        self._busy: set[str] = set()  # ids with a request's write in flight
        self._completing: dict[str, asyncio.Task[None]] = {}  # one task per prepared id (``reconcile``)
        self._running = False

    # metadata ------------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self._image

    def update(self, image: MetadataImage) -> None:
        """A new image: forget what it now shows or what moved away; reconcile if it
        changed a transaction or who coordinates."""
        changed = (
            image.transactions is not self._image.transactions or image.brokers is not self._image.brokers
        )
        self._image = image
        for transactional_id, written in list(self._written.items()):
            if not self._owns(transactional_id) or _superseded(
                written, image.transactions.get(transactional_id)
            ):
                del self._written[transactional_id]
        if changed:
            self.reconcile()

    def _owns(self, transactional_id: str) -> bool:
        return transactions.transaction_coordinator(self._image, transactional_id) == self.broker_id

    def _current(self, transactional_id: str) -> TransactionRecord | None:
        written = self._written.get(transactional_id)
        return written if written is not None else self._image.transactions.get(transactional_id)

    def _not_here(self, transactional_id: str) -> tuple[int, str] | None:
        problem = transactions.transactional_id_problem(transactional_id)
        if problem is not None:
            return E.INVALID_REQUEST, problem
        if self._owns(transactional_id):
            return None
        coordinator = transactions.transaction_coordinator(self._image, transactional_id)
        if coordinator is None:
            return E.COORDINATOR_NOT_AVAILABLE, "no unfenced broker can coordinate transactions now"
        return (
            E.NOT_COORDINATOR,
            f"broker {self.broker_id} does not coordinate {transactional_id!r}; broker {coordinator} does",
        )

    def _unavailable(self, transactional_id: str) -> tuple[int, str] | None:
        """Not here, or busy with this id: the client asks again."""
        problem = self._not_here(transactional_id)
        if problem is None and (transactional_id in self._busy or transactional_id in self._completing):
            problem = E.CONCURRENT_TRANSACTIONS, f"{transactional_id!r} has an operation in progress"
        return problem

    # the protocol ----------------------------------------------------------------------------

    async def find_coordinator(self, transactional_id: str) -> Pb.FindCoordinatorResponse:
        response = Pb.FindCoordinatorResponse()
        problem = transactions.transactional_id_problem(transactional_id)
        coordinator = None if problem else transactions.transaction_coordinator(self._image, transactional_id)
        broker = None if coordinator is None else self._image.brokers.get(coordinator)
        endpoint = None if broker is None else broker.endpoint(DATA_LISTENER)
        if problem is not None:
            response.status.error, response.status.message = E.INVALID_REQUEST, problem
        elif endpoint is None:
            response.status.error = E.COORDINATOR_NOT_AVAILABLE
            response.status.message = "no unfenced broker can coordinate transactions now"
        else:
            response.node_id, response.host, response.port = coordinator, endpoint.host, endpoint.port
        return response

    async def init_producer_id(self, request: Pb.InitProducerIdRequest) -> Pb.InitProducerIdResponse:
        tid = request.transactional_id
        response = Pb.InitProducerIdResponse(producer_id=-1, producer_epoch=-1)
        problem = self._unavailable(tid)
        if problem is not None:
            response.status.error, response.status.message = problem
            return response
        self._busy.add(tid)
        try:
            new_producer_id = None
            if state.needs_new_producer_id(self._current(tid)):
                try:
                    new_producer_id = await self._producer_ids.next_id()
                except ProducerIdsUnavailable as e:
                    response.status.error = E.COORDINATOR_NOT_AVAILABLE
                    response.status.message = f"no producer id to give: {e}"
                    return response
            decision = state.init_producer_id(
                self._current(tid),
                tid,
                request.transaction_timeout_ms,
                self.max_timeout_ms,
                (request.producer_id, request.producer_epoch),
                new_producer_id,
            )
            record, error, message = await self._decided(decision)
            if record is not None and isinstance(decision, state.Transition) and decision.then_retry:
                self._ensure_completing(tid)
                error, message = E.CONCURRENT_TRANSACTIONS, f"{tid!r}: its open transaction is being aborted"
            if error != E.NONE:
                response.status.error, response.status.message = error, message
            elif record is not None:
                response.producer_id, response.producer_epoch = record.producer_id, record.producer_epoch
                log.debug(  # a client asks as often as it likes: not at INFO
                    "producer initialized",
                    txn=tid,
                    producer_id=record.producer_id,
                    epoch=record.producer_epoch,
                )
            return response
        finally:
            self._busy.discard(tid)

    async def add_partitions(self, request: Pb.AddPartitionsToTxnRequest) -> Pb.AddPartitionsToTxnResponse:
        tid = request.transactional_id
        wanted = {(t.name, p) for t in request.topics for p in t.partitions}
        if request.verify_only:
            return self._verify(request, wanted)
        problem = self._unavailable(tid)
        if problem is not None:
            return _partition_answers(request.topics, lambda _: problem)
        unknown = {p for p in wanted if not transactions.partition_exists(self._image, p)}
        if unknown:
            return _partition_answers(
                request.topics,
                lambda p: (
                    (E.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {p[0]}-{p[1]}")
                    if p in unknown
                    else (E.OPERATION_NOT_ATTEMPTED, "another partition of the request is unknown")
                ),
            )
        self._busy.add(tid)
        try:
            decision = state.add_partitions(
                self._current(tid), tid, request.producer_id, request.producer_epoch, wanted
            )
            _, error, message = await self._decided(decision)
        finally:
            self._busy.discard(tid)
        return _partition_answers(request.topics, lambda _: (error, message))

    def _verify(
        self, request: Pb.AddPartitionsToTxnRequest, wanted: set[tuple[str, int]]
    ) -> Pb.AddPartitionsToTxnResponse:
        tid = request.transactional_id
        problem = self._not_here(tid)
        if problem is not None:
            return _partition_answers(request.topics, lambda _: problem)
        verdict = state.verify(self._current(tid), tid, request.producer_id, request.producer_epoch, wanted)
        if isinstance(verdict, state.Refused):
            return _partition_answers(request.topics, lambda _: (verdict.code, verdict.message))
        return _partition_answers(
            request.topics,
            lambda p: (
                (E.NONE, "")
                if verdict[p] == E.NONE
                else (verdict[p], f"{p[0]}-{p[1]} is not in the ongoing transaction of {tid!r}")
            ),
        )

    async def add_offsets(self, request: Pb.AddOffsetsToTxnRequest) -> Pb.AddOffsetsToTxnResponse:
        tid = request.transactional_id
        response = Pb.AddOffsetsToTxnResponse()
        problem = self._unavailable(tid)
        if problem is None and not request.group_id:
            problem = E.INVALID_GROUP_ID, "group_id: must not be empty"
        if problem is not None:
            response.status.error, response.status.message = problem
            return response
        self._busy.add(tid)
        try:
            decision = state.add_offsets(
                self._current(tid), tid, request.producer_id, request.producer_epoch, request.group_id
            )
            _, response.status.error, response.status.message = await self._decided(decision)
        finally:
            self._busy.discard(tid)
        return response

    async def end_txn(self, request: Pb.EndTxnRequest) -> Pb.EndTxnResponse:
        tid = request.transactional_id
        response = Pb.EndTxnResponse()
        problem = self._unavailable(tid)
        if problem is not None:
            response.status.error, response.status.message = problem
            return response
        self._busy.add(tid)
        try:
            decision = state.end(
                self._current(tid), tid, request.producer_id, request.producer_epoch, request.committed
            )
            record, response.status.error, response.status.message = await self._decided(decision)
            if record is not None and isinstance(decision, state.Transition):
                self._ensure_completing(tid)
        finally:
            self._busy.discard(tid)
        return response

    async def describe(self, request: Pb.DescribeTransactionsRequest) -> Pb.DescribeTransactionsResponse:
        response = Pb.DescribeTransactionsResponse()
        for tid in request.transactional_ids:
            described = response.transactions.add(transactional_id=tid)
            problem = self._not_here(tid)
            record = self._current(tid)
            if problem is None and record is None:
                problem = E.TRANSACTIONAL_ID_NOT_FOUND, f"no transactional id {tid!r}"
            if problem is not None:
                described.error, described.message = problem
                continue
            assert record is not None
            described.state = KAFKA_STATE_NAMES[record.state]
            described.producer_id, described.producer_epoch = record.producer_id, record.producer_epoch
            described.timeout_ms, described.start_time_ms = record.timeout_ms, record.start_time_ms
            described.coordinator, described.last_update_time_ms = self.broker_id, record.last_update_time_ms
            for topic in record.topics:
                described.topics.add(name=topic.name, partitions=topic.partitions)
        return response

    async def list_transactions(self, request: Pb.ListTransactionsRequest) -> Pb.ListTransactionsResponse:
        """The ids this broker coordinates, filtered as Kafka's ListTransactions v1."""
        response = Pb.ListTransactionsResponse()
        states = {_KAFKA_STATES[s] for s in request.states if s in _KAFKA_STATES}
        response.unknown_state_filters.extend(s for s in request.states if s not in _KAFKA_STATES)
        producers = set(request.producer_ids)
        now_ms = self._wall_clock_ms()
        for tid in sorted({*self._image.transactions, *self._written}):
            record = self._current(tid)
            if record is None or not self._owns(tid):
                continue
            if request.states and record.state not in states:
                continue
            if producers and record.producer_id not in producers:
                continue
            if request.duration_filter_ms > 0 and (
                record.state not in OPEN or now_ms - record.start_time_ms < request.duration_filter_ms
            ):
                continue
            response.transactions.add(
                transactional_id=tid, producer_id=record.producer_id, state=KAFKA_STATE_NAMES[record.state]
            )
        return response

    # running -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Reconcile (``reconcile``) and abort timed-out transactions every
        ``abort_check_interval_s`` until cancelled."""
        self._running = True
        self.reconcile()
        while True:
            await self._sleep(self._abort_check_interval_s)
            self.reconcile()
            await self.abort_timed_out()

    def reconcile(self) -> None:
        """Every prepared transaction this broker coordinates gets one completion task, if
        it has none: whoever wrote the PREPARE_* and whatever its answer was (lost, timed
        out, from a predecessor), the image says it must be finished."""
        if not self._running:
            return
        prepared = [tid for tid, record in self._image.transactions.items() if record.state in PREPARED]
        for tid in [*prepared, *self._written]:  # one pass over the image, at C speed for the rest
            self._ensure_completing(tid)

    async def abort_timed_out(self) -> None:
        """Kafka's abortTimedOutTransactions: the epoch is bumped, so the producer that let
        its transaction time out is fenced at every partition and here."""
        now_ms = self._wall_clock_ms()
        for tid in list({*self._image.transactions, *self._written}):
            record = self._current(tid)
            if record is None or not state.timed_out(record, now_ms) or self._unavailable(tid) is not None:
                continue
            log.info(
                "transaction timed out: aborting",
                txn=tid,
                producer_id=record.producer_id,
                timeout_ms=record.timeout_ms,
            )
            self._busy.add(tid)
            try:
                prepared, error, message = await self._decided(state.Transition(state.fenced(record)))
            finally:
                self._busy.discard(tid)
            if prepared is not None:
                self._ensure_completing(tid)
            else:
                log.warning("timed-out transaction not aborted", txn=tid, error=E.Name(error), detail=message)

    async def close(self) -> None:
        self._running = False
        tasks = list(self._completing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # helpers --------------------------------------------------------------------------------

    def _prepared_here(self, transactional_id: str) -> TransactionRecord | None:
        """The id's prepared transaction, if this broker coordinates it."""
        record = self._current(transactional_id)
        if record is None or record.state not in PREPARED or not self._owns(transactional_id):
            return None
        return record

    def _ensure_completing(self, transactional_id: str) -> None:
        if transactional_id in self._completing or self._prepared_here(transactional_id) is None:
            return
        task = asyncio.create_task(self._complete(transactional_id), name=f"txn-complete-{transactional_id}")
        self._completing[transactional_id] = task
        task.add_done_callback(
            lambda t: (
                self._completing.pop(transactional_id, None)
                if self._completing.get(transactional_id) is t
                else None
            )
        )

    async def _complete(self, transactional_id: str) -> None:
        """Until the id's transaction is no longer prepared here (completed, or the id
        moved): one attempt after another, a backoff between them. An attempt is cut
        short by markers refused, a write not taken, or anything raised; the next one
        starts again from the state as it stands then."""
        backoff_s = COMPLETION_RETRY_BACKOFF_S
        while (prepared := self._prepared_here(transactional_id)) is not None:
            try:
                await self._complete_once(prepared)
            except Exception:  # whatever went wrong, a prepared transaction is not left behind
                log.exception("completing a transaction failed: trying again", txn=transactional_id)
            if self._prepared_here(transactional_id) is None:
                return
            await self._sleep(backoff_s)
            backoff_s = min(backoff_s * 2, COMPLETION_RETRY_BACKOFF_MAX_S)

    async def _complete_once(self, prepared: TransactionRecord) -> None:
        """Markers to every partition, then COMPLETE_* recorded.

        A transaction another coordinator (or incarnation) prepared is restated first, so
        its markers carry a coordinator epoch above every one its predecessor sent: a
        partition then refuses the predecessor's late markers, which could otherwise end
        the producer's next transaction there (Kafka's coordinator epoch fencing)."""
        tid = prepared.transactional_id
        if (prepared.coordinator, prepared.coordinator_broker_epoch) != (
            self.broker_id,
            self._broker_epoch(),
        ):
            restated, error, message = await self._decided(state.Transition(prepared))
            if restated is None:
                log.info("prepared transaction not restated", txn=tid, error=E.Name(error), detail=message)
                return
            prepared = restated
        if not await self._markers.write(prepared, lambda: self._owns(tid)):
            return
        recorded, error, message = await self._decided(state.Transition(state.completed(prepared)))
        if recorded is None:
            log.info("transaction completion not recorded", txn=tid, error=E.Name(error), detail=message)
        else:
            log.debug("transaction completed", txn=tid, committed=prepared.state == State.TXN_PREPARE_COMMIT)

    async def _decided(self, decision: state.Decision) -> tuple[TransactionRecord | None, int, str]:
        """(the record now in force, error, message) for what ``state`` decided."""
        if isinstance(decision, state.Refused):
            return None, decision.code, decision.message
        if isinstance(decision, state.Unchanged):
            return decision.record, E.NONE, ""
        return await self._record(decision.record)

    async def _record(self, record: TransactionRecord) -> tuple[TransactionRecord | None, int, str]:
        """One transition written through the controller; the record as it stands after it."""
        tid = record.transactional_id
        request = controller_pb2.WriteTransactionRequest(
            transaction=record, broker_id=self.broker_id, broker_epoch=self._broker_epoch()
        )
        try:
            answer = await self._write(request)
        except LinkError as e:
            self._written.pop(tid, None)  # it may or may not have been written: the image will say
            return None, E.COORDINATOR_NOT_AVAILABLE, f"the transaction's state could not be written: {e}"
        recorded = answer.transaction if answer.HasField("transaction") else None
        if recorded is not None and self._owns(tid):
            self._written[tid] = recorded
        error = answer.status.error
        if error == E.NONE or (
            error == E.INVALID_TXN_STATE and recorded is not None and _same(recorded, record)
        ):
            return recorded, E.NONE, ""  # a write tried again after it had committed
        if error in _NOT_COORDINATOR:
            return None, E.NOT_COORDINATOR, answer.status.message
        if error == E.INVALID_TXN_STATE:
            # this broker's view was behind the quorum's: the client asks again on the new one
            return None, E.CONCURRENT_TRANSACTIONS, answer.status.message
        return None, error, answer.status.message

    async def _write(
        self, request: controller_pb2.WriteTransactionRequest
    ) -> controller_pb2.WriteTransactionResponse:
        deadline = time.monotonic() + CONTROLLER_WRITE_TIMEOUT_S
        backoff_s = WRITE_RETRY_BACKOFF_S
        while True:
            try:
                return await self._link.call(lambda stub: stub.WriteTransaction, request)
            except LinkError:
                if time.monotonic() + backoff_s > deadline:
                    raise
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 1.0)


def _superseded(written: TransactionRecord, recorded: TransactionRecord | None) -> bool:
    """The image shows ``written``, or something newer: another coordinator (or
    incarnation) wrote the id since, which the controller marks with a higher coordinator
    epoch. (A broker cut off from the metadata may never see the image with its own
    write, and would otherwise act on it, and send markers the partitions refuse, for ever.)"""
    return recorded is not None and (
        recorded == written or recorded.coordinator_epoch > written.coordinator_epoch
    )


def _same(recorded: TransactionRecord, wanted: TransactionRecord) -> bool:
    """The recorded state is the one wanted, apart from what the controller stamps."""
    stamped = TransactionRecord()
    stamped.CopyFrom(wanted)
    for field in (
        "coordinator",
        "coordinator_broker_epoch",
        "coordinator_epoch",
        "last_update_time_ms",
        "start_time_ms",
    ):
        setattr(stamped, field, getattr(recorded, field))
    return stamped == recorded


def _partition_answers(
    topics: list[Pb.TxnTopic], answer: Callable[[tuple[str, int]], tuple[int, str]]
) -> Pb.AddPartitionsToTxnResponse:
    response = Pb.AddPartitionsToTxnResponse()
    for topic in topics:
        result = response.topics.add(name=topic.name)
        for partition in topic.partitions:
            error, message = answer((topic.name, partition))
            result.partitions.add(partition=partition, error=error, message=message)
    return response
