"""The producer: records into per-partition batches, batches into one Produce per broker.

``send`` picks the partition (Kafka's murmur2 for keys, sticky without), appends to that
partition's open batch (aiokafka's codec) and returns a future. A sender task ships
batches that are full, older than ``linger_ms``, or asked for by ``flush``: every ready
batch led by one broker goes in one request (up to ``max_request_size``), at most one
batch per partition per request. Retriable answers (leader moved, ISR too small,
timeouts, an unreachable broker) are retried after ``retry_backoff_ms`` and a metadata
refresh, until the batch is ``delivery_timeout_ms`` old; anything else fails the
batch's futures at once with the broker's error and message.

Idempotence is on by default, as in Kafka 3.x (``enable_idempotence``; it needs
acks=all, and is off by default with acks 0 or 1): the producer takes a producer id
from any broker (InitProducerId) and numbers its batches per partition
(``raftka.client.idempotence``), so a batch sent again after a lost answer is written once, and
a partition may have up to five batches in flight, in order: requests to a broker are
written to one connection in order and the broker appends them in that order; a retry
goes alone as the partition's first unacknowledged batch. Only full batches (or a
flush) go out behind one in flight: a batch still filling waits for the answer, so a
light load sends few, fuller requests instead of one per record. Without idempotence a
partition has one batch in flight, so its order holds under retries, and a batch whose
acknowledgement was lost may be written twice (at least once).

A record for a topic no broker knows waits for it up to ``max_block_ms``, warning at
once and every few seconds (``raftka.client.topic_wait``). ``buffer_memory`` bounds the
bytes waiting: ``send`` waits for room up to ``max_block_ms``. With acks=0 the broker answers nothing: a batch counts
as sent once written to the socket, and a broker that refused it closes the connection,
which the next send to it reports (then the leaders are looked up again).
``acknowledged_records`` and ``failed_records`` count outcomes.

Transactions (``transactional_id``, Kafka's API: ``init_transactions``,
``begin_transaction``, ``send_offsets_to_transaction``, ``commit_transaction``,
``abort_transaction``; ``raftka.client.transactions``) need idempotence: the
transactional id's coordinator gives the producer id and its epochs, a partition's
batches wait until the partition is added to the transaction, and a batch refused for
good fails the transaction's waiting batches and leaves abort as the only way on.

``AsyncProducer`` is the asyncio producer; ``Producer`` runs one on a private thread.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from raftka.client.cluster_metadata import RETRIABLE, ClusterMetadata
from raftka.client.errors import KafkaError, ProducerError
from raftka.client.idempotence import NO_PRODUCER, Idempotence
from raftka.client.loop_thread import LoopThread
from raftka.client.partitioner import StickyPartitioner, default_partition
from raftka.client.topic_wait import TopicWaits
from raftka.client.transactions import TransactionManager
from raftka.client.types import ConsumerGroupMetadata, RecordMetadata, TopicPartition
from raftka.records.batch import NO_SEQUENCE, set_producer_state
from raftka.records.codec import BatchBuilder, Compression
from raftka.security.sasl import SaslCredentials
from raftka.security.tls import TlsFiles
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import WireError

E = controller_pb2.ErrorCode
log = structlog.get_logger("raftka.client.producer")
ACKS = (-1, 0, 1)
RECORD_OVERHEAD_BYTES = 24  # what a record adds to a batch besides key, value and headers
Headers = Sequence[tuple[str, bytes | None]]
_NO_HEADERS: list[tuple[str, bytes | None]] = []  # shared by every record without headers: never mutated
HANDOFF_RECORDS_MAX = 10_000  # records a synchronous Producer's send may queue ahead of its loop
IN_FLIGHT_PER_PARTITION_MAX = 5  # with idempotence: what the broker's producer state covers (Kafka's limit)


class RecordFuture:
    """One record's outcome, settled with its whole batch (Kafka's FutureRecordMetadata):
    no event-loop future per record, callbacks run when the batch's answer is applied.
    Awaitable; ``done``, ``result``, ``exception`` and ``add_done_callback`` as a future."""

    __slots__ = ("_batch", "_index", "timestamp")

    def __init__(self, batch: _Batch, index: int, timestamp: int) -> None:
        self._batch = batch
        self._index = index
        self.timestamp = timestamp

    def done(self) -> bool:
        return self._batch.outcome.done()

    def exception(self) -> BaseException | None:
        return self._batch.outcome.exception()

    def result(self) -> RecordMetadata:
        base_offset = self._batch.outcome.result()
        tp = self._batch.tp
        return RecordMetadata(
            tp.topic, tp.partition, base_offset + self._index if base_offset >= 0 else -1, self.timestamp
        )

    def add_done_callback(self, callback: Callable[[RecordFuture], None]) -> None:
        if self.done():
            callback(self)
        else:
            self._batch.callbacks.append((callback, self))

    def __await__(self):  # noqa: ANN204
        yield from asyncio.shield(self._batch.outcome).__await__()
        return self.result()


@dataclass(eq=False)
class _Batch:
    tp: TopicPartition
    builder: BatchBuilder
    created: float  # monotonic
    outcome: asyncio.Future[int]  # the base offset, or the error
    callbacks: list[tuple[Callable[[RecordFuture], None], RecordFuture]] = field(default_factory=list)
    records: int = 0
    size: int = 0  # bytes charged to buffer_memory
    payload: bytes | None = None  # built once, when first sent
    retry_at: float = 0.0
    last_error: str = ""
    closed: bool = False
    producer: tuple[int, int] = NO_PRODUCER  # idempotence: the (id, epoch) it is numbered under
    sequence: int = NO_SEQUENCE
    sequence_reset: bool = False
    stamped: tuple[int, int, int] = (*NO_PRODUCER, NO_SEQUENCE)  # what the payload's header says

    def stamp(self) -> bytes:
        """The payload, its header carrying the batch's producer id, epoch and sequence."""
        if self.payload is None:
            self.closed = True
            self.payload = bytes(self.builder.build())
        wanted = (*self.producer, self.sequence)
        if wanted != self.stamped:
            buf = bytearray(self.payload)
            set_producer_state(buf, 0, *wanted)
            self.payload, self.stamped = bytes(buf), wanted
        return self.payload


