"""The consumer: assigned partitions, read from their leaders with prefetching.

Positions are Kafka's: ``position(tp)`` is the next offset ``poll`` returns. A partition
without one gets it from the group's committed offset (with ``group_id``) or from
``auto_offset_reset`` (earliest, latest, or none: ``OffsetOutOfRangeError``), and so
does one whose fetch answers OFFSET_OUT_OF_RANGE. A background loop keeps one Fetch in
flight per leader broker, covering every assigned partition it leads, and buffers the
answers' raw record batches, bounded by ``prefetch_max_bytes``; ``poll`` decodes records
as it takes them (Kafka's CompletedFetch), so the buffer never holds a Python object per
record (a prefetch of millions of them made the garbage collector the consumer's
largest cost). Records that do not decode are returned up to the damage, then ``poll``
raises ``CORRUPT_MESSAGE`` until the application seeks past them. A leader that moved
(NOT_LEADER_OR_FOLLOWER, a fenced or unknown leader epoch) sends the loop to the
metadata again. A seek drops what was prefetched for that partition.

Committed offsets go through any broker to the controller (``commit``/``committed``):
the committed offset is the next offset to read, as in Kafka.

``AsyncConsumer`` is the asyncio consumer; ``Consumer`` runs one on a private loop
while its methods run (prefetching happens inside ``poll``, as in Kafka's Java client).
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
from raftka.v1 import broker_pb2, controller_pb2

from client.cluster_metadata import LIST_EARLIEST, LIST_LATEST, RETRIABLE, ClusterMetadata
from client.errors import ConsumerError, KafkaError, OffsetOutOfRangeError
from client.types import ConsumerRecord, TopicPartition
from records.batch import iter_batches
from records.codec import RecordError, data_batches
from wire.client import BrokerClient, WireError

E = controller_pb2.ErrorCode
log = structlog.get_logger("client.consumer")
RESETS = ("earliest", "latest", "none")
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
        request_timeout_ms: int = 30_000,
    ) -> None:
        if auto_offset_reset not in RESETS:
            raise ValueError(f"auto_offset_reset: {auto_offset_reset!r} is not one of {', '.join(RESETS)}")
        self.group_id = group_id
        self._reset = auto_offset_reset
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._fetch_min_bytes = fetch_min_bytes
        self._fetch_max_bytes = fetch_max_bytes
        self._partition_max_bytes = max_partition_fetch_bytes
        self._prefetch_max_bytes = prefetch_max_bytes
        self._timeout_s = request_timeout_ms / 1000
        self.metadata = ClusterMetadata(bootstrap_servers, request_timeout_s=self._timeout_s)
        self._assigned: list[TopicPartition] = []
        self._fetch_position: dict[TopicPartition, int] = {}  # next offset to fetch
        self._position: dict[TopicPartition, int] = {}  # next offset poll returns
        # Fetched records, one chunk per partition answer, decoded as poll takes them.
        self._buffer: collections.deque[_Chunk] = collections.deque()
        self._buffered_bytes = 0
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._error: ConsumerError | None = None
        self._fetcher: asyncio.Task[None] | None = None
        self._closed = False

    # assignment and positions ----------------------------------------------------------

    async def assign(self, partitions: Sequence[TopicPartition]) -> None:
        for tp in partitions:
            info = await self.metadata.topic(tp.topic)
            if tp.partition not in info.partitions:
                raise ConsumerError("UNKNOWN_TOPIC_OR_PARTITION", f"no partition {tp}")
        self._assigned = list(dict.fromkeys(partitions))
        keep = set(self._assigned)
        for positions in (self._position, self._fetch_position):
            for tp in list(positions):
                if tp not in keep:
                    del positions[tp]
        self._drop_buffered(lambda tp: tp not in keep)

    async def assign_topic(self, topic: str) -> None:
        info = await self.metadata.topic(topic)
        await self.assign([TopicPartition(topic, p) for p in sorted(info.partitions)])

    def assignment(self) -> list[TopicPartition]:
        return list(self._assigned)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if tp not in self._assigned:
            raise ConsumerError("ILLEGAL_STATE", f"{tp} is not assigned")
        if offset < 0:
            raise ValueError(f"offset: {offset} is negative")
        self._position[tp] = self._fetch_position[tp] = offset
        self._drop_buffered(lambda buffered: buffered == tp)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        await self._seek_to(partitions or self._assigned, LIST_EARLIEST)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        await self._seek_to(partitions or self._assigned, LIST_LATEST)

    async def _seek_to(self, partitions: Sequence[TopicPartition], timestamp: int) -> None:
        for tp, (offset, _) in (await self.metadata.list_offsets(list(partitions), timestamp)).items():
            self.seek(tp, offset)

    async def position(self, tp: TopicPartition) -> int:
        if tp not in self._position:
            await self._resolve_positions()
        return self._position[tp]

    async def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: offset for tp, (offset, _) in (await self.metadata.list_offsets(list(partitions), LIST_LATEST)).items()}

    async def _resolve_positions(self) -> None:
        missing = [tp for tp in self._assigned if tp not in self._position]
        if not missing:
            return
        if self.group_id is not None:
            for tp, offset in (await self.committed(missing)).items():
                if offset is not None:
                    self._position[tp] = self._fetch_position[tp] = offset
            missing = [tp for tp in missing if tp not in self._position]
        if not missing:
            return
        if self._reset == "none":
            raise OffsetOutOfRangeError(
                "OFFSET_OUT_OF_RANGE", "no valid position and auto_offset_reset='none': " + ", ".join(map(str, missing))
            )
        await self._seek_to(missing, LIST_EARLIEST if self._reset == "earliest" else LIST_LATEST)

    # polling ---------------------------------------------------------------------------

    async def poll(self, timeout_ms: int, max_records: int = 500) -> list[ConsumerRecord]:
        """Records from the buffer, waiting up to ``timeout_ms`` for the first."""
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
            if taken < wanted:
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
        self._error = ConsumerError("CORRUPT_MESSAGE", f"{tp} at offset {self._position[tp]}: records do not decode: {problem}")

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
        )
        sent: dict[TopicPartition, int] = {}
        topics: dict[str, broker_pb2.FetchTopic] = {}
        for tp in partitions:
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = request.topics.add(name=tp.topic)
            state = self.metadata.leader(tp)
            offset = self._fetch_position[tp]
            topic.partitions.add(
                partition=tp.partition,
                fetch_offset=offset,
                current_leader_epoch=state.leader_epoch if state else -1,
                partition_max_bytes=self._partition_max_bytes,
            )
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
                if result.error == E.NONE:
                    self._take(tp, sent[tp], result.records)
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

    def _take(self, tp: TopicPartition, fetch_offset: int, payload: bytes) -> None:
        if not payload:
            return
        next_offset = fetch_offset
        for _, header in iter_batches(payload):
            next_offset = header.next_offset
        if next_offset > fetch_offset:
            self._buffer.append(_Chunk(tp, _records(tp, payload, fetch_offset), len(payload)))
            self._buffered_bytes += len(payload)
        self._fetch_position[tp] = max(next_offset, fetch_offset)
        self._arrived.set()

    def _out_of_range(self, tp: TopicPartition, message: str) -> None:
        if self._reset == "none":
            self._error = OffsetOutOfRangeError("OFFSET_OUT_OF_RANGE", f"{tp}: {message}")
            self._arrived.set()
            return
        self._position.pop(tp, None)
        self._fetch_position.pop(tp, None)
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
        """Commit ``offsets`` (default: every position) for ``group_id``."""
        if self.group_id is None:
            raise ConsumerError("INVALID_GROUP_ID", "commit needs a group_id")
        offsets = dict(self._position) if offsets is None else offsets
        request = controller_pb2.OffsetCommitRequest(group=self.group_id)
        by_topic: dict[str, controller_pb2.OffsetCommitTopic] = {}
        for tp, offset in sorted(offsets.items()):
            topic = by_topic.get(tp.topic)
            if topic is None:
                topic = by_topic[tp.topic] = request.topics.add(topic=tp.topic)
            topic.partitions.add(partition=tp.partition, offset=offset)
        response = await self._controller_call(lambda broker: broker.OffsetCommit(request, timeout=self._timeout_s))
        for result in response.partitions:
            if result.error != E.NONE:
                raise ConsumerError(E.Name(result.error), f"{result.topic}-{result.partition}: {result.message}")

    async def committed(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        if self.group_id is None:
            raise ConsumerError("INVALID_GROUP_ID", "committed needs a group_id")
        request = controller_pb2.OffsetFetchRequest(group=self.group_id)
        for topic in sorted({tp.topic for tp in partitions}):
            request.topics.add(topic=topic, partitions=[tp.partition for tp in partitions if tp.topic == topic])
        response = await self._controller_call(lambda broker: broker.OffsetFetch(request, timeout=self._timeout_s))
        found: dict[TopicPartition, int | None] = dict.fromkeys(partitions)
        for entry in response.offsets:
            tp = TopicPartition(entry.topic, entry.partition)
            if tp in found and entry.error == E.NONE and entry.offset >= 0:
                found[tp] = entry.offset
        return found

    async def _controller_call(self, call: Callable[[BrokerClient], Awaitable[Any]]) -> Any:
        """Through any broker; the controller's retriable answers are retried a while."""
        deadline = time.monotonic() + self._timeout_s
        problem = ""
        while time.monotonic() < deadline:
            try:
                response = await call(self.metadata.any_broker())
            except WireError as e:
                problem = e.code
            else:
                if response.status.error == E.NONE:
                    return response
                if response.status.error not in (E.NOT_CONTROLLER, E.REQUEST_TIMED_OUT):
                    raise ConsumerError(E.Name(response.status.error), response.status.message)
                problem = f"{E.Name(response.status.error)}: {response.status.message}"
            await asyncio.sleep(ERROR_BACKOFF_S)
        raise ConsumerError("REQUEST_TIMED_OUT", f"committed offsets: {problem}")

    async def close(self) -> None:
        self._closed = True
        if self._fetcher is not None:
            self._fetcher.cancel()
            await asyncio.gather(self._fetcher, return_exceptions=True)
        await self.metadata.close()


