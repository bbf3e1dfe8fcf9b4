"""The consumer: assigned partitions, read from their leaders with prefetching.

Positions are Kafka's: ``position(tp)`` is the next offset ``poll`` returns. A partition
without one gets it from the group's committed offset (with ``group_id``) or from
``auto_offset_reset`` (earliest, latest, or none: ``OffsetOutOfRangeError``), and so
does one whose fetch answers OFFSET_OUT_OF_RANGE. A background loop keeps one Fetch in
flight per leader broker, covering every assigned partition it leads, and buffers the
answers' raw record batches, bounded by ``prefetch_max_bytes``; ``poll`` decodes records
as it takes them (Kafka's CompletedFetch), so the buffer never holds a Python object per
record (a prefetch of millions of them made the garbage collector the consumer's
largest cost). Records that do not decode, or a compressed batch that would grow past
``uncompressed_batch_bytes_max`` (a decompression bomb: the consumer trusts no broker to
have bounded it), are returned up to the damage, then ``poll`` raises ``CORRUPT_MESSAGE``
naming the partition and offset until the application seeks past them. A leader that moved
(NOT_LEADER_OR_FOLLOWER, a fenced or unknown leader epoch) sends the loop to the
metadata again. A seek drops what was prefetched for that partition.

Transactions: with ``isolation_level="read_committed"`` the consumer reads only below
each partition's last stable offset and drops the records of aborted transactions, using
the aborted list each fetch answer carries, exactly as Kafka's consumer does
(``raftka.records.read_committed``); ``"read_uncommitted"``, the default as in Kafka's
Java consumer (librdkafka's is read_committed), reads up to the high watermark and
returns aborted records too. Control records (transaction markers) are never returned,
in either mode; a position moves past them. ``end_offsets`` and a reset or seek to the
end are at the consumer's isolation level too (read_committed: the last stable offset).

A leader change can cut records the consumer fetched (an unclean election). Each fetch
says which leader epoch the consumer last read, so the leader answers with the diverging
epoch instead of serving on past the cut (Kafka's KIP-320, checked in the fetch itself,
as KIP-595's followers do, rather than by a separate OffsetForLeaderEpoch call). The
consumer then goes back to where that epoch ends on the leader's log, logging the
truncation when records it returned are gone, or, with ``auto_offset_reset='none'``,
raises ``LogTruncationError`` naming that offset until the application seeks.

Partitions come from ``assign`` (chosen by the application) or from ``subscribe`` (a
consumer group shares the topics' partitions among its members; ``raftka.client.group`` runs
the membership). In a group, ``poll`` joins again when a rebalance is due and calls the
rebalance listener: ``on_partitions_revoked`` before partitions go (after committing
their positions with ``enable_auto_commit``), ``on_partitions_assigned`` when new ones
come, ``on_partitions_lost`` when the member was dropped and another may already own
them (nothing is committed then). With ``enable_auto_commit`` the positions are also
committed every ``auto_commit_interval_ms`` from ``poll`` and on ``close``.

Commits go to the group's coordinator (a broker), as a member of its current generation
when subscribed; a commit refused for a stale generation or membership raises
``CommitFailedError`` and the member joins again. ``committed`` reads through any broker
from the controller: the committed offset is the next offset to read, as in Kafka.

``AsyncConsumer`` is the asyncio consumer; ``Consumer`` runs one on a private event-loop
thread, so prefetching and the group's heartbeats go on between calls.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from raftka.client.cluster_metadata import LIST_EARLIEST, LIST_LATEST, RETRIABLE, ClusterMetadata
from raftka.client.errors import (
    CommitFailedError,
    ConsumerError,
    KafkaError,
    LogTruncationError,
    OffsetOutOfRangeError,
)
from raftka.client.group import GroupMember
from raftka.client.loop_thread import LoopThread
from raftka.client.types import ConsumerGroupMetadata, ConsumerRecord, TopicPartition
from raftka.records.batch import iter_batches
from raftka.records.codec import RecordError, data_batches
from raftka.records.read_committed import AbortedBatches
from raftka.security.sasl import SaslCredentials
from raftka.security.tls import TlsFiles
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import BrokerClient, WireError

E = controller_pb2.ErrorCode
log = structlog.get_logger("raftka.client.consumer")
RESETS = ("earliest", "latest", "none")
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
ERROR_BACKOFF_S = 0.1


class AsyncConsumer:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        group_id: str | None = None,
        auto_offset_reset: str = "latest",
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 50 << 20,
        max_partition_fetch_bytes: int = 1 << 20,
        prefetch_max_bytes: int = 64 << 20,
        uncompressed_batch_bytes_max: int = 64 << 20,
        request_timeout_ms: int = 30_000,
        client_id: str = "raftka-consumer",
        group_instance_id: str | None = None,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 1_000,  # Kafka's is 3000; a heartbeat costs little here and is how a member hears of a rebalance
        max_poll_interval_ms: int = 300_000,
        partition_assignment_strategy: Sequence[str] = ("range", "cooperative-sticky"),
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        tls: TlsFiles | None = None,
        sasl: SaslCredentials | None = None,
        isolation_level: str = "read_uncommitted",
    ) -> None:
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError(
                f"isolation_level: {isolation_level!r} is not one of {', '.join(ISOLATION_LEVELS)}"
            )
        if auto_offset_reset not in RESETS:
            raise ValueError(f"auto_offset_reset: {auto_offset_reset!r} is not one of {', '.join(RESETS)}")
        if group_id is not None and not group_id:
            raise ValueError("group_id: must not be empty")
        if uncompressed_batch_bytes_max < 1:
            raise ValueError(
                f"uncompressed_batch_bytes_max: must be 1 or more, got {uncompressed_batch_bytes_max}"
            )
        self.group_id = group_id
        self._isolation_level = ISOLATION_LEVELS[isolation_level]
        self._reset = auto_offset_reset
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._fetch_min_bytes = fetch_min_bytes
        self._fetch_max_bytes = fetch_max_bytes
        self._partition_max_bytes = max_partition_fetch_bytes
        self._prefetch_max_bytes = prefetch_max_bytes
        self._uncompressed_batch_bytes_max = uncompressed_batch_bytes_max
        self._timeout_s = request_timeout_ms / 1000
        self.metadata = ClusterMetadata(
            bootstrap_servers, request_timeout_s=self._timeout_s, tls=tls, sasl=sasl
        )
        self._assigned: list[TopicPartition] = []
        self._fetch_position: dict[TopicPartition, int] = {}  # next offset to fetch
        # The leader epoch of the batch before the fetch position, when known (KIP-320):
        # every change of a fetch position other than by fetched records drops it.
        self._fetch_epoch: dict[TopicPartition, int] = {}
        self._position: dict[TopicPartition, int] = {}  # next offset poll returns
        # Fetched records, one chunk per partition answer, decoded as poll takes them.
        self._buffer: collections.deque[_Chunk] = collections.deque()
        self._buffered_bytes = 0
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._error: ConsumerError | None = None
        self._fetcher: asyncio.Task[None] | None = None
        self._closed = False
        self._subscription: frozenset[str] = frozenset()
        self._listener: RebalanceListener = RebalanceListener()
        self._auto_commit = enable_auto_commit and group_id is not None
        self._auto_commit_s = auto_commit_interval_ms / 1000
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._auto_committing: asyncio.Task[None] | None = None
        self._metadata_max_age_s = metadata_max_age_ms / 1000
        self._metadata_checked = time.monotonic()
        self._partition_counts: dict[str, int] | None = None  # of the subscribed topics, at the last join
        self._group = (
            None
            if group_id is None
            else GroupMember(
                self.metadata,
                group_id,
                client_id=client_id,
                assignors=partition_assignment_strategy,
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                max_poll_interval_ms=max_poll_interval_ms,
                group_instance_id=group_instance_id,
                retry_backoff_ms=retry_backoff_ms,
                request_timeout_s=self._timeout_s,
            )
        )

    # subscription (a consumer group) --------------------------------------------------

    def subscribe(self, topics: Sequence[str], listener: RebalanceListener | None = None) -> None:
        """Share ``topics``' partitions with the other members of ``group_id``; the next
        ``poll`` joins the group."""
        if self._group is None:
            raise ConsumerError("INVALID_GROUP_ID", "subscribe needs a group_id")
        if self._assigned and not self._subscription:
            raise ConsumerError("ILLEGAL_STATE", "subscribe after assign: call unsubscribe first")
        if not topics:
            raise ValueError("topics: at least one topic to subscribe to")
        if frozenset(topics) != self._subscription:
            self._subscription = frozenset(topics)
            self._group.rejoin_needed = True
        self._listener = listener or RebalanceListener()

    def subscription(self) -> frozenset[str]:
        return self._subscription

    async def unsubscribe(self) -> None:
        """Leave the group (committing first with ``enable_auto_commit``) and drop every partition."""
        if self._group is not None and self._subscription:
            await self._revoked(frozenset(self._assigned))
            await self._group.leave("the consumer unsubscribed")
        self._subscription = frozenset()
        self._set_assignment([])

    async def _ensure_group(self, timeout_s: float) -> None:
        """In a group: join again if a rebalance is due (the listener runs here). A
        subscribed topic that gained partitions, or came into being, since the last join
        is a reason too, as every Kafka consumer checks (``metadata_max_age_ms``)."""
        assert self._group is not None
        if time.monotonic() - self._metadata_checked > self._metadata_max_age_s:
            self._metadata_checked = time.monotonic()
            await self._refresh()
        for topic in self._subscription:
            with contextlib.suppress(KafkaError):  # a topic that does not exist yet gets no partitions
                await self.metadata.topic(topic)
        counts = {
            t: len(self.metadata.topics[t].partitions)
            for t in self._subscription
            if t in self.metadata.topics
        }
        if self._partition_counts is not None and counts != self._partition_counts:
            self._group.rejoin_needed = True
        self._partition_counts = counts
        await self._group.ensure_active(
            self._subscription, self._revoked, self._assigned_more, self._lost, timeout_s
        )

    async def _revoked(self, partitions: frozenset[TopicPartition]) -> None:
        if self._auto_commit and partitions:
            await self._commit_quietly({tp: self._position[tp] for tp in partitions if tp in self._position})
        await _call_listener(self._listener.on_partitions_revoked, partitions)
        self._set_assignment([tp for tp in self._assigned if tp not in partitions])

    async def _assigned_more(self, partitions: frozenset[TopicPartition]) -> None:
        self._set_assignment([*self._assigned, *sorted(partitions)])
        await _call_listener(self._listener.on_partitions_assigned, partitions)

    async def _lost(self, partitions: frozenset[TopicPartition]) -> None:
        await _call_listener(self._listener.on_partitions_lost, partitions)
        self._set_assignment([tp for tp in self._assigned if tp not in partitions])

    # assignment and positions ----------------------------------------------------------

    async def assign(self, partitions: Sequence[TopicPartition]) -> None:
        if self._subscription:
            raise ConsumerError("ILLEGAL_STATE", "assign while subscribed: call unsubscribe first")
        for tp in partitions:
            try:
                await self.metadata.partition(tp)
            except KafkaError as e:
                raise ConsumerError(e.code, e.message) from None
        self._set_assignment(partitions)

    def _set_assignment(self, partitions: Sequence[TopicPartition]) -> None:
        """Take ``partitions``; positions and prefetched records of the others are dropped."""
        self._assigned = list(dict.fromkeys(partitions))
        keep = set(self._assigned)
        for positions in (self._position, self._fetch_position, self._fetch_epoch):
            for tp in list(positions):
                if tp not in keep:
                    del positions[tp]
        self._drop_buffered(lambda tp: tp not in keep)

    async def assign_topic(self, topic: str) -> None:
        info = await self.metadata.topic(topic)
        await self.assign([TopicPartition(topic, p) for p in sorted(info.partitions)])

    def assignment(self) -> list[TopicPartition]:
        return list(self._assigned)

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """The group as a transactional producer commits this consumer's offsets in it
        (``send_offsets_to_transaction``): its current generation and member id."""
        if self._group is None or self.group_id is None:
            raise ConsumerError("INVALID_GROUP_ID", "consumer_group_metadata needs a group_id")
        return ConsumerGroupMetadata(
            self.group_id, self._group.generation, self._group.member_id, self._group.group_instance_id
        )

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if tp not in self._assigned:
            raise ConsumerError("ILLEGAL_STATE", f"{tp} is not assigned")
        if offset < 0:
            raise ValueError(f"offset: {offset} is negative")
        self._position[tp] = self._fetch_position[tp] = offset
        self._fetch_epoch.pop(tp, None)
        self._drop_buffered(lambda buffered: buffered == tp)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        await self._seek_to(partitions or self._assigned, LIST_EARLIEST)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        await self._seek_to(partitions or self._assigned, LIST_LATEST)

    async def _seek_to(self, partitions: Sequence[TopicPartition], timestamp: int) -> None:
        found = await self.metadata.list_offsets(list(partitions), timestamp, self._isolation_level)
        for tp, (offset, _) in found.items():
            self.seek(tp, offset)

    async def position(self, tp: TopicPartition) -> int:
        if tp not in self._position:
            await self._resolve_positions()
        return self._position[tp]

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The latest offsets: the high watermarks, or read_committed the last stable offsets
        (as Kafka's consumer answers ``endOffsets``)."""
        found = await self.metadata.list_offsets(list(partitions), LIST_LATEST, self._isolation_level)
        return {tp: offset for tp, (offset, _) in found.items()}

    async def _resolve_positions(self) -> None:
        missing = [tp for tp in self._assigned if tp not in self._position]
        if not missing:
            return
        if self.group_id is not None:
            for tp, offset in (await self.committed(missing)).items():
                if offset is not None:
                    self._position[tp] = self._fetch_position[tp] = offset
                    self._fetch_epoch.pop(tp, None)
            missing = [tp for tp in missing if tp not in self._position]
        if not missing:
            return
        if self._reset == "none":
            raise OffsetOutOfRangeError(
                "OFFSET_OUT_OF_RANGE",
                "no valid position and auto_offset_reset='none': " + ", ".join(map(str, missing)),
            )
        await self._seek_to(missing, LIST_EARLIEST if self._reset == "earliest" else LIST_LATEST)

    # polling ---------------------------------------------------------------------------

    async def poll(self, timeout_ms: int, max_records: int = 500) -> list[ConsumerRecord]:
        """Records from the buffer, waiting up to ``timeout_ms`` for the first (a group's
        rebalance included: while it goes on, poll returns what the member still owns)."""
        deadline = time.monotonic() + timeout_ms / 1000
        if self._subscription:
            await self._ensure_group(timeout_ms / 1000)
            timeout_ms = max(0, int((deadline - time.monotonic()) * 1000))
        self._maybe_auto_commit()
        await self._resolve_positions()
        if self._fetcher is None or self._fetcher.done():
            if self._fetcher is not None and self._fetcher.exception() is not None:
                raise self._fetcher.exception()  # type: ignore[misc]
            self._fetcher = asyncio.create_task(self._fetch_loop(), name="consumer-fetcher")
        if not self._buffer and self._error is None:
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), timeout_ms / 1000)
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        records: list[ConsumerRecord] = []
        while self._buffer and len(records) < max_records:
            chunk = self._buffer[0]
            wanted = max_records - len(records)
            before = len(records)
            problem = None
            try:
                records += itertools.islice(chunk.records, wanted)  # on an error, what came before it stays
            except RecordError as e:
                problem = e
            taken = len(records) - before
            if taken:
                self._position[chunk.tp] = records[-1].offset + 1
            if problem is not None:
                self._corrupt(chunk.tp, problem)
                break
            if taken < wanted:  # all taken: past its markers and dropped batches too
                self._position[chunk.tp] = max(self._position.get(chunk.tp, chunk.end), chunk.end)
                self._buffer.popleft()
                self._buffered_bytes -= chunk.size
        self._room.set()
        if not records and self._error is not None:
            error, self._error = self._error, None
            raise error
        return records

    def _corrupt(self, tp: TopicPartition, problem: RecordError) -> None:
        """Records of ``tp`` that do not decode: what came before them is returned, the
        next poll raises, and the partition is fetched again from its position, so it
        raises again until the application seeks past them (as Kafka's consumer does)."""
        self._drop_buffered(lambda buffered: buffered == tp)
        self._fetch_position[tp] = self._position[tp]
        self._fetch_epoch.pop(tp, None)
        self._error = ConsumerError(
            "CORRUPT_MESSAGE", f"{tp} at offset {self._position[tp]}: records do not decode: {problem}"
        )

    async def _fetch_loop(self) -> None:
        in_flight: dict[int, asyncio.Task[None]] = {}
        try:
            while not self._closed:
                if self._buffered_bytes >= self._prefetch_max_bytes:
                    self._room.clear()
                    await self._room.wait()
                    continue
                await self._resolve_fetch_positions()
                for leader, partitions in self._by_leader().items():
                    if leader not in in_flight:
                        in_flight[leader] = asyncio.create_task(self._fetch(leader, partitions))
                if not in_flight:
                    await asyncio.sleep(ERROR_BACKOFF_S)
                    await self._refresh()
                    continue
                done, _ = await asyncio.wait(in_flight.values(), return_when=asyncio.FIRST_COMPLETED)
                for leader, task in list(in_flight.items()):
                    if task in done:
                        del in_flight[leader]
                        task.result()
        finally:
            for task in in_flight.values():
                task.cancel()

    async def _resolve_fetch_positions(self) -> None:
        try:
            await self._resolve_positions()
        except ConsumerError as e:
            self._error = e
            self._arrived.set()
        for tp in self._assigned:
            if tp in self._position and tp not in self._fetch_position:
                self._fetch_position[tp] = self._position[tp]

    def _by_leader(self) -> dict[int, list[TopicPartition]]:
        grouped: dict[int, list[TopicPartition]] = {}
        for tp in self._assigned:
            state = self.metadata.leader(tp)
            if tp in self._fetch_position and state is not None and state.leader >= 0:
                grouped.setdefault(state.leader, []).append(tp)
        return grouped

    async def _fetch(self, leader: int, partitions: list[TopicPartition]) -> None:
        broker = self.metadata.broker(leader)
        if broker is None:
            await self._refresh()
            return
        request = broker_pb2.FetchRequest(
            replica_id=-1,
            max_wait_ms=self._fetch_max_wait_ms,
            min_bytes=self._fetch_min_bytes,
            max_bytes=self._fetch_max_bytes,
            isolation_level=self._isolation_level,
        )
        sent: dict[TopicPartition, int] = {}
        topics: dict[str, broker_pb2.FetchTopic] = {}
        for tp in partitions:
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = request.topics.add(name=tp.topic)
            state = self.metadata.leader(tp)
            offset = self._fetch_position[tp]
            asked = topic.partitions.add(
                partition=tp.partition,
                fetch_offset=offset,
                current_leader_epoch=state.leader_epoch if state else -1,
                partition_max_bytes=self._partition_max_bytes,
            )
            if tp in self._fetch_epoch:
                asked.last_fetched_epoch = self._fetch_epoch[tp]
            sent[tp] = offset
        try:
            response = await broker.Fetch(request, timeout=self._timeout_s + self._fetch_max_wait_ms / 1000)
        except WireError as e:
            log.debug("fetch failed", broker=leader, code=e.code)
            await asyncio.sleep(ERROR_BACKOFF_S)
            await self._refresh()
            return
        if response.status.error != E.NONE:
            raise ConsumerError(E.Name(response.status.error), response.status.message)
        stale = False
        for topic in response.topics:
            for result in topic.partitions:
                tp = TopicPartition(topic.name, result.partition)
                if tp not in sent or self._fetch_position.get(tp) != sent[tp]:
                    continue  # seeked or unassigned while the fetch was out
                if result.error == E.NONE and result.HasField("diverging_epoch"):
                    self._diverged(tp, result.diverging_epoch)
                elif result.error == E.NONE:
                    self._take(tp, sent[tp], result)
                elif result.error == E.OFFSET_OUT_OF_RANGE:
                    self._out_of_range(tp, result.message)
                elif result.error in RETRIABLE:
                    stale = True
                else:
                    self._error = ConsumerError(E.Name(result.error), result.message)
                    self._arrived.set()
        if stale:
            await asyncio.sleep(ERROR_BACKOFF_S)
            await self._refresh()

    def _take(self, tp: TopicPartition, fetch_offset: int, result: broker_pb2.FetchPartitionResult) -> None:
        payload = result.records
        if not payload:
            return
        next_offset, epoch = fetch_offset, None
        for _, header in iter_batches(payload):
            next_offset, epoch = header.next_offset, header.partition_leader_epoch
        if next_offset > fetch_offset:
            aborted = None
            if self._isolation_level == ISOLATION_LEVELS["read_committed"]:
                aborted = AbortedBatches((t.producer_id, t.first_offset) for t in result.aborted_transactions)
            records = _records(tp, payload, fetch_offset, self._uncompressed_batch_bytes_max, aborted)
            self._buffer.append(_Chunk(tp, records, len(payload), next_offset))
            self._buffered_bytes += len(payload)
            self._fetch_position[tp] = next_offset
            self._fetch_epoch[tp] = epoch
        self._arrived.set()

    def _diverged(self, tp: TopicPartition, diverging: broker_pb2.EpochEndOffset) -> None:
        """The leader's log holds what was fetched only up to ``diverging.end_offset`` (its
        epoch ``diverging.epoch`` ends there): prefetched records past it are dropped and
        fetching goes on from there, as Kafka's consumer does. Records already returned past
        it are a truncation: logged, or with ``auto_offset_reset='none'`` raised, the
        position kept, until the application seeks."""
        self._drop_buffered(lambda buffered: buffered == tp)
        position = self._position.get(tp, self._fetch_position[tp])
        end = diverging.end_offset
        if end < 0:  # the leader has no epoch that old: as an offset out of range
            self._out_of_range(tp, f"leader epoch {self._fetch_epoch.get(tp)} is not on the leader's log")
            return
        if end < position and self._reset == "none":
            self._fetch_position[tp] = position  # with the epoch fetched last: it diverges again until a seek
            self._error = LogTruncationError(
                f"{tp}: records from offset {end} on, up to the position {position}, are not on "
                f"the leader's log (its leader epoch {diverging.epoch} ends at {end}): seek to go on",
                {tp: end},
            )
            self._arrived.set()
            return
        if end < position:
            log.warning(
                "log truncation detected: records returned are not on the leader's log; "
                "resuming where its epoch ends",
                partition=str(tp),
                position=position,
                resumed_at=end,
                leader_epoch=diverging.epoch,
            )
        self._position[tp] = self._fetch_position[tp] = min(end, position)
        self._fetch_epoch[tp] = diverging.epoch

    def _out_of_range(self, tp: TopicPartition, message: str) -> None:
        if self._reset == "none":
            self._error = OffsetOutOfRangeError("OFFSET_OUT_OF_RANGE", f"{tp}: {message}")
            self._arrived.set()
            return
        self._position.pop(tp, None)
        self._fetch_position.pop(tp, None)
        self._fetch_epoch.pop(tp, None)
        self._drop_buffered(lambda buffered: buffered == tp)

    async def _refresh(self) -> None:
        try:
            await self.metadata.refresh()
        except KafkaError as e:
            log.debug("metadata refresh failed", detail=str(e))

    def _drop_buffered(self, drop: Callable[[TopicPartition], bool]) -> None:
        """Forget prefetched records of the partitions ``drop`` names (a seek, a reset)."""
        self._buffer = collections.deque(chunk for chunk in self._buffer if not drop(chunk.tp))
        self._buffered_bytes = sum(chunk.size for chunk in self._buffer)

    # offsets ---------------------------------------------------------------------------

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (default: every position) for ``group_id``, through the group's
        coordinator; in a group, as a member of its current generation."""
        if self._group is None:
            raise ConsumerError("INVALID_GROUP_ID", "commit needs a group_id")
        offsets = dict(self._position) if offsets is None else offsets
        if not offsets:  # nothing to commit (a member not yet assigned): as Kafka's consumer, no request
            return
        request = controller_pb2.OffsetCommitRequest(group=self._group.group_id)
        if self._subscription and self._group.generation >= 0:
            request.generation_id, request.member_id = self._group.generation, self._group.member_id
            if self._group.group_instance_id is not None:
                request.group_instance_id = self._group.group_instance_id
        by_topic: dict[str, controller_pb2.OffsetCommitTopic] = {}
        for tp, offset in sorted(offsets.items()):
            topic = by_topic.get(tp.topic)
            if topic is None:
                topic = by_topic[tp.topic] = request.topics.add(topic=tp.topic)
            topic.partitions.add(partition=tp.partition, offset=offset)
        response = await self._coordinator_call(
            lambda broker: broker.OffsetCommit(request, timeout=self._timeout_s)
        )
        if response.status.error in (
            E.UNKNOWN_MEMBER_ID,
            E.ILLEGAL_GENERATION,
            E.FENCED_INSTANCE_ID,
            E.REBALANCE_IN_PROGRESS,
        ):
            self._group.commit_failed(response.status.error)
            raise CommitFailedError(E.Name(response.status.error), response.status.message)
        if response.status.error != E.NONE:
            raise ConsumerError(E.Name(response.status.error), response.status.message)
        for result in response.partitions:
            if result.error != E.NONE:
                raise ConsumerError(
                    E.Name(result.error), f"{result.topic}-{result.partition}: {result.message}"
                )

    async def _commit_quietly(self, offsets: dict[TopicPartition, int]) -> None:
        """An automatic commit: a failure is logged, the next one tries again."""
        if not offsets:
            return
        try:
            await self.commit(offsets)
        except KafkaError as e:
            log.warning("automatic commit failed", group=self.group_id, error=str(e))

    def _maybe_auto_commit(self) -> None:
        now = time.monotonic()
        if not self._auto_commit or now < self._next_auto_commit:
            return
        if self._auto_committing is None or self._auto_committing.done():
            self._next_auto_commit = now + self._auto_commit_s
            positions = {tp: self._position[tp] for tp in self._assigned if tp in self._position}
            self._auto_committing = asyncio.create_task(self._commit_quietly(positions))

    async def committed(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        if self.group_id is None:
            raise ConsumerError("INVALID_GROUP_ID", "committed needs a group_id")
        request = controller_pb2.OffsetFetchRequest(group=self.group_id)
        for topic in sorted({tp.topic for tp in partitions}):
            request.topics.add(
                topic=topic, partitions=[tp.partition for tp in partitions if tp.topic == topic]
            )
        response = await self._controller_call(
            lambda broker: broker.OffsetFetch(request, timeout=self._timeout_s)
        )
        found: dict[TopicPartition, int | None] = dict.fromkeys(partitions)
        for entry in response.offsets:
            tp = TopicPartition(entry.topic, entry.partition)
            if tp in found and entry.error == E.NONE and entry.offset >= 0:
                found[tp] = entry.offset
        return found

    async def _controller_call(self, call: Callable[[BrokerClient], Awaitable[Any]]) -> Any:
        """Through any broker; the controller's retriable answers are retried a while."""
        return await self._retried(
            lambda: call(self.metadata.any_broker()), (E.NOT_CONTROLLER, E.REQUEST_TIMED_OUT)
        )

    async def _coordinator_call(self, call: Callable[[BrokerClient], Awaitable[Any]]) -> Any:
        """To the group's coordinator, found again when it moved."""
        assert self._group is not None
        group = self._group

        async def attempt() -> Any:
            return await call(await group.coordinator())

        def moved(response: Any) -> None:
            if response.status.error in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE):
                group.forget_coordinator()

        return await self._retried(
            attempt, (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.REQUEST_TIMED_OUT), moved
        )

    async def _retried(
        self,
        attempt: Callable[[], Awaitable[Any]],
        retriable: tuple[int, ...],
        seen: Callable[[Any], None] = lambda r: None,
    ) -> Any:
        deadline = time.monotonic() + self._timeout_s
        problem = ""
        while time.monotonic() < deadline:
            try:
                response = await attempt()
            except WireError as e:
                problem = e.code
                if self._group is not None:
                    self._group.forget_coordinator()
            else:
                seen(response)
                if response.status.error not in retriable:
                    return response
                problem = f"{E.Name(response.status.error)}: {response.status.message}"
            await asyncio.sleep(ERROR_BACKOFF_S)
        raise ConsumerError("REQUEST_TIMED_OUT", f"no answer within {self._timeout_s:g} s: {problem}")

    async def close(self) -> None:
        """Commit (with ``enable_auto_commit``), leave the group, stop."""
        if self._closed:
            return
        self._closed = True
        if self._auto_committing is not None:
            await asyncio.gather(self._auto_committing, return_exceptions=True)
        if self._auto_commit and self._assigned:
            await self._commit_quietly(
                {tp: self._position[tp] for tp in self._assigned if tp in self._position}
            )
        if self._group is not None:
            if self._subscription:
                with contextlib.suppress(KafkaError):
                    await self._group.leave("the consumer is closing")
            await self._group.close()
        if self._fetcher is not None:
            self._fetcher.cancel()
            await asyncio.gather(self._fetcher, return_exceptions=True)
        await self.metadata.close()