class AsyncProducer:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        acks: int | str = -1,
        linger_ms: int = 5,
        batch_size: int = 16_384,
        buffer_memory: int = 32 << 20,
        compression: str = "none",
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        max_block_ms: int = 60_000,
        max_request_size: int = 1 << 20,
        enable_idempotence: bool | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        tls: TlsFiles | None = None,
        sasl: SaslCredentials | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        acks = -1 if acks == "all" else int(acks)
        if acks not in ACKS:
            raise ValueError(f"acks: {acks} is not one of all (-1), 0 or 1")
        if transactional_id is not None and (enable_idempotence is False or acks != -1):
            raise ValueError("transactional_id: needs idempotence and acks=all (-1)")
        if enable_idempotence is None:  # Kafka 3.x: on, unless a setting it needs was set otherwise
            enable_idempotence = acks == -1
        elif enable_idempotence and acks != -1:
            raise ValueError(f"enable_idempotence: needs acks=all (-1), got acks={acks}")
        for name, value in (
            ("batch_size", batch_size),
            ("buffer_memory", buffer_memory),
            ("max_request_size", max_request_size),
        ):
            if value <= 0:
                raise ValueError(f"{name}: must be positive, got {value}")
        self.acks = acks
        self._linger_s = linger_ms / 1000
        self._batch_size = batch_size
        self._buffer_memory = buffer_memory
        self._compression = Compression.parse(compression)
        self._delivery_timeout_s = delivery_timeout_ms / 1000
        self._request_timeout_ms = request_timeout_ms
        self._retry_backoff_s = retry_backoff_ms / 1000
        self.max_block_s = max_block_ms / 1000
        self._max_request_size = max_request_size
        self.metadata = ClusterMetadata(
            bootstrap_servers, request_timeout_s=request_timeout_ms / 1000, tls=tls, sasl=sasl
        )
        self._topic_waits = TopicWaits(self.metadata, self._retry_backoff_s, clock)  # the metadata waits' clock
        self._partitioner = StickyPartitioner()
        self._idempotence = Idempotence(bumps_epoch=transactional_id is None) if enable_idempotence else None
        self._txn = (
            None
            if transactional_id is None
            else TransactionManager(
                transactional_id,
                transaction_timeout_ms,
                self.metadata,
                request_timeout_ms / 1000,
                retry_backoff_ms / 1000,
                self._wake_sender,
            )
        )
        self._in_flight_max = IN_FLIGHT_PER_PARTITION_MAX if enable_idempotence else 1
        self._batches: dict[
            TopicPartition, collections.deque[_Batch]
        ] = {}  # waiting: retries first, then new
        self._in_flight: dict[TopicPartition, int] = {}  # batches in requests now, per partition
        self._in_requests: set[_Batch] = set()
        self._requests: set[asyncio.Task[None]] = set()
        self._init_task: asyncio.Task[None] | None = None
        self._fatal: ProducerError | None = (
            None  # the producer cannot go on (InitProducerId refused for good)
        )
        self._buffered = 0
        self._room = asyncio.Condition()
        self._wake = asyncio.Event()
        self._flushing = 0
        self._closed = False
        self.acknowledged_records = (
            0  # Kafka's record-send-total, counted on acknowledgement (acks=0: on send)
        )
        self.failed_records = 0  # Kafka's record-error-total
        self._loop = asyncio.get_running_loop()
        self._sender = asyncio.create_task(self._send_loop(), name="producer-sender")

    # the API ----------------------------------------------------------------------------

    @property
    def idempotent(self) -> bool:
        return self._idempotence is not None

    @property
    def producer_id_and_epoch(self) -> tuple[int, int]:
        """(-1, -1) without idempotence or before InitProducerId has answered."""
        return NO_PRODUCER if self._idempotence is None else self._idempotence.producer

    # transactions (confluent-kafka's shapes) ---------------------------------------------------

    async def init_transactions(self) -> None:
        """The producer id and epoch of the transactional id: an earlier producer with it
        is fenced and its open transaction aborted."""
        assert self._idempotence is not None
        self._idempotence.set_producer(*await self._transactions().init())
        self._wake.set()

    def begin_transaction(self) -> None:
        self._transactions().begin()

    async def send_offsets_to_transaction(
        self, offsets: dict[TopicPartition, int], group_metadata: ConsumerGroupMetadata
    ) -> None:
        """Commit ``offsets`` (each partition's next offset to consume) for the group with
        the transaction: the group sees them only if it commits."""
        await self._transactions().send_offsets(offsets.items(), group_metadata)

    async def commit_transaction(self) -> None:
        """Flush, then commit; a record refused meanwhile refuses the commit (abort then)."""
        await self._transactions().end(True, self.flush)

    async def abort_transaction(self) -> None:
        """Flush (what was sent is aborted with the rest), then abort."""
        txn = self._transactions()
        await txn.end(False, self.flush)
        assert self._idempotence is not None
        if txn.producer != self._idempotence.producer:  # re-initialized after a refused batch
            self._idempotence.set_producer(*txn.producer)

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise ProducerError("INVALID_TXN_STATE", "transactions need a transactional_id")
        return self._txn

    def _wake_sender(self) -> None:
        self._wake.set()

    async def wait_ready(self, topic: str) -> None:
        """Until ``topic`` is known and every partition has a leader (bounded by
        ``max_block_ms``): a topic created a moment ago may not have reached the brokers'
        metadata yet, which is not an error until the time is up."""
        deadline = self._topic_waits.clock() + self.max_block_s
        info = await self._topic_waits.topic(topic, self.max_block_s)
        while len(info.available()) != len(info.partitions):
            if self._topic_waits.clock() > deadline:
                raise ProducerError("LEADER_NOT_AVAILABLE", f"{topic} has partitions without a leader")
            await asyncio.sleep(self._retry_backoff_s)
            await self.metadata.refresh(force=True)
            info = await self._topic_waits.topic(topic, max(0.0, deadline - self._topic_waits.clock()))

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> RecordFuture:
        """Append a record to its partition's open batch; a future of where it landed.
        The hot path of every application: when the topic and the partition's open batch
        are known it only looks them up and appends, and allocates nothing that outlives
        the call but the returned future (objects kept per buffered record are what the
        garbage collector would scan, again and again)."""
        if self._closed:
            raise ProducerError("PRODUCER_CLOSED", "send after close")
        if self._fatal is not None:
            raise self._fatal
        if self._txn is not None:
            self._txn.check_send()
        size = (
            RECORD_OVERHEAD_BYTES
            + (len(value) if value is not None else 0)
            + (len(key) if key is not None else 0)
        )
        if headers:
            headers = list(headers)
            size += sum(len(k) + len(v or b"") for k, v in headers)
        else:
            headers = _NO_HEADERS
        if size > self._max_request_size:
            raise ProducerError(
                "RECORD_TOO_LARGE",
                f"a record of {size} bytes is over max_request_size {self._max_request_size}",
            )
        info = await self._topic_waits.topic(topic, self.max_block_s)
        count = len(info.partitions)
        if partition is None:
            partition = (
                default_partition(key, count)
                if key is not None
                else self._partitioner.partition(topic, count, info.available)
            )
        elif not 0 <= partition < count:
            raise ProducerError(
                "UNKNOWN_TOPIC_OR_PARTITION", f"{topic} has {count} partitions, not {partition + 1}"
            )
        if self._buffered + size > self._buffer_memory:
            await self._wait_for_room(size)
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        queue = self._batches.get((topic, partition))  # a plain tuple hashes as its TopicPartition
        batch = (
            queue[-1]
            if queue and not queue[-1].closed
            else self._open_batch(TopicPartition(topic, partition))
        )
        if not batch.builder.append(timestamp, key, value, headers):
            self._close_batch(batch, key is None)
            batch = self._open_batch(batch.tp)
            batch.builder.append(timestamp, key, value, headers)  # the first record always fits
        future = RecordFuture(batch, batch.records, timestamp)
        batch.records += 1
        batch.size += size
        self._buffered += size
        if batch.builder.size_in_bytes() >= self._batch_size:
            self._close_batch(batch, key is None)
        return future

    async def flush(self) -> None:
        """Until every record sent so far is acknowledged or failed."""
        self._flushing += 1
        self._wake.set()
        try:
            pending = [b.outcome for queue in self._batches.values() for b in queue]
            pending += [b.outcome for b in self._in_requests]
            if pending:
                await asyncio.wait(pending)
        finally:
            self._flushing -= 1

    async def close(self, timeout_s: float | None = None) -> None:
        """Flush (for up to ``timeout_s``), then fail what is left and stop."""
        if self._closed:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.flush(), timeout_s)
        self._closed = True
        self._sender.cancel()
        for task in list(self._requests):
            task.cancel()
        await asyncio.gather(self._sender, *self._requests, return_exceptions=True)
        for batch in [*(b for queue in self._batches.values() for b in queue), *self._in_requests]:
            self._fail(batch, ProducerError("PRODUCER_CLOSED", f"closed before {batch.tp} was acknowledged"))
        self._batches.clear()
        self._in_requests.clear()
        await self.metadata.close()

    # batching ---------------------------------------------------------------------------

    async def _wait_for_room(self, size: int) -> None:
        if self._buffered + size <= self._buffer_memory:
            return
        self._wake.set()
        async with self._room:
            try:
                await asyncio.wait_for(
                    self._room.wait_for(
                        lambda: self._buffered + size <= self._buffer_memory or self._buffered == 0
                    ),
                    self.max_block_s,
                )
            except TimeoutError:
                raise ProducerError(
                    "BUFFER_EXHAUSTED",
                    f"no room in buffer_memory ({self._buffer_memory} bytes) within max_block_ms",
                ) from None

    def _open_batch(self, tp: TopicPartition) -> _Batch:
        queue = self._batches.get(tp)
        if queue is None:
            queue = self._batches[tp] = collections.deque()
        if queue and not queue[-1].closed:
            return queue[-1]
        batch = _Batch(
            tp,
            BatchBuilder(self._compression, self._batch_size, transactional=self._txn is not None),
            time.monotonic(),
            self._loop.create_future(),
        )
        queue.append(batch)
        if len(queue) == 1:
            self._wake.set()
        return batch

    def _close_batch(self, batch: _Batch, keyless: bool) -> None:
        batch.closed = True
        self._wake.set()
        if keyless:
            info = self.metadata.topics.get(batch.tp.topic)
            if info is not None:
                self._partitioner.on_new_batch(
                    batch.tp.topic, len(info.partitions), info.available(), batch.tp.partition
                )

    # sending ----------------------------------------------------------------------------

    async def _send_loop(self) -> None:
        while True:
            wait_s = self._ship_ready()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)

    def _ship_ready(self) -> float | None:
        """Send what is ready; how long until something else may be (None: until woken).
        A partition's batches go in order, each in the next request to its leader."""
        now = time.monotonic()
        idempotence = self._idempotence
        if idempotence is not None:
            idempotence.maintain(lambda tp: self._in_flight.get(tp, 0))
            if (
                not idempotence.has_producer_id
                and self._init_task is None
                and self._fatal is None
                and self._txn is None  # a transactional producer's id comes from init_transactions
            ):
                self._init_task = self._track(self._init_producer_id())
        next_s: float | None = None

        def again_in(delay_s: float) -> None:
            nonlocal next_s
            next_s = delay_s if next_s is None else min(next_s, delay_s)

        by_leader: dict[int, list[list[_Batch]]] = {}  # leader -> the batches of its 1st, 2nd, ... request
        for tp, queue in self._batches.items():
            taken = 0
            while queue and self._in_flight.get(tp, 0) + taken < self._in_flight_max:
                batch = queue[0]
                expires_in = batch.created + self._delivery_timeout_s - now
                failure = self._fatal or (self._txn.failure if self._txn is not None else None)
                if expires_in < 0 or failure is not None:
                    queue.popleft()
                    why = f"{tp}: not acknowledged within delivery_timeout_ms ({batch.last_error or 'no answer'})"
                    self._give_up(batch, failure or ProducerError("REQUEST_TIMED_OUT", why))
                    continue
                full = batch.closed or len(queue) > 1 or self._flushing
                if not full and self._in_flight.get(tp, 0) + taken:
                    break  # a batch still filling waits for the one out: its answer wakes the loop
                ready_at = max(batch.retry_at, batch.created + (0 if full else self._linger_s))
                if ready_at > now:
                    again_in(ready_at - now)
                    break
                if idempotence is not None and not idempotence.may_send(batch):
                    again_in(expires_in)  # woken sooner by the answers it waits for
                    break
                if self._txn is not None and not self._txn.may_send(tp):
                    again_in(expires_in)  # woken once the partition is added to the transaction
                    break
                state = self.metadata.leader(tp)
                if state is None or state.leader < 0 or self.metadata.broker(state.leader) is None:
                    batch.retry_at = now + self._retry_backoff_s
                    batch.last_error = f"no leader for {tp}"
                    self._refresh_soon()
                    again_in(self._retry_backoff_s)
                    break
                queue.popleft()
                if idempotence is not None and batch.sequence == NO_SEQUENCE:
                    idempotence.number(batch)
                requests = by_leader.setdefault(state.leader, [])
                if len(requests) == taken:
                    requests.append([])
                requests[taken].append(batch)
                taken += 1
        for leader, requests in by_leader.items():
            for batches in requests:
                self._launch_within_size(leader, batches)
        return next_s

    def _launch_within_size(self, leader: int, batches: list[_Batch]) -> None:
        request_batches: list[_Batch] = []
        size = 0
        for batch in batches:
            payload = batch.stamp()
            if request_batches and size + len(payload) > self._max_request_size:
                self._launch(leader, request_batches)
                request_batches, size = [], 0
            request_batches.append(batch)
            size += len(payload)
        self._launch(leader, request_batches)

    def _launch(self, leader: int, batches: list[_Batch]) -> None:
        for batch in batches:
            self._in_flight[batch.tp] = self._in_flight.get(batch.tp, 0) + 1
            self._in_requests.add(batch)
        self._track(self._produce(leader, batches))

    def _track(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task the producer cancels and awaits on close."""
        task = asyncio.create_task(coroutine)
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)
        return task

    async def _produce(self, leader: int, batches: list[_Batch]) -> None:
        request = broker_pb2.ProduceRequest(
            acks=self.acks,
            timeout_ms=self._request_timeout_ms,
            transactional_id="" if self._txn is None else self._txn.transactional_id,
        )
        topics: dict[str, broker_pb2.ProduceTopic] = {}
        for batch in batches:
            topic = topics.get(batch.tp.topic)
            if topic is None:
                topic = topics[batch.tp.topic] = request.topics.add(name=batch.tp.topic)
            topic.partitions.add(partition=batch.tp.partition, records=batch.payload)
        results: dict[TopicPartition, broker_pb2.ProducePartitionResult] = {}
        failure = ""
        broker = self.metadata.broker(leader)
        try:
            if broker is None:
                raise KafkaError("BROKER_NOT_AVAILABLE", f"broker {leader} is unknown")
            if self.acks == 0:
                await broker.ProduceWithoutAnswer(request)
            else:
                response = await broker.Produce(request, timeout=self._request_timeout_ms / 1000 + 5)
                if response.status.error != E.NONE:
                    failure = f"{E.Name(response.status.error)}: {response.status.message}"
                for topic_result in response.topics:
                    for p in topic_result.partitions:
                        results[TopicPartition(topic_result.name, p.partition)] = p
        except WireError as e:
            failure = f"broker {leader}: {e}"
        except KafkaError as e:
            failure = str(e)
        finally:
            for batch in batches:
                self._in_flight[batch.tp] -= 1
                self._in_requests.discard(batch)
        retry = False
        for batch in batches:
            result = results.get(batch.tp)
            if self.acks == 0 and not failure:  # written to the socket: sent, no offsets (Kafka's acks=0)
                self._complete(batch, -1)
            elif result is not None and result.error == E.NONE:
                self._complete(batch, result.base_offset)
            elif self._retriable(batch, None if result is None else result.error):
                batch.last_error = failure or (
                    f"{E.Name(result.error)}: {result.message}" if result else "no answer"
                )
                batch.retry_at = time.monotonic() + self._retry_backoff_s
                self._requeue(batch)
                retry = True
            else:
                assert result is not None
                self._refuse(batch, ProducerError(E.Name(result.error), result.message))
        if retry:
            self._refresh_soon()
        self._wake.set()

    def _retriable(self, batch: _Batch, code: int | None) -> bool:
        if self._idempotence is not None:
            return self._idempotence.retriable(batch, code)
        return code is None or code in RETRIABLE

    def _requeue(self, batch: _Batch) -> None:
        """Back among the waiting batches, before every later-numbered or new one."""
        queue = self._batches.setdefault(batch.tp, collections.deque())
        at = 0
        if self._idempotence is not None:
            while (
                at < len(queue)
                and queue[at].sequence != NO_SEQUENCE
                and self._idempotence.comes_before(queue[at], batch)
            ):
                at += 1
        queue.insert(at, batch)

    async def _init_producer_id(self) -> None:
        """InitProducerId from any broker until one answers (Kafka's producer asks before
        its first batch); a refusal that asking again cannot fix stops the producer."""
        assert self._idempotence is not None
        request = broker_pb2.InitProducerIdRequest(producer_id=-1, producer_epoch=-1)
        try:
            while True:
                try:
                    response = await self.metadata.any_broker().InitProducerId(
                        request, timeout=self._request_timeout_ms / 1000
                    )
                except WireError as e:
                    log.debug("InitProducerId failed", detail=str(e))
                else:
                    code = response.status.error
                    if code == E.NONE:
                        self._idempotence.set_producer(response.producer_id, response.producer_epoch)
                        return
                    if code not in RETRIABLE:
                        self._fatal = ProducerError(
                            E.Name(code), f"InitProducerId: {response.status.message}"
                        )
                        return
                    log.debug("InitProducerId refused", error=E.Name(code), detail=response.status.message)
                await asyncio.sleep(self._retry_backoff_s)
        finally:
            self._init_task = None
            self._wake.set()

    def _refresh_soon(self) -> None:
        self._track(self._refresh_quietly())

    async def _refresh_quietly(self) -> None:
        try:
            await self.metadata.refresh()
        except KafkaError as e:
            log.debug("metadata refresh failed", detail=str(e))

    def _release(self, batch: _Batch) -> None:
        """The batch's bytes no longer count against buffer_memory."""
        self._buffered -= batch.size
        batch.size = 0
        self._track(self._notify_room())

    async def _notify_room(self) -> None:
        async with self._room:
            self._room.notify_all()

    def _complete(self, batch: _Batch, base_offset: int) -> None:
        self._release(batch)
        if self._idempotence is not None:
            self._idempotence.acknowledged(batch)
        if self._settle(batch, lambda outcome: outcome.set_result(base_offset)):
            self.acknowledged_records += batch.records

    def _refuse(self, batch: _Batch, error: ProducerError) -> None:
        """Refused for good by the broker: not written."""
        if self._idempotence is not None:
            self._idempotence.failed(batch)
        if self._txn is not None:
            self._txn.abortable(error)
        self._release(batch)
        self._fail(batch, error)

    def _give_up(self, batch: _Batch, error: ProducerError) -> None:
        """Never acknowledged in time: it may or may not have been written."""
        if self._idempotence is not None and batch.sequence != NO_SEQUENCE:
            self._idempotence.gave_up(batch)
        if self._txn is not None:
            self._txn.abortable(error)
        self._release(batch)
        self._fail(batch, error)

    def _fail(self, batch: _Batch, error: ProducerError) -> None:
        if self._settle(batch, lambda outcome: outcome.set_exception(error)):
            self.failed_records += batch.records

    def _settle(self, batch: _Batch, settle: Callable[[asyncio.Future[int]], None]) -> bool:
        """Settle the batch and run its records' callbacks; False if it was settled before."""
        if batch.outcome.done():
            return False
        settle(batch.outcome)
        batch.outcome.exception()  # retrieved: the records' futures report it
        callbacks, batch.callbacks = batch.callbacks, []
        for callback, future in callbacks:
            try:
                callback(future)
            except Exception:  # a caller's callback must not stop the others (asyncio's rule too)
                log.exception("producer callback failed")
        return True


class Producer:
    """The synchronous producer: an AsyncProducer on a private event-loop thread.
    ``send`` returns a ``concurrent.futures.Future`` of the record's metadata.

    ``send`` hands the record over without waiting for the loop: records queue in a
    hand-off list (at most ``HANDOFF_RECORDS_MAX``; beyond, ``send`` blocks up to
    ``max_block_ms``) that one task on the loop drains in order, so a thread sending in
    a loop pays a lock and a future per record, not a round trip to the loop."""

    def __init__(self, bootstrap_servers: str | Sequence[str], **options: object) -> None:
        self._thread = LoopThread("producer-loop")
        self._loop = self._thread.loop
        self._producer: AsyncProducer = self._thread.run(_make(bootstrap_servers, options))
        self._handoff: list[tuple] = []
        self._handoff_lock = threading.Lock()
        self._handoff_room = threading.Semaphore(HANDOFF_RECORDS_MAX)
        self._draining = False  # a drain is scheduled or running; guarded by the lock
        self._drain_task: asyncio.Task[None] | None = None

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> concurrent.futures.Future[RecordMetadata]:
        if not self._handoff_room.acquire(timeout=self._producer.max_block_s):
            raise ProducerError(
                "BUFFER_EXHAUSTED", f"{HANDOFF_RECORDS_MAX} records wait for the producer's loop"
            )
        result: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()
        with self._handoff_lock:
            self._handoff.append((topic, value, key, headers, partition, timestamp, result))
            wake, self._draining = not self._draining, True
        if wake:
            self._loop.call_soon_threadsafe(self._start_drain)
        return result

    def _start_drain(self) -> None:
        self._drain_task = self._loop.create_task(self._drain())

    async def _drain(self) -> None:
        """Hand queued records to the AsyncProducer in the order they were sent."""
        while True:
            with self._handoff_lock:
                records, self._handoff = self._handoff, []
                if not records:
                    self._draining = False
                    return
            for topic, value, key, headers, partition, timestamp, result in records:
                self._handoff_room.release()
                try:
                    future = await self._producer.send(topic, value, key, headers, partition, timestamp)
                except Exception as e:  # noqa: BLE001 - handed to the caller's future
                    result.set_exception(e)
                    continue
                future.add_done_callback(lambda f, result=result: _copy(f, result))

    async def _handed_over(self) -> None:
        """Until every record sent before this call is in the AsyncProducer."""
        if self._drain_task is not None:
            await self._drain_task

    def flush(self) -> None:
        async def flush() -> None:
            await self._handed_over()
            await self._producer.flush()

        self._thread.run(flush())

    def init_transactions(self) -> None:
        self._thread.run(self._producer.init_transactions())

    def begin_transaction(self) -> None:
        self._thread.run(_call(self._producer.begin_transaction))

    def send_offsets_to_transaction(
        self, offsets: dict[TopicPartition, int], group_metadata: ConsumerGroupMetadata
    ) -> None:
        self._thread.run(self._producer.send_offsets_to_transaction(offsets, group_metadata))

    def commit_transaction(self) -> None:
        async def commit() -> None:
            await self._handed_over()
            await self._producer.commit_transaction()

        self._thread.run(commit())

    def abort_transaction(self) -> None:
        async def abort() -> None:
            await self._handed_over()
            await self._producer.abort_transaction()

        self._thread.run(abort())

    def close(self, timeout_s: float | None = None) -> None:
        if self._thread.closed:
            return

        async def close() -> None:
            await self._handed_over()
            await self._producer.close(timeout_s)

        self._thread.run(close())
        self._thread.stop()


async def _call(function: Callable[[], None]) -> None:
    """``function`` on the producer's loop (its state is the loop's alone)."""
    function()


async def _make(bootstrap_servers: str | Sequence[str], options: dict) -> AsyncProducer:
    return AsyncProducer(bootstrap_servers, **options)


def _copy(source: RecordFuture, target: concurrent.futures.Future) -> None:
    if source.exception() is not None:
        target.set_exception(source.exception())
    else:
        target.set_result(source.result())
