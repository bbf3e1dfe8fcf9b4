"""The transactional producer's side of Kafka's transactions (the transactional half of
Kafka's TransactionManager): the transactional id's coordinator, the producer id and
epoch it hands out, and each transaction's partitions and offsets.

``init_transactions`` finds the coordinator and asks InitProducerId with the
transactional id: any earlier producer with that id is fenced, its open transaction
aborted. In a transaction, a partition's first batch waits until AddPartitionsToTxn
has added the partition (``may_send``; all partitions that wait go in one request).
``send_offsets`` adds the group (AddOffsetsToTxn) and commits the offsets inside the
transaction at the group's coordinator (TxnOffsetCommit). ``end`` asks EndTxn.

Errors: CONCURRENT_TRANSACTIONS and coordinator moves are asked again (the coordinator
may still be completing the previous transaction); PRODUCER_FENCED (a newer producer has
the id) and refusals that asking again cannot fix are fatal: the producer can only be
closed. A batch refused for good makes the transaction abortable: commit is refused,
abort is the way on.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import structlog

from raftka.client.cluster_metadata import ClusterMetadata
from raftka.client.errors import ProducerError
from raftka.client.group import find_coordinator
from raftka.client.types import ConsumerGroupMetadata, TopicPartition
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import BrokerClient, WireError

E = controller_pb2.ErrorCode
Pb = broker_pb2
log = structlog.get_logger("raftka.client.producer")
TRANSACTIONAL_ID_KEY = 1
# asked again, after finding the coordinator anew
_REFIND = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.REQUEST_TIMED_OUT})
_AGAIN = _REFIND | {E.CONCURRENT_TRANSACTIONS}
_FATAL = frozenset(
    {
        E.PRODUCER_FENCED,
        E.INVALID_PRODUCER_EPOCH,
        E.INVALID_PRODUCER_ID_MAPPING,
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        E.INVALID_TRANSACTION_TIMEOUT,
        E.INVALID_REQUEST,
    }
)


class State(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    ENDING = "ending"  # flushing the transaction's batches, then EndTxn
    ABORTABLE = "abortable error"
    FATAL = "fatal error"


_SENDING = frozenset({State.IN_TRANSACTION, State.ENDING})  # batches go out (after AddPartitionsToTxn)


class TransactionManager:
    def __init__(
        self,
        transactional_id: str,
        timeout_ms: int,
        metadata: ClusterMetadata,
        request_timeout_s: float,
        retry_backoff_s: float,
        wake: Callable[[], None],
    ) -> None:
        """``wake``: the producer's sender has something new to send (a partition added)."""
        if not transactional_id:
            raise ValueError("transactional_id: must not be empty")
        self.transactional_id = transactional_id
        self._timeout_ms = timeout_ms
        self._metadata = metadata
        self._timeout_s = request_timeout_s
        self._backoff_s = retry_backoff_s
        self._wake = wake
        self.state = State.UNINITIALIZED
        self.producer = (-1, -1)
        self._error: ProducerError | None = None
        self._coordinator: BrokerClient | None = None
        self._added: set[TopicPartition] = set()
        self._wanted: set[TopicPartition] = set()
        self._adding: asyncio.Task[None] | None = None

    # the producer's calls ------------------------------------------------------------------

    async def init(self) -> tuple[int, int]:
        """The producer id and epoch for this instance of the transactional id (KIP-360:
        a producer that had one names it, so a retried bump is recognised)."""
        self._check(State.UNINITIALIZED, State.READY)
        request = Pb.InitProducerIdRequest(
            transactional_id=self.transactional_id,
            transaction_timeout_ms=self._timeout_ms,
            producer_id=self.producer[0],
            producer_epoch=self.producer[1],
        )
        answer = await self._ask(
            lambda c: c.InitProducerId(request, timeout=self._timeout_s), "InitProducerId"
        )
        self.producer = (answer.producer_id, answer.producer_epoch)
        self.state = State.READY
        log.info("transactions initialized", transactional_id=self.transactional_id, producer=self.producer)
        return self.producer

    def begin(self) -> None:
        self._check(State.READY)
        self.state = State.IN_TRANSACTION

    def check_send(self) -> None:
        """Records may be sent only inside a transaction."""
        if self.state is not State.IN_TRANSACTION:
            raise self._error or ProducerError(
                "INVALID_TXN_STATE",
                f"send outside a transaction ({self.state.value}): begin_transaction first",
            )

    def may_send(self, tp: TopicPartition) -> bool:
        """Whether batches of ``tp`` may go; if not, its AddPartitionsToTxn is on its way."""
        if tp in self._added:
            return True
        self._wanted.add(tp)
        if self._adding is None and self.state in _SENDING:
            self._adding = asyncio.create_task(self._add_partitions(), name="txn-add-partitions")
        return False

    def abortable(self, error: ProducerError) -> None:
        """A batch refused for good: this transaction can only be aborted."""
        if self.state in (State.IN_TRANSACTION, State.ENDING):
            self.state, self._error = State.ABORTABLE, error

    @property
    def failure(self) -> ProducerError | None:
        """Why batches waiting to be sent cannot go (the transaction is to abort, or fatal)."""
        return self._error if self.state in (State.ABORTABLE, State.FATAL) else None

    async def send_offsets(
        self, offsets: Iterable[tuple[TopicPartition, int]], group: ConsumerGroupMetadata
    ) -> None:
        self._check(State.IN_TRANSACTION)
        pid, epoch = self.producer
        added = Pb.AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=pid,
            producer_epoch=epoch,
            group_id=group.group_id,
        )
        await self._ask(lambda c: c.AddOffsetsToTxn(added, timeout=self._timeout_s), "AddOffsetsToTxn")
        commit = controller_pb2.OffsetCommitRequest(group=group.group_id, member_id=group.member_id)
        if group.generation_id >= 0 or group.member_id:
            commit.generation_id = group.generation_id
        if group.group_instance_id is not None:
            commit.group_instance_id = group.group_instance_id
        by_topic: dict[str, list[controller_pb2.OffsetCommitPartition]] = {}
        for tp, offset in offsets:
            by_topic.setdefault(tp.topic, []).append(
                controller_pb2.OffsetCommitPartition(partition=tp.partition, offset=offset)
            )
        for topic, partitions in by_topic.items():
            commit.topics.add(topic=topic, partitions=partitions)
        request = controller_pb2.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id, producer_id=pid, producer_epoch=epoch, offsets=commit
        )
        while True:
            coordinator = await find_coordinator(
                self._metadata, group.group_id, self._timeout_s, self._backoff_s
            )
            try:
                answer = await coordinator.TxnOffsetCommit(request, timeout=self._timeout_s)
            except WireError as e:
                log.debug("TxnOffsetCommit failed", detail=str(e))
                await asyncio.sleep(self._backoff_s)
                continue
            code = answer.status.error or next(
                (p.error for p in answer.partitions if p.error != E.NONE), E.NONE
            )
            if code == E.NONE:
                return
            message = answer.status.message or next(p.message for p in answer.partitions if p.error != E.NONE)
            if code not in _AGAIN:
                raise self._failed(code, f"TxnOffsetCommit: {message}")
            await asyncio.sleep(self._backoff_s)

    async def end(self, committed: bool, flush: Callable[[], Awaitable[None]]) -> None:
        """Commit (after ``flush``, which must leave no batch failed) or abort."""
        if committed:
            self._check(State.IN_TRANSACTION)
        else:
            self._check(State.IN_TRANSACTION, State.ABORTABLE)
        refused = self._error
        self.state = State.ENDING
        await flush()
        if committed and self._error is not None:
            self.state = State.ABORTABLE
            raise ProducerError(
                self._error.code, f"a record was refused, the transaction can only abort: {self._error}"
            )
        if self._added or not committed:
            pid, epoch = self.producer
            request = Pb.EndTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=pid,
                producer_epoch=epoch,
                committed=committed,
            )
            await self._ask(lambda c: c.EndTxn(request, timeout=self._timeout_s), "EndTxn")
        self._added.clear()
        self._error = None
        self.state = State.READY
        if refused is not None:
            # a batch was refused: its partition's sequence numbers are spent under this
            # epoch, so the coordinator bumps it (KIP-360, naming the current id and epoch)
            self.state = State.UNINITIALIZED
            await self.init()

    # helpers --------------------------------------------------------------------------------

    def _check(self, *allowed: State) -> None:
        if self.state is State.FATAL and self._error is not None:
            raise self._error
        if self.state not in allowed:
            raise ProducerError(
                "INVALID_TXN_STATE",
                f"the transaction is {self.state.value}, not {' or '.join(s.value for s in allowed)}",
            )

    def _failed(self, code: int, message: str) -> ProducerError:
        error = ProducerError(E.Name(code), message)
        if code in _FATAL:
            self.state, self._error = State.FATAL, error
        elif self.state in (State.IN_TRANSACTION, State.ENDING):
            self.state, self._error = State.ABORTABLE, error
        return error

    async def _ask(self, call: Callable[[BrokerClient], Awaitable[Any]], what: str) -> Any:
        """``call`` on the coordinator until it answers NONE or something asking again cannot fix."""
        while True:
            if self._coordinator is None:
                self._coordinator = await find_coordinator(
                    self._metadata,
                    self.transactional_id,
                    self._timeout_s,
                    self._backoff_s,
                    key_type=TRANSACTIONAL_ID_KEY,
                )
            try:
                answer = await call(self._coordinator)
            except WireError as e:
                log.debug(f"{what} failed", detail=str(e))
                self._coordinator = None
                await asyncio.sleep(self._backoff_s)
                continue
            code = answer.status.error
            if code == E.NONE:
                return answer
            if code not in _AGAIN:
                raise self._failed(code, f"{what}: {answer.status.message}")
            if code in _REFIND:
                self._coordinator = None
            await asyncio.sleep(self._backoff_s)

    async def _add_partitions(self) -> None:
        """AddPartitionsToTxn for every partition waiting, until added or refused."""
        try:
            while self._wanted and self.state in _SENDING:
                wanted = sorted(self._wanted)
                by_topic: dict[str, list[int]] = {}
                for tp in wanted:
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
                pid, epoch = self.producer
                request = Pb.AddPartitionsToTxnRequest(
                    transactional_id=self.transactional_id,
                    producer_id=pid,
                    producer_epoch=epoch,
                    topics=[Pb.TxnTopic(name=t, partitions=p) for t, p in by_topic.items()],
                )

                async def call(
                    c: BrokerClient, request: Pb.AddPartitionsToTxnRequest = request
                ) -> Pb.AddPartitionsToTxnResponse:
                    answer = await c.AddPartitionsToTxn(request, timeout=self._timeout_s)
                    first = next((p for t in answer.topics for p in t.partitions if p.error != E.NONE), None)
                    if first is not None and not answer.status.error:
                        answer.status.error, answer.status.message = first.error, first.message
                    return answer

                try:
                    await self._ask(call, "AddPartitionsToTxn")
                except ProducerError:
                    return  # abortable or fatal: the batches fail when the sender sees the state
                self._added.update(wanted)
                self._wanted.difference_update(wanted)
        finally:
            self._adding = None
            self._wake()
