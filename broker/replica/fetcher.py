"""Followers' side of replication: one fetcher per leader broker (Kafka's ReplicaFetcher).

Each fetcher keeps one long-polling Fetch in flight to its leader, covering every
partition this broker follows there, from each log's end with the epoch of its last
batch. An answer is applied partition by partition, and only to a partition that
still follows that leader at the epoch the request was sent with:

- records are appended as they are (offsets and epochs are the leader's), and the
  high watermark follows the leader's as far as the local log reaches;
- a diverging epoch truncates the log to where it agrees with the leader's (the
  smaller of the leader's end offset for that epoch and our own), never to the high
  watermark alone; the next fetch checks again from there;
- an offset out of range means the leader's log starts after ours ends (retention):
  the log restarts empty at the leader's log start;
- a fenced or unknown leader epoch, or not-leader, waits for the metadata to move.

Each request carries this broker's current broker epoch (read at every request, so a
re-registered broker sends its new one); the leader refuses the whole request if it is
not the registration it knows (``raftka.broker.replica.follower_check``), and the fetcher
asks again after a backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable

import structlog

from raftka.broker.log.partition_log import LogAppendError
from raftka.broker.partitions import Role
from raftka.broker.replica.follower_check import ROUTINE_REFUSALS
from raftka.broker.replica.partition import Partition
from raftka.node.config import BrokerConfig
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import BrokerClient, WireError

E = controller_pb2.ErrorCode
log = structlog.get_logger("broker.fetcher")

ERROR_BACKOFF_S = 0.1  # after a failed call, and for a partition its leader refused
UNREACHABLE_BACKOFF_MAX_S = 1.0


class FollowerFetch:
    """What one fetcher asks its leader and how it applies the answer, with no I/O: the
    fetcher's loop and the replication tests share it."""

    def __init__(
        self,
        local_id: int,
        config: BrokerConfig,
        broker_epoch: Callable[[], int],
        on_truncated: Callable[[Partition], None],
    ) -> None:
        self.local_id = local_id
        self._config = config
        self._broker_epoch = broker_epoch
        self._on_truncated = on_truncated
        self.partitions: dict[Partition, float] = {}  # -> monotonic time before which it is not fetched
        self._last_refusal = ""  # the leader's last refusal of a whole request, until one is answered

    def ready(self, now: float) -> list[Partition]:
        return [p for p, not_before in self.partitions.items() if not_before <= now]

    def request(
        self, ready: list[Partition]
    ) -> tuple[broker_pb2.FetchRequest, dict[tuple[bytes, int], tuple[Partition, int, int]]]:
        request = broker_pb2.FetchRequest(
            replica_id=self.local_id,
            replica_epoch=self._broker_epoch(),
            max_wait_ms=self._config.replica_fetch_wait_max_ms,
            min_bytes=1,
            max_bytes=self._config.replica_fetch_response_max_bytes,
        )
        sent: dict[tuple[bytes, int], tuple[Partition, int, int]] = {}
        topics: dict[bytes, broker_pb2.FetchTopic] = {}
        for partition in ready:
            topic = topics.get(partition.topic_id)
            if topic is None:
                topic = topics[partition.topic_id] = request.topics.add(
                    name=partition.topic, topic_id=partition.topic_id
                )
            fetch_offset = partition.log.log_end_offset
            latest_epoch = partition.log.latest_epoch
            topic.partitions.add(
                partition=partition.partition,
                current_leader_epoch=partition.leader_epoch,
                fetch_offset=fetch_offset,
                last_fetched_epoch=-1 if latest_epoch is None else latest_epoch,
                log_start_offset=partition.log.log_start_offset,
                partition_max_bytes=self._config.replica_fetch_max_bytes,
            )
            sent[(partition.topic_id, partition.partition)] = (
                partition,
                partition.leader_epoch,
                fetch_offset,
            )
        return request, sent

    def apply(
        self, response: broker_pb2.FetchResponse, sent: dict[tuple[bytes, int], tuple[Partition, int, int]]
    ) -> None:
        if response.status.error != E.NONE:
            refusal = f"{E.Name(response.status.error)}: {response.status.message}"
            if refusal != self._last_refusal:  # retried every ERROR_BACKOFF_S: say it once
                level = logging.INFO if response.status.error in ROUTINE_REFUSALS else logging.WARNING
                log.log(level, "fetch refused", detail=refusal)
                self._last_refusal = refusal
            self._delay(p for p, _, _ in sent.values())
            return
        self._last_refusal = ""
        for topic in response.topics:
            for result in topic.partitions:
                entry = sent.get((topic.topic_id, result.partition))
                if entry is None:
                    continue
                partition, leader_epoch, fetch_offset = entry
                if (
                    partition not in self.partitions
                    or partition.role is not Role.FOLLOWER
                    or partition.leader_epoch != leader_epoch
                    or partition.log.log_end_offset != fetch_offset
                ):
                    continue  # the partition moved on while the fetch was out
                self._apply_partition(partition, result)

    def _apply_partition(self, partition: Partition, result: broker_pb2.FetchPartitionResult) -> None:
        if result.error == E.NONE:
            if result.HasField("diverging_epoch"):
                self._truncate_diverging(partition, result.diverging_epoch)
                return
            if result.records:
                try:
                    partition.log.append_as_follower(result.records)
                except LogAppendError as e:
                    log.error("follower append failed", partition=partition.name, detail=str(e))
                    self._delay([partition])
                    return
            partition.follow_high_watermark(result.high_watermark)
        elif result.error == E.OFFSET_OUT_OF_RANGE:
            self._reset_out_of_range(partition, result)
        else:
            log.debug(
                "partition fetch refused",
                partition=partition.name,
                error=E.Name(result.error),
                detail=result.message,
            )
            self._delay([partition])

    def _truncate_diverging(self, partition: Partition, diverging: broker_pb2.EpochEndOffset) -> None:
        """Truncate to where our log may still agree with the leader's: the smaller of its end
        offset for the epoch and ours (ours may end earlier, or in an older epoch, in which
        case the next fetch asks again from there)."""
        local_epoch, local_end = partition.log.end_offset_for_epoch(diverging.epoch)
        if diverging.end_offset < 0 or local_epoch < 0:
            target = partition.log.log_start_offset  # nothing of that epoch or older on one side
        else:
            target = max(min(diverging.end_offset, local_end), partition.log.log_start_offset)
        self._truncate(partition, target, f"diverging epoch {diverging.epoch} ends at {diverging.end_offset}")

    def _truncate(self, partition: Partition, offset: int, why: str) -> None:
        if offset < partition.high_watermark:
            log.warning(
                "truncating below the high watermark",
                partition=partition.name,
                offset=offset,
                high_watermark=partition.high_watermark,
                reason=why,
            )
            partition.high_watermark = offset
        log.info(
            "truncating",
            partition=partition.name,
            offset=offset,
            log_end_offset=partition.log.log_end_offset,
            reason=why,
        )
        partition.log.truncate_to(offset)
        self._on_truncated(partition)

    def _reset_out_of_range(self, partition: Partition, result: broker_pb2.FetchPartitionResult) -> None:
        if result.log_start_offset > partition.log.log_end_offset:
            log.info(
                "log starts anew at the leader's start",
                partition=partition.name,
                offset=result.log_start_offset,
            )
            partition.log.truncate_fully_and_start_at(result.log_start_offset)
            partition.high_watermark = max(partition.high_watermark, result.log_start_offset)
            self._on_truncated(partition)
        elif 0 <= result.log_end_offset < partition.log.log_end_offset:
            self._truncate(partition, result.log_end_offset, "the leader's log ends before ours")
        else:
            self._delay([partition])

    def _delay(self, partitions) -> None:  # noqa: ANN001: any iterable of partitions
        not_before = time.monotonic() + ERROR_BACKOFF_S
        for partition in partitions:
            if partition in self.partitions:
                self.partitions[partition] = not_before


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(
        self,
        local_id: int,
        leader_id: int,
        address: Callable[[int], str | None],
        config: BrokerConfig,
        broker_epoch: Callable[[], int],
        on_truncated: Callable[[Partition], None],
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.leader_id = leader_id
        self._address = address
        self._tls = tls
        self._config = config
        self._fetch = FollowerFetch(local_id, config, broker_epoch, on_truncated)
        self._changed = asyncio.Event()
        self._client: BrokerClient | None = None
        self._task = asyncio.create_task(self._run(), name=f"fetcher-{local_id}-from-{leader_id}")

    def add(self, partition: Partition) -> None:
        self._fetch.partitions[partition] = 0.0
        self._changed.set()

    def remove(self, partition: Partition) -> None:
        self._fetch.partitions.pop(partition, None)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        if self._client is not None:
            self._client.close()

    async def _run(self) -> None:
        backoff_s = ERROR_BACKOFF_S
        while True:
            now = time.monotonic()
            ready = self._fetch.ready(now)
            client = self._leader()
            if not ready or client is None:
                self._changed.clear()
                wake_in = min((nb - now for nb in self._fetch.partitions.values()), default=1.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), max(wake_in, 0.01))
                continue
            request, sent = self._fetch.request(ready)
            timeout_s = self._config.replica_fetch_wait_max_ms / 1000 + 5
            try:
                response = await client.Fetch(request, timeout=timeout_s)
            except WireError as e:
                log.debug("fetch failed", leader=self.leader_id, code=e.code, detail=e.message)
                await asyncio.sleep(backoff_s)
                backoff_s = min(UNREACHABLE_BACKOFF_MAX_S, backoff_s * 2)
                continue
            backoff_s = ERROR_BACKOFF_S
            self._fetch.apply(response, sent)

    def _leader(self) -> BrokerClient | None:
        """The leader broker's data listener, reconnected if it moved (a restart)."""
        address = self._address(self.leader_id)
        if address is None:
            return None
        if self._client is None or self._client.address != address:
            if self._client is not None:
                self._client.close()
            self._client = BrokerClient(address, tls=self._tls)
        return self._client