@dataclass(eq=False, slots=True)
class _Chunk:
    tp: TopicPartition
    records: Iterator[ConsumerRecord]  # decoded as poll takes them
    size: int  # bytes fetched: what the prefetch bound counts


def _records(tp: TopicPartition, payload: bytes, fetch_offset: int) -> Iterator[ConsumerRecord]:
    """The records of a fetched payload from ``fetch_offset`` on (a batch may begin before
    it), each built once, straight from the codec's record."""
    topic, partition = tp
    make = tuple.__new__  # what ConsumerRecord(...) calls, without its Python-level __new__
    for batch in data_batches(payload):
        for record in batch:
            offset = record.offset
            if offset >= fetch_offset:
                headers = record.headers
                yield make(
                    ConsumerRecord,
                    (topic, partition, offset, record.timestamp, record.key, record.value, tuple(headers) if headers else ()),
                )


class Consumer:
    """The synchronous consumer: each method runs AsyncConsumer's on a private loop."""

    def __init__(self, bootstrap_servers: str | Sequence[str], **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._consumer: AsyncConsumer = self._loop.run_until_complete(_make(bootstrap_servers, options))

    def _run(self, call: Any) -> Any:
        return self._loop.run_until_complete(call)

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        self._run(self._consumer.assign(partitions))

    def assign_topic(self, topic: str) -> None:
        self._run(self._consumer.assign_topic(topic))

    def assignment(self) -> list[TopicPartition]:
        return self._consumer.assignment()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._consumer.seek(tp, offset)

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
        if not self._loop.is_closed():
            self._run(self._consumer.close())
            self._loop.close()


async def _make(bootstrap_servers: str | Sequence[str], options: dict) -> AsyncConsumer:
    return AsyncConsumer(bootstrap_servers, **options)
