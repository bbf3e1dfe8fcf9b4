"""The broker's replicas: metadata in, Produce/Fetch/ListOffsets answered (Kafka's
ReplicaManager).

Each metadata image that changes this broker's roles (``raftka.broker.partitions``) makes it
leader or follower of partitions at the epochs the image gives; followers are handed
to the replica fetchers, leaders serve producers and consumers and track their
followers through the followers' own fetches, each first proven to be that broker's at
its current broker epoch (``raftka.broker.replica.follower_check``). Requests are
validated per partition: a bad partition gets its error and nothing written, the others
proceed.

Metadata is applied per partition too: an error while one partition's change is carried
out (opening, creating or deleting its log, taking its role) takes that partition
offline on this broker (Kafka's offline partition: requests for it are answered
KAFKA_STORAGE_ERROR, which clients retry), is logged once, and the other partitions'
changes go on, so the broker keeps serving and following the metadata log. The next
change the metadata makes to that partition (a new leader epoch, its deletion) tries it
again; a change that failed for want of file descriptors (``EMFILE``, ``ENFILE``, or the
node's reserve) is tried again by itself too, after ``DESCRIPTORS_RETRY_MIN_S`` doubling up
to ``DESCRIPTORS_RETRY_MAX_S``: a flood of connections once took a broker to its limit and
the replicas of a topic created meanwhile stayed offline after it ended, until a restart. A leader's write that fails on its log (an ``OSError`` appending or rolling a
segment) takes the partition offline the same way (Kafka takes the log's directory
offline). The heartbeat reports offline partitions (``on_offline_changed``,
``raftka.broker.offline_report``), so the controller moves their leadership and ISR
membership to healthy replicas meanwhile.

Transactions (the partition's side): a producer's transactional batch is bound to its
transaction: it must carry the producer id and epoch the coordinator issued for the
request's transactional id, which the image shows or, while the image lags or the batch
would open a transaction in the partition, the coordinator is asked (KIP-890,
``raftka.broker.transaction_verifier``); ``write_txn_markers`` writes the coordinator's
commit or abort markers and answers once the ISR holds them (acks=all). A consumer's
read_committed fetch reads below the last stable offset and gets the aborted
transactions its records overlap; ListOffsets' latest is then the last stable offset.

Bounds: acks=all bytes waiting for the ISR (``produce_waiting_bytes_max``) and parked
fetches (``fetch_parked_max``); a request over the first is refused, a fetch over the
second is answered at once with what there is.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from raftka.broker.log.config import LogConfig
from raftka.broker.log.manager import LogManager
from raftka.broker.log.partition_log import AppendInfo
from raftka.broker.log.producer_state import ProducerState, ProducerStateError
from raftka.broker.metrics import BrokerTopicMetrics
from raftka.broker.partitions import PartitionRole, Role, RoleChanges, StoppedPartition
from raftka.broker.replica.follower_check import ROUTINE_REFUSALS, follower_refusal
from raftka.broker.replica.partition import Partition, PartitionError
from raftka.broker.replica.throttle import LEADER, ReplicationQuota
from raftka.broker.replica.waiters import OffsetWaiters, Wakeups
from raftka.broker.transaction_verifier import AcceptAll, TransactionVerifier
from raftka.metadata import transactions
from raftka.metadata.image import TOPIC, MetadataImage
from raftka.metadata.topic_configs import TOPIC_CONFIGS
from raftka.node.config import BrokerConfig
from raftka.node.logs import RateLimitedLog
from raftka.records.batch import BatchHeader, read_header, transactional_header
from raftka.records.validation import BatchLimits, BatchValidationError, validate_batches
from raftka.security.principal import current_principal
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.answer_room import current_answer_room

E = controller_pb2.ErrorCode
Pb = broker_pb2
log = structlog.get_logger("raftka.broker.replica")

ACKS = (-1, 0, 1)
TIMEOUT_MS_MAX = 5 * 60_000
FETCH_WAIT_MS_MAX = 60_000
FETCH_BYTES_MAX = 64 << 20
DESCRIPTORS_RETRY_MIN_S = 1.0
DESCRIPTORS_RETRY_MAX_S = 30.0
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)
LIST_EARLIEST = -2
LIST_LATEST = -1
LIST_MAX_TIMESTAMP = -3  # the record with the largest timestamp (ListOffsets v7, KIP-734)
LIST_EARLIEST_LOCAL = -4  # v8, tiered storage: raftka's whole log is local
LIST_LATEST_TIERED = -5  # v9, tiered storage: nothing is tiered, so none (-1), as Kafka answers
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
MARKER_TIMEOUT_MS = 30_000  # how long a marker waits for the ISR (Kafka's request.timeout.ms)
REFUSAL_LOG_INTERVAL_S = 10.0  # a refused follower fetch is logged at most this often
# A verification the coordinator could not answer now: the produce is answered
# NOT_ENOUGH_REPLICAS, which every producer retries without a metadata refresh (Kafka's rule).
_VERIFICATION_RETRIABLE = frozenset(
    {E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E.CONCURRENT_TRANSACTIONS}
)
Key = tuple[str, int]
BOUND = object()  # a transactional batch bound to its open transaction, no verification guard needed
_Change = TypeVar("_Change", PartitionRole, StoppedPartition)


@dataclass(frozen=True, slots=True)
class OfflinePartition:
    """A partition this broker holds but cannot serve: applying its metadata failed."""

    topic_id: bytes
    change: str  # what failed: "lead", "follow", "delete" or "append"
    error: str


def _now_ms() -> int:
    return int(time.time() * 1000)


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class ReplicaManager:
    def __init__(
        self,
        local_id: int,
        logs: LogManager,
        config: BrokerConfig,
        *,
        request_isr_change: Callable[[Partition, tuple[int, ...]], None],
        on_follow: Callable[[Partition], None],
        on_stop_following: Callable[[Partition], None],
        high_watermarks: Mapping[str, int],
        clock_ms: Callable[[], int] = _monotonic_ms,
        on_offline_changed: Callable[[], None] = lambda: None,
        verifier: TransactionVerifier | None = None,
    ) -> None:
        self.local_id = local_id
        self.verifier: TransactionVerifier = verifier or AcceptAll()
        self.config = config
        self._clock_ms = clock_ms
        self._serving = False  # roles have started (``RoleChanges.started``)
        self._logs = logs
        self._request_isr_change = request_isr_change
        self._on_follow = on_follow
        self._on_stop_following = on_stop_following
        self._on_offline_changed = on_offline_changed
        self._partitions: dict[Key, Partition] = {}
        self._offline: dict[Key, OfflinePartition] = {}
        # offline partitions whose change failed for want of descriptors: tried again on a timer
        self._retries: dict[Key, tuple[Any, str, Callable[[Any], None]]] = {}
        self._retry_delay_s = DESCRIPTORS_RETRY_MIN_S
        self._retry_timer: asyncio.TimerHandle | None = None
        self._image = MetadataImage()
        self._acks = OffsetWaiters()
        self._appended = Wakeups()  # log end moved: followers' fetches
        self._committed = Wakeups()  # high watermark moved: consumers' fetches
        self._bytes_waiting = 0
        self.metrics = BrokerTopicMetrics()
        self.leader_quota = ReplicationQuota(LEADER, local_id, lambda: self._image, clock_ms)
        self._refusals = RateLimitedLog(log, REFUSAL_LOG_INTERVAL_S)
        self._checkpointed_high_watermarks = dict(high_watermarks)  # read at start; used once per partition

    # metadata ---------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self._image

    def partitions(self) -> Iterable[Partition]:
        return self._partitions.values()

    def get(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))

    def offline(self) -> Mapping[Key, OfflinePartition]:
        return self._offline

    def apply(self, image: MetadataImage, changes: RoleChanges) -> None:
        """Adopt a metadata image: role changes first, then any topic config changes."""
        configs_changed = image.configs is not self._image.configs
        self._image = image
        for gone in changes.stopped:
            self._isolated(gone, "delete", self._stop)
        for role in changes.leading:
            self._isolated(role, "lead", self._lead)
        for role in changes.following:
            self._isolated(role, "follow", self._follow)
        if changes.started:  # every role this incarnation has: any other log found at start is a stray
            self._serving = True
            self._logs.remove_strays({p.name for p in self._partitions.values()})
            self._checkpointed_high_watermarks.clear()
        if configs_changed:
            for partition in self._partitions.values():
                partition.log.update_config(self.log_config(partition.topic))

    def log_config(self, topic: str) -> LogConfig:
        return LogConfig.from_topic_configs(self._topic_configs(topic))

    def _topic_configs(self, topic: str) -> Mapping[str, str]:
        return self._image.configs.get((TOPIC, topic), {})

    def _topic_value(self, topic: str, key: str) -> str:
        return self._topic_configs(topic).get(key, TOPIC_CONFIGS[key].default)

    def _isolated(self, change: _Change, name: str, work: Callable[[_Change], None]) -> None:
        """Carry out one partition's change; if it fails, that partition alone goes offline."""
        key = (change.topic, change.partition)
        self._retries.pop(key, None)
        try:
            work(change)
        except Exception as e:  # any failure of one partition must spare the others
            self._take_offline(key, OfflinePartition(change.topic_id, name, repr(e)))
            if isinstance(e, OSError) and e.errno in _OUT_OF_DESCRIPTORS:
                self._retries[key] = (change, name, work)
                self._retry_later()
            return
        if self._offline.pop(key, None) is not None:
            self._on_offline_changed()

    def _retry_later(self) -> None:
        if self._retry_timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # applied outside the event loop (tools): the next change retries
            return
        self._retry_timer = loop.call_later(self._retry_delay_s, self._retry_for_descriptors)

    def close(self) -> None:
        """No more retries: the logs are closing."""
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None

    def _retry_for_descriptors(self) -> None:
        """Apply again the changes that failed for want of descriptors (the latest failure
        of each partition still offline; a newer change or a deletion replaced any other)."""
        self._retry_timer = None
        retries, self._retries = self._retries, {}
        for change, name, work in retries.values():
            self._isolated(change, name, work)
        if self._retries:
            self._retry_delay_s = min(2 * self._retry_delay_s, DESCRIPTORS_RETRY_MAX_S)
            self._retry_later()
        else:
            self._retry_delay_s = DESCRIPTORS_RETRY_MIN_S

    def _take_offline(self, key: Key, offline: OfflinePartition) -> None:
        partition = self._partitions.pop(key, None)
        if partition is not None:
            self._on_stop_following(partition)
            self._acks.fail(partition, E.KAFKA_STORAGE_ERROR)
            self._wake(partition)
            self._logs.forget(partition.name)
        newly = key not in self._offline
        if self._offline.get(key) != offline:  # once per cause: a retry failing alike stays quiet
            log.error(
                "partition offline on this broker: applying its metadata failed",
                topic=key[0],
                partition=key[1],
                change=offline.change,
                error=offline.error,
            )
        self._offline[key] = offline
        if newly:
            self._on_offline_changed()

    def _partition_for(self, role: PartitionRole) -> Partition:
        key = (role.topic, role.partition)
        partition = self._partitions.get(key)
        if partition is None or partition.topic_id != role.topic_id:
            if partition is not None:  # the topic was re-created under its name
                self._drop(partition, E.NOT_LEADER_OR_FOLLOWER)
            partition_log = self._logs.get_or_create(
                role.topic, role.partition, role.topic_id, self.log_config(role.topic)
            )
            partition = Partition(role.topic, role.partition, role.topic_id, partition_log, self.local_id)
            # Below the recovery point only: after a power cut the log may hold again a tail
            # an unflushed truncation had cut, under a high watermark checkpointed after it.
            partition.high_watermark = min(
                self._checkpointed_high_watermarks.pop(role.name, 0), partition_log.recovery_point
            )
            self._partitions[key] = partition
        return partition

    def _lead(self, role: PartitionRole) -> None:
        partition = self._partition_for(role)
        was_follower = partition.role is Role.FOLLOWER
        if partition.become_leader(role, self._clock_ms()):
            if was_follower:
                self._on_stop_following(partition)
            log.info("leading", partition=partition.name, leader_epoch=role.leader_epoch, isr=list(role.isr))
        self._after_isr_change(partition)

    def _follow(self, role: PartitionRole) -> None:
        partition = self._partition_for(role)
        was_leader = partition.is_leader
        if partition.become_follower(role):
            if was_leader:
                self._acks.fail(partition, E.NOT_LEADER_OR_FOLLOWER)
            self._on_stop_following(partition)
            if role.leader >= 0:
                self._on_follow(partition)
            self._wake(partition)
            log.debug(
                "following", partition=partition.name, leader=role.leader, leader_epoch=role.leader_epoch
            )

    def _stop(self, gone: StoppedPartition) -> None:
        key = (gone.topic, gone.partition)
        offline = self._offline.get(key)
        if offline is not None and offline.topic_id == gone.topic_id:
            self._logs.remove(gone.name)  # what is left of it; raises (it stays offline) if that fails
            log.info("offline partition removed", partition=gone.name, deleted=gone.deleted)
            return
        partition = self._partitions.get(key)
        if partition is not None and partition.topic_id == gone.topic_id:
            del self._partitions[key]
            self._drop(
                partition, E.NOT_LEADER_OR_FOLLOWER if not gone.deleted else E.UNKNOWN_TOPIC_OR_PARTITION
            )
            log.info("partition removed", partition=gone.name, deleted=gone.deleted)

    def _drop(self, partition: Partition, code: int) -> None:
        self._on_stop_following(partition)
        self._acks.fail(partition, code)
        self._wake(partition)
        self._logs.remove(partition.name)

    def _wake(self, partition: Partition) -> None:
        self._appended.wake(partition)
        self._committed.wake(partition)

    # the leader's bookkeeping -----------------------------------------------------------

    def _after_isr_change(self, partition: Partition) -> None:
        """The ISR or a follower moved: the high watermark may advance."""
        self._advance_high_watermark(partition)

    def _advance_high_watermark(self, partition: Partition) -> None:
        """Strict min ISR (KIP-966): the high watermark moves only while the ISR has
        min.insync.replicas members, so a replica that leaves a smaller ISR holds every
        committed record and may be elected from the ELR (``raftka.metadata.eligible_leaders``).
        Below it, acks=all produces waiting here fail at once, as in Kafka."""
        if len(partition.isr) < int(self._topic_value(partition.topic, "min.insync.replicas")):
            self._acks.fail(partition, E.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
            return
        if partition.maybe_advance_high_watermark():
            self._acks.reached(partition, partition.high_watermark, E.NONE)
            self._committed.wake(partition)

    def shrink_isrs(self) -> None:
        """Drop followers that have not caught up for ``replica_lag_time_max_ms``."""
        now = self._clock_ms()
        for partition in self._partitions.values():
            new_isr = partition.isr_to_shrink(now, self.config.replica_lag_time_max_ms)
            if new_isr is not None:
                log.info(
                    "shrinking isr", partition=partition.name, isr=list(partition.isr), new_isr=list(new_isr)
                )
                partition.isr_change_sent(new_isr)
                self._request_isr_change(partition, new_isr)

    def isr_change_done(self, partition: Partition) -> None:
        """An AlterPartition answer arrived for ``partition``."""
        self._after_isr_change(partition)

    # produce ----------------------------------------------------------------------------

    async def produce(self, request: Pb.ProduceRequest) -> Pb.ProduceResponse:
        response = Pb.ProduceResponse()
        problem = _produce_problem(request)
        if problem:
            response.status.error, response.status.message = E.INVALID_REQUEST, problem
            return response
        size = request.ByteSize()
        if request.acks == -1 and self._bytes_waiting + size > self.config.produce_waiting_bytes_max:
            response.status.error = E.REQUEST_TIMED_OUT
            response.status.message = "too many bytes wait for in-sync replicas on this broker; retry"
            return response
        guards, refused = await self._verify_transactions(request)
        now = _now_ms()
        waits: list[tuple[Pb.ProducePartitionResult, asyncio.Future[int]]] = []
        for topic in request.topics:
            topic_result = response.topics.add(name=topic.name)
            for data in topic.partitions:
                result = topic_result.partitions.add(
                    partition=data.partition, base_offset=-1, log_append_time_ms=-1
                )
                key = (topic.name, data.partition)
                try:
                    if key in refused:
                        raise refused[key]
                    partition, required = self._append(
                        topic.name, data, request, now, result, guards.get(key)
                    )
                except PartitionError as e:
                    _set_error(result, e)
                    continue
                if request.acks == -1 and partition.high_watermark < required:
                    waits.append((result, self._acks.wait_for(partition, required)))
        if waits:
            self._bytes_waiting += size
            try:
                await self._await_acks(waits, request.timeout_ms)
            finally:
                self._bytes_waiting -= size
        return response

    async def _verify_transactions(
        self, request: Pb.ProduceRequest
    ) -> tuple[dict[Key, object], dict[Key, PartitionError]]:
        """Bind each transactional batch to its transaction: the partitions whose batches the
        image shows in ``request.transactional_id``'s ongoing transaction, at the producer id
        and epoch the coordinator issued for it, and already open here, are ``BOUND``; every
        other one is asked of the verifier (``raftka.broker.transaction_verifier``, which
        checks the id's producer and epoch and that the partition is in its transaction).
        Without this, a client that read another producer's id, epoch and sequence could
        append to that producer's open transaction under any transactional id (or none of
        its own), and the owner's commit would commit it. Answers the verified partitions
        (``BOUND``, or the guard of a verification that opens a transaction here) and the
        refused ones."""
        asked: list[tuple[Key, ProducerState, int, object, Awaitable[int]]] = []
        if not request.transactional_id:  # no transactional batch may be written: the append says so
            return {}, {}
        issued = self._image.transactions.get(request.transactional_id)
        held = (
            transactions.partitions(issued)
            if issued is not None and issued.state == transactions.State.TXN_ONGOING
            else set()
        )
        verified: dict[Key, object] = {}
        for topic in request.topics:
            for data in topic.partitions:
                header = transactional_header(data.records)
                partition = self._partitions.get((topic.name, data.partition))
                if header is None or partition is None or not partition.is_leader:
                    continue  # the append answers what is wrong, if anything
                key = (topic.name, data.partition)
                producers = partition.log.producers
                ongoing = producers.has_ongoing_transaction(header.producer_id, header.producer_epoch)
                if ongoing and key in held and _issued(issued, header):
                    verified[key] = BOUND
                    continue
                verdict = self.verifier.verify(
                    request.transactional_id,
                    header.producer_id,
                    header.producer_epoch,
                    topic.name,
                    data.partition,
                )
                # the transaction open here already: only its binding is asked, and no
                # guard (one per producer) is taken from a concurrent request that opens it
                guard = BOUND if ongoing else producers.start_verification(header.producer_id)
                asked.append((key, producers, header.producer_id, guard, verdict))
        verdicts = await asyncio.gather(*(asking[-1] for asking in asked), return_exceptions=True)
        refused: dict[Key, PartitionError] = {}
        for (key, producers, producer_id, guard, _), verdict in zip(asked, verdicts, strict=True):
            if verdict == E.NONE:
                verified[key] = guard
                continue
            if guard is not BOUND:
                producers.end_verification(producer_id, guard)
            if isinstance(verdict, BaseException):
                self._refusals.log(logging.WARNING, "transaction verification failed", error=repr(verdict))
                code, why = E.NOT_ENOUGH_REPLICAS, f"unable to verify it: {verdict!r}; retry"
            elif verdict in _VERIFICATION_RETRIABLE:
                code, why = E.NOT_ENOUGH_REPLICAS, f"unable to verify it now ({E.Name(verdict)}); retry"
            else:
                code, why = verdict, f"the coordinator refused it: {E.Name(verdict)}"
            refused[key] = PartitionError(
                code, f"{key[0]}-{key[1]} in transaction {request.transactional_id!r}: {why}"
            )
        return verified, refused

    def _append(
        self,
        topic: str,
        data: Pb.ProducePartition,
        request: Pb.ProduceRequest,
        now_ms: int,
        result: Pb.ProducePartitionResult,
        guard: object | None,
    ) -> tuple[Partition, int]:
        partition = self._leader_partition(topic, data.partition, _leader_epoch(data))
        try:
            validated = validate_batches(data.records, self._limits(partition), now_ms)
        except BatchValidationError as e:
            raise PartitionError(e.code, f"{partition.name}: {e.message}") from None
        header = validated.batches[0][1]
        if header.is_transactional:
            self._check_transactional(partition, header, request.transactional_id, guard)
        if request.acks == -1:
            self._check_min_isr(partition)
        try:
            info = self._written(
                partition,
                lambda: partition.log.append_as_leader(
                    validated.payload, validated.batches, partition.leader_epoch, now_ms
                ),
            )
        finally:
            if guard is not None and guard is not BOUND:
                partition.log.producers.end_verification(header.producer_id, guard)
        result.base_offset = info.first_offset
        if not info.duplicate:
            self.metrics.appended(len(validated.payload), info.record_count)
        result.log_start_offset = partition.log.log_start_offset
        if validated.log_append_time_ms >= 0:
            result.log_append_time_ms = info.max_timestamp if info.duplicate else validated.log_append_time_ms
        self._appended.wake(partition)
        self._advance_high_watermark(partition)
        return partition, info.last_offset + 1

    @staticmethod
    def _check_transactional(
        partition: Partition, header: BatchHeader, transactional_id: str, guard: object | None
    ) -> None:
        """A transactional batch needs its transactional id and to be bound to its transaction
        (``guard``: ``BOUND`` or a verification's guard), and one that opens a transaction
        here a verification no marker voided since (Kafka's ``batchMissingRequiredVerification``)."""
        if not transactional_id:
            raise PartitionError(
                E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                f"{partition.name}: transactional_id: a transactional batch needs its producer's transactional id",
            )
        producers = partition.log.producers
        if producers.has_ongoing_transaction(header.producer_id, header.producer_epoch) and guard is not None:
            return  # bound to its transaction (``_verify_transactions``)
        if guard is None or guard is BOUND or producers.verifying.get(header.producer_id) is not guard:
            raise PartitionError(
                E.INVALID_TXN_STATE,
                f"{partition.name}: producer {header.producer_id}'s batch is not part of an ongoing "
                "transaction here (a marker ended it while its verification was in flight)",
            )

    def _check_min_isr(self, partition: Partition) -> None:
        min_isr = int(self._topic_value(partition.topic, "min.insync.replicas"))
        if len(partition.isr) < min_isr:
            raise PartitionError(
                E.NOT_ENOUGH_REPLICAS,
                f"{partition.name}: ISR {list(partition.isr)} is below min.insync.replicas {min_isr}",
            )

    def _written(self, partition: Partition, append: Callable[[], AppendInfo]) -> AppendInfo:
        """``append`` to the leader's log: a refused producer batch is the partition's error,
        and a failed disk takes the partition offline on this broker."""
        try:
            return append()
        except ProducerStateError as e:
            raise PartitionError(e.code, f"{partition.name}: {e.message}") from None
        except OSError as e:  # the disk under this log failed: it alone goes offline
            self._take_offline(
                (partition.topic, partition.partition),
                OfflinePartition(partition.topic_id, "append", repr(e)),
            )
            raise PartitionError(
                E.KAFKA_STORAGE_ERROR, f"{partition.name}: its log failed on broker {self.local_id}: {e!r}"
            ) from None

    # transaction markers -----------------------------------------------------------------

    async def write_txn_markers(self, request: Pb.WriteTxnMarkersRequest) -> Pb.WriteTxnMarkersResponse:
        """Write each marker to each partition it names (this broker must lead them); every
        partition is answered once the ISR holds its marker (acks=all), or with its error.
        The caller is checked before (only brokers may ask: ``BrokerApi``)."""
        response = Pb.WriteTxnMarkersResponse()
        count = sum(len(t.partitions) for m in request.markers for t in m.topics)
        if count > PARTITIONS_PER_REQUEST_MAX:
            response.status.error = E.INVALID_REQUEST
            response.status.message = (
                f"markers: {count} partitions, at most {PARTITIONS_PER_REQUEST_MAX} per request"
            )
            return response
        now = _now_ms()
        waits: list[tuple[Pb.TxnMarkerPartitionResult, asyncio.Future[int]]] = []
        for marker in request.markers:
            marker_result = response.markers.add(producer_id=marker.producer_id)
            for topic in marker.topics:
                topic_result = marker_result.topics.add(name=topic.name)
                for partition_id in topic.partitions:
                    result = topic_result.partitions.add(partition=partition_id)
                    try:
                        partition, required = self._append_marker(topic.name, partition_id, marker, now)
                    except PartitionError as e:
                        result.error, result.message = e.code, e.message
                        continue
                    if partition.high_watermark < required:
                        waits.append((result, self._acks.wait_for(partition, required)))
        if waits:
            await self._await_acks(waits, MARKER_TIMEOUT_MS)
        return response

    def _append_marker(
        self, topic: str, partition_id: int, marker: Pb.TxnMarker, now_ms: int
    ) -> tuple[Partition, int]:
        if marker.producer_id < 0 or not 0 <= marker.producer_epoch < 1 << 15:
            raise PartitionError(
                E.INVALID_REQUEST,
                f"producer_id {marker.producer_id}, producer_epoch {marker.producer_epoch}: "
                "a producer id and an epoch in 0..32767",
            )
        partition = self._leader_partition(topic, partition_id, -1)
        self._check_min_isr(partition)
        info = self._written(
            partition,
            lambda: partition.log.append_marker(
                marker.producer_id,
                marker.producer_epoch,
                marker.committed,
                marker.coordinator_epoch,
                partition.leader_epoch,
                now_ms,
            ),
        )
        self._appended.wake(partition)
        self._advance_high_watermark(partition)
        return partition, info.last_offset + 1

    def _limits(self, partition: Partition) -> BatchLimits:
        value = lambda key: self._topic_value(partition.topic, key)  # noqa: E731
        return BatchLimits(
            compacted=partition.log.config.compact,
            max_message_bytes=int(value("max.message.bytes")),
            uncompressed_batch_bytes_max=self.config.uncompressed_batch_bytes_max,
            timestamp_type=value("message.timestamp.type"),
            timestamp_before_max_ms=int(value("message.timestamp.before.max.ms")),
            timestamp_after_max_ms=int(value("message.timestamp.after.max.ms")),
        )

    async def _await_acks(
        self,
        waits: list[tuple[Pb.ProducePartitionResult | Pb.TxnMarkerPartitionResult, asyncio.Future[int]]],
        timeout_ms: int,
    ) -> None:
        futures = [future for _, future in waits]
        try:
            await asyncio.wait(futures, timeout=timeout_ms / 1000)
        finally:  # timed out, or this produce was cancelled (its connection closed)
            for future in futures:
                future.cancel()  # the waiter is let go at once (a done one stays as it is)
        for result, future in waits:
            if future.cancelled():
                result.error = E.REQUEST_TIMED_OUT
                result.message = f"the in-sync replicas did not confirm within {timeout_ms} ms"
            elif future.result() != E.NONE:
                result.error = future.result()
                result.message = _ACK_MESSAGES.get(future.result(), "")

    def _leader_partition(self, topic: str, partition_id: int, current_leader_epoch: int) -> Partition:
        partition = self._partitions.get((topic, partition_id))
        if partition is None:
            offline = self._offline.get((topic, partition_id))
            if offline is not None and offline.topic_id == self._image.topic_ids_by_name.get(topic):
                raise PartitionError(
                    E.KAFKA_STORAGE_ERROR,
                    f"{topic}-{partition_id} is offline on broker {self.local_id}: "
                    f"its log failed ({offline.change})",
                )
            raise self._not_here(topic, partition_id)
        partition.check_leader(current_leader_epoch)
        return partition

    def _not_here(self, topic: str, partition_id: int) -> PartitionError:
        """UNKNOWN_TOPIC_OR_PARTITION, or NOT_LEADER_OR_FOLLOWER naming the leader the image knows
        (none while this broker does not serve yet: the image may still name it)."""
        image_topic = self._image.topic(topic)
        state = None if image_topic is None else image_topic.partitions.get(partition_id)
        if state is None:
            return PartitionError(E.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {topic}-{partition_id}")
        if not self._serving:
            return PartitionError(
                E.NOT_LEADER_OR_FOLLOWER,
                f"broker {self.local_id} serves no partition yet: this process is not registered "
                "and unfenced by the controller",
            )
        return PartitionError(
            E.NOT_LEADER_OR_FOLLOWER,
            f"broker {self.local_id} is not a replica of {topic}-{partition_id}",
            state.leader,
            state.leader_epoch,
        )

    # fetch ------------------------------------------------------------------------------

    async def fetch(self, request: Pb.FetchRequest) -> Pb.FetchResponse:
        problem = _fetch_problem(request)
        if problem:
            response = Pb.FetchResponse()
            response.status.error, response.status.message = E.INVALID_REQUEST, problem
            return response
        deadline = time.monotonic() + request.max_wait_ms / 1000
        wakeups = self._appended if request.replica_id >= 0 else self._committed
        arrived = True
        while True:
            refused = self._refused_follower(request)  # on every pass: the image may move while parked
            if refused is not None:
                return refused
            response, size, stop, keys = self._read(request, arrived)
            arrived = False
            remaining = deadline - time.monotonic()
            if (
                stop
                or size >= request.min_bytes
                or remaining <= 0
                or wakeups.count >= self.config.fetch_parked_max
            ):
                if request.replica_id >= 0:
                    self._count_throttled(response)
                return response
            await wakeups.wait(keys, remaining)

    def _refused_follower(self, request: Pb.FetchRequest) -> Pb.FetchResponse | None:
        """The answer to a follower fetch that may not count as that broker's
        (``raftka.broker.replica.follower_check``): nothing read, nothing recorded."""
        if request.replica_id < 0:
            return None
        principal = current_principal.get()
        refusal = follower_refusal(self._image, request.replica_id, request.replica_epoch, principal)
        if refusal is None:
            return None
        self._refusals.log(
            logging.INFO if refusal.code in ROUTINE_REFUSALS else logging.WARNING,
            "follower fetch refused",
            replica_id=request.replica_id,
            principal=None if principal is None else principal.name,
            error=E.Name(refusal.code),
            detail=refusal.message,
        )
        response = Pb.FetchResponse()
        response.status.error, response.status.message = refusal.code, refusal.message
        return response

    def _read(
        self, request: Pb.FetchRequest, arrived: bool
    ) -> tuple[Pb.FetchResponse, int, bool, list[Partition]]:
        """One pass over the asked partitions: (answer, bytes, answer at once, partitions to park on).
        A follower's fetch offsets are recorded on the pass when it ``arrived`` only: woken
        later, a parked fetch must not set back what the follower's newer fetches recorded
        (as Kafka's ``updateFollowerFetchState``, once per request). On a listener's
        connection, the answer takes no more than the room its connection's other answers
        leave (``answer_room``); with no room, it takes nothing."""
        response = Pb.FetchResponse()
        room = current_answer_room.get()
        budget = request.max_bytes if room is None else min(request.max_bytes, room.available())
        first_batch_whole = budget > 0  # Kafka's KIP-74: the first batch comes whole, however large
        size = 0
        stop = False
        keys: list[Partition] = []
        now = self._clock_ms()
        for topic in request.topics:
            topic_result = response.topics.add(name=topic.name, topic_id=topic.topic_id)
            for data in topic.partitions:
                result = topic_result.partitions.add(
                    partition=data.partition, high_watermark=-1, log_start_offset=-1, last_stable_offset=-1
                )
                try:
                    partition = self._fetch_partition(topic, data, request, arrived, now, result)
                except PartitionError as e:
                    _set_error(result, e)
                    stop = True
                    continue
                if result.HasField("diverging_epoch"):
                    stop = True
                    continue
                if request.replica_id >= 0 and self.leader_quota.hold_back(
                    partition.topic, partition.partition, request.replica_id in partition.isr
                ):
                    continue  # answered with no records, and nothing to wake this fetch for
                keys.append(partition)
                max_bytes = min(data.partition_max_bytes, budget)
                if max_bytes <= 0 and size > 0:
                    continue
                committed = request.isolation_level == READ_COMMITTED and request.replica_id < 0
                if request.replica_id >= 0:
                    max_offset = None
                else:
                    max_offset = result.last_stable_offset if committed else partition.high_watermark
                read = partition.log.read(
                    data.fetch_offset,
                    max(max_bytes, 1),
                    max_offset=max_offset,
                    min_one_batch=size == 0 and first_batch_whole,
                )
                result.records = read.records
                if committed and read.records:
                    for aborted in partition.log.aborted_transactions(
                        data.fetch_offset, _end_of(read.records)
                    ):
                        result.aborted_transactions.add(
                            producer_id=aborted.producer_id, first_offset=aborted.first_offset
                        )
                size += len(read.records)
                budget -= len(read.records)
        if room is not None:
            room.hold(size)
        return response, size, stop, keys

    def _count_throttled(self, response: Pb.FetchResponse) -> None:
        """The bytes of throttled partitions in a follower's answer count against the leader's
        quota (Kafka's ``sizeOfThrottledPartitions``), in sync or not."""
        quota = self.leader_quota
        if not quota.throttles_any():
            return
        size = sum(
            len(result.records)
            for topic in response.topics
            for result in topic.partitions
            if result.records and quota.is_throttled(topic.name, result.partition)
        )
        if size:
            quota.record(size)

    def _fetch_partition(
        self,
        topic: Pb.FetchTopic,
        data: Pb.FetchPartition,
        request: Pb.FetchRequest,
        arrived: bool,
        now_ms: int,
        result: Pb.FetchPartitionResult,
    ) -> Partition:
        partition = self._leader_partition(topic.name, data.partition, _leader_epoch(data))
        if topic.topic_id and topic.topic_id != partition.topic_id:
            raise PartitionError(
                E.UNKNOWN_TOPIC_OR_PARTITION, f"{partition.name} is another topic by that name now"
            )
        result.leader_id, result.leader_epoch = partition.leader_id, partition.leader_epoch
        log_start, log_end = partition.log.log_start_offset, partition.log.log_end_offset
        result.high_watermark = partition.high_watermark
        result.last_stable_offset = partition.last_stable_offset
        result.log_start_offset, result.log_end_offset = log_start, log_end
        follower = request.replica_id
        if follower >= 0 and (follower not in partition.replicas or follower == self.local_id):
            raise PartitionError(
                E.NOT_LEADER_OR_FOLLOWER, f"broker {follower} is not a follower of {partition.name}"
            )
        out_of_range = PartitionError(
            E.OFFSET_OUT_OF_RANGE,
            f"{partition.name}: offset {data.fetch_offset} is outside [{log_start}, {log_end}]",
            partition.leader_id,
            partition.leader_epoch,
        )
        if follower < 0 and data.fetch_offset < log_start:
            raise out_of_range  # below the log start, whatever the epochs say (as Kafka)
        diverging = partition.diverging_epoch(data.fetch_offset, _last_fetched_epoch(data, follower))
        if diverging is not None:
            if follower < 0 and min(diverging) < 0:  # no epoch that old here: a consumer resets
                raise PartitionError(
                    E.OFFSET_OUT_OF_RANGE,
                    f"{partition.name}: no end offset for leader epoch {data.last_fetched_epoch}",
                    partition.leader_id,
                    partition.leader_epoch,
                )
            result.diverging_epoch.epoch, result.diverging_epoch.end_offset = diverging
            return partition
        if not log_start <= data.fetch_offset <= log_end:
            raise out_of_range
        if follower >= 0 and arrived:
            self._follower_fetched(partition, follower, request.replica_epoch, data.fetch_offset, now_ms)
            result.high_watermark = partition.high_watermark
            result.last_stable_offset = partition.last_stable_offset
        return partition

    def _follower_fetched(
        self, partition: Partition, follower: int, broker_epoch: int, fetch_offset: int, now_ms: int
    ) -> None:
        partition.update_follower(follower, fetch_offset, now_ms, broker_epoch)
        self._advance_high_watermark(partition)
        new_isr = partition.isr_to_expand(follower)  # registered and unfenced: _refused_follower
        if new_isr is not None:
            log.info(
                "expanding isr", partition=partition.name, isr=list(partition.isr), new_isr=list(new_isr)
            )
            partition.isr_change_sent(new_isr)
            self._request_isr_change(partition, new_isr)

    # list offsets -----------------------------------------------------------------------

    def list_offsets(self, request: Pb.ListOffsetsRequest) -> Pb.ListOffsetsResponse:
        response = Pb.ListOffsetsResponse()
        if request.isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
            response.status.error = E.INVALID_REQUEST
            response.status.message = f"isolation_level: {request.isolation_level} is not 0 (read_uncommitted) or 1 (read_committed)"
            return response
        count = sum(len(t.partitions) for t in request.topics)
        if count > PARTITIONS_PER_REQUEST_MAX:
            response.status.error = E.INVALID_REQUEST
            response.status.message = (
                f"topics: {count} partitions, at most {PARTITIONS_PER_REQUEST_MAX} per request"
            )
            return response
        for topic in request.topics:
            topic_result = response.topics.add(name=topic.name)
            for data in topic.partitions:
                result = topic_result.partitions.add(partition=data.partition, timestamp=-1, offset=-1)
                try:
                    self._list_offset(topic.name, data, result, request.isolation_level)
                except PartitionError as e:
                    _set_error(result, e)
        return response

    def _list_offset(
        self,
        topic: str,
        data: Pb.ListOffsetsPartition,
        result: Pb.ListOffsetsPartitionResult,
        isolation_level: int,
    ) -> None:
        partition = self._leader_partition(topic, data.partition, _leader_epoch(data))
        result.leader_id, result.leader_epoch = partition.leader_id, partition.leader_epoch
        if data.timestamp in (LIST_EARLIEST, LIST_EARLIEST_LOCAL):
            result.offset = partition.log.log_start_offset
        elif data.timestamp == LIST_LATEST:
            partition.check_high_watermark_caught_up()
            committed = isolation_level == READ_COMMITTED
            result.offset = partition.last_stable_offset if committed else partition.high_watermark
        elif data.timestamp == LIST_LATEST_TIERED:
            pass  # offset -1: nothing is in remote storage
        elif data.timestamp == LIST_MAX_TIMESTAMP:
            found = partition.log.max_timestamp_record()
            if found is not None and found[0] < partition.high_watermark:
                result.offset, result.timestamp = found
        elif data.timestamp < 0:
            raise PartitionError(
                E.INVALID_REQUEST, f"timestamp: {data.timestamp} is not -5 to -1 or a time in ms"
            )
        else:
            found = partition.log.offset_for_timestamp(data.timestamp)
            if found is not None and found[0] < partition.high_watermark:
                result.offset, result.timestamp = found
            else:  # none below the high watermark: perhaps only because it lags
                partition.check_high_watermark_caught_up()

    def end_offset_for_epoch(
        self, topic: str, partition_id: int, current_leader_epoch: int, epoch: int
    ) -> tuple[int, int]:
        """(the largest leader epoch at most ``epoch``, where it ends) in the leader's log,
        (-1, -1) if none: how a consumer finds whether its position survived a leader
        change (Kafka's OffsetForLeaderEpoch, KIP-320)."""
        return self._leader_partition(topic, partition_id, current_leader_epoch).log.end_offset_for_epoch(
            epoch
        )

    # upkeep -----------------------------------------------------------------------------

    def high_watermarks(self) -> dict[str, int]:
        """What to checkpoint. Before this incarnation serves, the checkpoint read at start
        stands too: a broker stopped again before it serves must not forget them."""
        current = {p.name: p.high_watermark for p in self._partitions.values()}
        return current if self._serving else {**self._checkpointed_high_watermarks, **current}

    def truncated(self, partitions: list[Partition], then: Callable[[], None]) -> None:
        """Followers' logs were cut: nothing parked reads stale state, and the lowered
        recovery points are checkpointed (as Kafka's ``LogManager.truncateTo`` does), so a
        crash does not take what is written after the cut for flushed data; ``then`` once
        that is on disk (the fetcher appends nothing to them before)."""
        for partition in partitions:
            self._wake(partition)
        self._logs.checkpoint_recovery_points(then)


PARTITIONS_PER_REQUEST_MAX = 10_000
_ACK_MESSAGES = {
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "written, but the ISR shrank below min.insync.replicas while waiting",
    E.NOT_LEADER_OR_FOLLOWER: "leadership moved while waiting for the in-sync replicas",
    E.UNKNOWN_TOPIC_OR_PARTITION: "the partition was deleted while waiting for the in-sync replicas",
}


def _leader_epoch(data) -> int:  # noqa: ANN001 - a Produce/Fetch/ListOffsets partition
    """The leader epoch the client knows, -1 when it sent none (not checked)."""
    return data.current_leader_epoch if data.HasField("current_leader_epoch") else -1


def _last_fetched_epoch(data: Pb.FetchPartition, replica_id: int) -> int:
    """The epoch a fetch says it last read, -1 to skip the check: a replica's always (unset
    is proto3's 0, which replicas sent for epoch 0 before the field had presence), a
    consumer's only when it sent one (Kafka's consumers validate their position this way
    from Fetch v12, KIP-320)."""
    if replica_id >= 0 or data.HasField("last_fetched_epoch"):
        return data.last_fetched_epoch
    return -1


def _set_error(result, error: PartitionError) -> None:  # noqa: ANN001 - any per-partition result
    result.error = error.code
    result.message = error.message
    if hasattr(result, "leader_id"):
        result.leader_id, result.leader_epoch = error.leader_id, error.leader_epoch


def _produce_problem(request: Pb.ProduceRequest) -> str:
    if request.acks not in ACKS:
        return f"acks: {request.acks} is not one of -1 (all), 0 or 1"
    if not 0 <= request.timeout_ms <= TIMEOUT_MS_MAX:
        return f"timeout_ms: {request.timeout_ms} is outside 0..{TIMEOUT_MS_MAX}"
    return _partition_count_problem(request.topics)


def _issued(issued: transactions.TransactionRecord | None, header: BatchHeader) -> bool:
    """The batch carries the producer id and epoch the coordinator issued (``issued``)."""
    return (
        issued is not None
        and issued.producer_id == header.producer_id
        and issued.producer_epoch == header.producer_epoch
    )


def _end_of(records: bytes) -> int:
    """The offset after the last of ``records`` (whole batches, as a log read returns them)."""
    position, header = 0, read_header(records)
    while position + header.size < len(records):
        position += header.size
        header = read_header(records, position)
    return header.next_offset


def _fetch_problem(request: Pb.FetchRequest) -> str:
    if request.isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
        return f"isolation_level: {request.isolation_level} is not 0 (read_uncommitted) or 1 (read_committed)"
    if request.replica_id < -1:
        return f"replica_id: {request.replica_id} is not -1 (a consumer) or a broker id"
    if not 0 <= request.max_wait_ms <= FETCH_WAIT_MS_MAX:
        return f"max_wait_ms: {request.max_wait_ms} is outside 0..{FETCH_WAIT_MS_MAX}"
    if not 0 <= request.min_bytes <= FETCH_BYTES_MAX:
        return f"min_bytes: {request.min_bytes} is outside 0..{FETCH_BYTES_MAX}"
    if not 0 < request.max_bytes <= FETCH_BYTES_MAX:
        return f"max_bytes: {request.max_bytes} is outside 1..{FETCH_BYTES_MAX}"
    for topic in request.topics:
        for data in topic.partitions:
            if not 0 < data.partition_max_bytes <= FETCH_BYTES_MAX:
                return f"partition_max_bytes: {data.partition_max_bytes} for {topic.name}-{data.partition} is outside 1..{FETCH_BYTES_MAX}"
    return _partition_count_problem(request.topics)


def _partition_count_problem(topics) -> str:  # noqa: ANN001 - repeated Produce/FetchTopic
    count = sum(len(t.partitions) for t in topics)
    if count > PARTITIONS_PER_REQUEST_MAX:
        return f"topics: {count} partitions, at most {PARTITIONS_PER_REQUEST_MAX} per request"
    seen: set[tuple[str, int]] = set()
    for topic in topics:
        for data in topic.partitions:
            key = (topic.name, data.partition)
            if key in seen:
                return f"topics: {topic.name}-{data.partition} appears more than once"
            seen.add(key)
    return ""