class ReplicaFetchers:
    """The fetchers of one broker, by leader; a partition is in at most one."""

    def __init__(
        self,
        local_id: int,
        address: Callable[[int], str | None],
        config: BrokerConfig,
        broker_epoch: Callable[[], int],
        on_truncated: Callable[[Partition], None],
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._local_id = local_id
        self._address = address
        self._tls = tls
        self._config = config
        self._broker_epoch = broker_epoch
        self._on_truncated = on_truncated
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._source: dict[Partition, int] = {}

    def follow(self, partition: Partition) -> None:
        self.stop_following(partition)
        fetcher = self._fetchers.get(partition.leader_id)
        if fetcher is None:
            fetcher = self._fetchers[partition.leader_id] = ReplicaFetcher(
                self._local_id,
                partition.leader_id,
                self._address,
                self._config,
                self._broker_epoch,
                self._on_truncated,
                self._tls,
            )
        fetcher.add(partition)
        self._source[partition] = partition.leader_id

    def stop_following(self, partition: Partition) -> None:
        leader = self._source.pop(partition, None)
        if leader is not None:
            self._fetchers[leader].remove(partition)

    async def close(self) -> None:
        fetchers, self._fetchers = self._fetchers, {}
        for fetcher in fetchers.values():
            await fetcher.close()