@dataclass(eq=False, slots=True)
class _Chunk:
    tp: TopicPartition
    records: Iterator[ConsumerRecord]  # decoded as poll takes them
    size: int  # bytes fetched: what the prefetch bound counts
    end: int  # the offset after its last batch


def _records(
    tp: TopicPartition,
    payload: bytes,
    fetch_offset: int,
    uncompressed_batch_bytes_max: int,
    aborted: AbortedBatches | None = None,
) -> Iterator[ConsumerRecord]:
    """The records of a fetched payload from ``fetch_offset`` on (a batch may begin before
    it), each built once, straight from the codec's record, without ``aborted``'s batches
    (read_committed); a compressed batch that would decompress past
    ``uncompressed_batch_bytes_max`` is a RecordError, spending no more."""
    topic, partition = tp
    make = tuple.__new__  # what ConsumerRecord(...) calls, without its Python-level __new__
    drops = None if aborted is None else aborted.drops
    for batch in data_batches(payload, uncompressed_batch_bytes_max, drops=drops):
        for record in batch:
            offset = record.offset
            if offset >= fetch_offset:
                headers = record.headers
                yield make(
                    ConsumerRecord,
                    (
                        topic,
                        partition,
                        offset,
                        record.timestamp,
                        record.key,
                        record.value,
                        tuple(headers) if headers else (),
                    ),
                )


class Consumer:
    """The synchronous consumer: AsyncConsumer on a private event-loop thread, so it keeps
    prefetching and its group keeps heartbeating between calls. A rebalance listener's
    methods run on that thread, inside ``poll``."""

    def __init__(self, bootstrap_servers: str | Sequence[str], **options: Any) -> None:
        self._thread = LoopThread("consumer-loop")
        self._consumer: AsyncConsumer = self._thread.run(_make(bootstrap_servers, options))

    def _run(self, call: Any) -> Any:
        return self._thread.run(call)

    def subscribe(self, topics: Sequence[str], listener: RebalanceListener | None = None) -> None:
        self._consumer.subscribe(topics, listener)

    def unsubscribe(self) -> None:
        self._run(self._consumer.unsubscribe())

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        self._run(self._consumer.assign(partitions))

    def assign_topic(self, topic: str) -> None:
        self._run(self._consumer.assign_topic(topic))

    def assignment(self) -> list[TopicPartition]:
        return self._consumer.assignment()

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        return self._consumer.consumer_group_metadata()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._thread.loop.call_soon_threadsafe(self._consumer.seek, tp, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._run(self._consumer.seek_to_beginning(*partitions))

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._run(self._consumer.seek_to_end(*partitions))

    def position(self, tp: TopicPartition) -> int:
        return self._run(self._consumer.position(tp))

    def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self._run(self._consumer.end_offsets(partitions))

    def poll(self, timeout_ms: int, max_records: int = 500) -> list[ConsumerRecord]:
        return self._run(self._consumer.poll(timeout_ms, max_records))

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        self._run(self._consumer.commit(offsets))

    def committed(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        return self._run(self._consumer.committed(partitions))

    def close(self) -> None:
        if not self._thread.closed:
            self._run(self._consumer.close())
            self._thread.stop()


class RebalanceListener:
    """Kafka's ConsumerRebalanceListener; override what you need (plain or async methods).
    ``on_partitions_lost`` defaults to ``on_partitions_revoked``, as in Kafka."""

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> Any:
        return None

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> Any:
        return None

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> Any:
        return self.on_partitions_revoked(partitions)


async def _call_listener(
    method: Callable[[frozenset[TopicPartition]], Any], partitions: frozenset[TopicPartition]
) -> None:
    """Run a listener method; its exception is logged, as Kafka's consumer logs it, and
    the rebalance goes on."""
    try:
        result = method(partitions)
        if asyncio.iscoroutine(result):
            await result
    except Exception:
        log.exception("rebalance listener failed", method=getattr(method, "__name__", "?"))


async def _make(bootstrap_servers: str | Sequence[str], options: dict) -> AsyncConsumer:
    return AsyncConsumer(bootstrap_servers, **options)
