"""Followers' side of replication: one fetcher per leader broker (Kafka's ReplicaFetcher).

Each fetcher keeps one long-polling Fetch in flight to its leader, covering every
partition this broker follows there, from each log's end with the epoch of its last
batch. An answer is applied partition by partition, and only to a partition that
still follows that leader at the epoch the request was sent with:

- records are appended as they are (offsets and epochs are the leader's), and the
  high watermark follows the leader's as far as the local log reaches;
- a diverging epoch truncates the log to where it agrees with the leader's (the
  smaller of the leader's end offset for that epoch and our own), never to the high
  watermark alone; the next fetch checks again from there, once the lowered recovery
  point is on disk (``on_truncated`` says when), so nothing written after the cut is
  ever taken for flushed data by a recovery. Except when our last batch is of the epoch
  the leader leads now and the cut would go below our high watermark: a leader never
  loses records of its own epoch but with its disk, so it would take committed records
  with it. The partition stalls instead (logged once), until the metadata gives it a
  new leader epoch;
- an offset out of range means the leader's log starts after ours ends (retention):
  the log restarts empty at the leader's log start;
- a fenced or unknown leader epoch, or not-leader, waits for the metadata to move.

Failures stay with the partition they belong to (Kafka's ``markPartitionFailed``):
batches that do not fit the log (a corrupt batch, a gap) are retried with exponential
backoff and logged at most once a minute; any other error applying a partition (an
``OSError`` from its log) marks it failed: it stops being fetched, is reported in
``failed``, and fetches again only when the metadata makes it a follower anew. The
other partitions carry on. An unexpected error in the loop itself restarts it, with
exponential backoff, so one bug never stops replication from a leader for good.

Each request carries this broker's current broker epoch (read at every request, so a
re-registered broker sends its new one); the leader refuses the whole request if it is
not the registration it knows (``raftka.broker.replica.follower_check``), and the fetcher
asks again after a backoff.

A follower replication throttle (``raftka.broker.replica.throttle``) leaves the throttled
partitions this broker has not caught up on out of its fetches while the quota is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential_jitter

from raftka.broker.log.partition_log import LogAppendError
from raftka.broker.partitions import Role
from raftka.broker.replica.follower_check import ROUTINE_REFUSALS
from raftka.broker.replica.partition import Partition
from raftka.broker.replica.throttle import ReplicationQuota
from raftka.node.config import BrokerConfig
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import BrokerClient, WireError

E = controller_pb2.ErrorCode
log = structlog.get_logger("broker.fetcher")

ERROR_BACKOFF_S = 0.1  # after a failed call, and for a partition its leader refused
UNREACHABLE_BACKOFF_MAX_S = 1.0
APPEND_BACKOFF_MAX_S = 30.0  # batches that keep failing to append are retried at least this often
APPEND_LOG_INTERVAL_S = 60.0  # a partition's append failures are logged at most this often
RESTART_BACKOFF_MAX_S = 30.0
IDLE_WAIT_MAX_S = 1.0  # the loop looks again at least this often, e.g. for a leader's new address
THROTTLED_WAIT_S = 0.1  # a partition held back by the follower's replication throttle is looked at again


class FollowerFetch:
    """What one fetcher asks its leader and how it applies the answer, with no I/O: the
    fetcher's loop and the replication tests share it."""

    def __init__(
        self,
        local_id: int,
        config: BrokerConfig,
        broker_epoch: Callable[[], int],
        on_truncated: Callable[[list[Partition], Callable[[], None]], None],
        clock: Callable[[], float] = time.monotonic,
        wake: Callable[[], None] = lambda: None,
        quota: ReplicationQuota | None = None,
    ) -> None:
        self.local_id = local_id
        self._quota = quota
        self._caught_up: set[Partition] = set()  # reached the leader's high watermark at its last answer
        self._config = config
        self._broker_epoch = broker_epoch
        self._on_truncated = on_truncated  # (partitions cut, call when that is on disk), once per answer
        self._truncated: list[Partition] = []
        self._clock = clock
        self._wake = wake  # a partition became ready outside ``apply``
        self.partitions: dict[Partition, float] = {}  # -> monotonic time before which it is not fetched
        self._last_refusal = ""  # the leader's last refusal of a whole request, until one is answered
        self.failed: dict[Partition, str] = {}  # -> why it stopped: fetched again once followed anew
        self._append_failures: dict[Partition, _Failures] = {}
        self._held: set[Partition] = set()  # cut, until the cut's recovery point is on disk

    def add(self, partition: Partition) -> None:
        self.partitions[partition] = 0.0
        self.failed.pop(partition, None)
        self._append_failures.pop(partition, None)
        self._caught_up.discard(partition)

    def remove(self, partition: Partition) -> None:
        self.partitions.pop(partition, None)
        self._append_failures.pop(partition, None)
        self._caught_up.discard(partition)

    def ready(self, now: float) -> list[Partition]:
        """The partitions to fetch now; those the throttle holds back wait ``THROTTLED_WAIT_S``."""
        ready = [p for p, not_before in self.partitions.items() if not_before <= now and p not in self._held]
        quota = self._quota
        if quota is None:
            return ready
        held = [p for p in ready if quota.hold_back(p.topic, p.partition, p in self._caught_up)]
        self._delay(held, THROTTLED_WAIT_S)
        return [p for p in ready if p not in held] if held else ready

    def wait_s(self, now: float) -> float:
        """How long until a partition may be fetched (looked at again within a second)."""
        waits = [not_before - now for p, not_before in self.partitions.items() if p not in self._held]
        return min(max(min(waits, default=IDLE_WAIT_MAX_S), 0.01), IDLE_WAIT_MAX_S)

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
        self._truncated = []
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
                try:
                    self._apply_partition(partition, result)
                except LogAppendError as e:
                    self._append_failed(partition, str(e))
                except Exception as e:  # noqa: BLE001 - its log is in an unknown state; the others are not
                    self._fail(partition, e)
        if self._truncated:
            held = set(self._truncated)
            self._held |= held
            self._on_truncated(self._truncated, lambda: self._resume(held))

    def _resume(self, held: set[Partition]) -> None:
        """The truncations are on disk: fetch those partitions again."""
        self._held -= held
        self._wake()

    def _apply_partition(self, partition: Partition, result: broker_pb2.FetchPartitionResult) -> None:
        if result.error == E.NONE:
            if result.HasField("diverging_epoch"):
                self._truncate_diverging(partition, result.diverging_epoch)
                return
            if result.records:
                partition.log.append_as_follower(result.records)
                self._append_failures.pop(partition, None)
                if self._quota is not None and self._quota.is_throttled(partition.topic, partition.partition):
                    self._quota.record(len(result.records))
            partition.follow_high_watermark(result.high_watermark)
            if partition.log.log_end_offset >= result.high_watermark:
                self._caught_up.add(partition)
            else:
                self._caught_up.discard(partition)
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
        why = f"diverging epoch {diverging.epoch} ends at {diverging.end_offset}"
        if target < partition.high_watermark and partition.log.latest_epoch == partition.leader_epoch:
            self._stall(partition, target, why)
            return
        self._truncate(partition, target, why)

    def _stall(self, partition: Partition, offset: int, why: str) -> None:
        """Stop fetching a partition whose leader, in the epoch of our own last batch, says we
        hold records it does not: it lost them, and following would lose committed ones."""
        log.error(
            "refusing to truncate committed records: the leader lost records of its own epoch; "
            "the partition stalls until its leader epoch moves",
            partition=partition.name,
            leader=partition.leader_id,
            leader_epoch=partition.leader_epoch,
            offset=offset,
            high_watermark=partition.high_watermark,
            reason=why,
        )
        self.partitions.pop(partition, None)

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
        self._truncated.append(partition)
        partition.log.truncate_to(offset)

    def _reset_out_of_range(self, partition: Partition, result: broker_pb2.FetchPartitionResult) -> None:
        if result.log_start_offset > partition.log.log_end_offset:
            log.info(
                "log starts anew at the leader's start",
                partition=partition.name,
                offset=result.log_start_offset,
            )
            self._truncated.append(partition)
            partition.log.truncate_fully_and_start_at(result.log_start_offset)
            partition.high_watermark = max(partition.high_watermark, result.log_start_offset)
        elif 0 <= result.log_end_offset < partition.log.log_end_offset:
            self._truncate(partition, result.log_end_offset, "the leader's log ends before ours")
        else:
            self._delay([partition])

    def _delay(self, partitions, delay_s: float = ERROR_BACKOFF_S) -> None:  # noqa: ANN001 - any iterable of partitions
        not_before = self._clock() + delay_s
        for partition in partitions:
            if partition in self.partitions:
                self.partitions[partition] = not_before

    def _append_failed(self, partition: Partition, detail: str) -> None:
        """Batches the log refuses (corrupt, or not continuing it): the leader may send the
        same again, so back off exponentially and say so now and then, not every time."""
        now = self._clock()
        failures = self._append_failures.setdefault(partition, _Failures())
        failures.count += 1
        if now - failures.logged_at >= APPEND_LOG_INTERVAL_S:
            log.error(
                "follower append failed; retrying with backoff",
                partition=partition.name,
                failures=failures.count,
                detail=detail,
            )
            failures.logged_at = now
        self._delay([partition], min(APPEND_BACKOFF_MAX_S, ERROR_BACKOFF_S * 2 ** (failures.count - 1)))

    def _fail(self, partition: Partition, error: Exception) -> None:
        """Stop fetching ``partition`` (Kafka's failed partitions): an error writing its log
        leaves it in a state no retry can trust. Its leader drops it from the ISR once it
        lags; a new role from the metadata starts it again."""
        log.error(
            "partition failed; it stops replicating until its role changes",
            partition=partition.name,
            error=repr(error),
        )
        self.remove(partition)
        self.failed[partition] = repr(error)


@dataclass(slots=True)
class _Failures:
    """A partition's appends that failed in a row, and when that was last logged."""

    count: int = 0
    logged_at: float = float("-inf")


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(
        self,
        local_id: int,
        leader_id: int,
        address: Callable[[int], str | None],
        config: BrokerConfig,
        broker_epoch: Callable[[], int],
        on_truncated: Callable[[list[Partition], Callable[[], None]], None],
        tls: ssl.SSLContext | None = None,
        quota: ReplicationQuota | None = None,
    ) -> None:
        self.leader_id = leader_id
        self._address = address
        self._tls = tls
        self._config = config
        self._changed = asyncio.Event()
        self._fetch = FollowerFetch(
            local_id, config, broker_epoch, on_truncated, wake=self._changed.set, quota=quota
        )
        self._client: BrokerClient | None = None
        self._task = asyncio.create_task(self._run(), name=f"fetcher-{local_id}-from-{leader_id}")

    @property
    def failed(self) -> dict[Partition, str]:
        return self._fetch.failed

    def add(self, partition: Partition) -> None:
        self._fetch.add(partition)
        self._changed.set()

    def remove(self, partition: Partition) -> None:
        self._fetch.remove(partition)
        self._fetch.failed.pop(partition, None)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        if self._client is not None:
            self._client.close()

    async def _run(self) -> None:
        """The fetch loop, restarted after an unexpected error with exponential backoff
        (each restart is logged, so at most one line per backoff)."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(Exception),
            wait=wait_exponential_jitter(
                multiplier=ERROR_BACKOFF_S, max=RESTART_BACKOFF_MAX_S, jitter=ERROR_BACKOFF_S
            ),
            before_sleep=self._restarting,
        )
        async for attempt in retrying:
            with attempt:
                await self._fetch_loop()

    def _restarting(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.error(
            "replica fetcher failed; restarting",
            leader=self.leader_id,
            restarts=state.attempt_number,
            in_s=round(state.upcoming_sleep, 3),
            error=repr(error),
        )

    async def _fetch_loop(self) -> None:
        backoff_s = ERROR_BACKOFF_S
        while True:
            now = time.monotonic()
            ready = self._fetch.ready(now)
            client = self._leader()
            if not ready or client is None:
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), self._fetch.wait_s(now))
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
        on_truncated: Callable[[list[Partition], Callable[[], None]], None],
        tls: ssl.SSLContext | None = None,
        quota: ReplicationQuota | None = None,
    ) -> None:
        self._local_id = local_id
        self.quota = quota  # one follower throttle for every leader, as Kafka's
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
                self.quota,
            )
        fetcher.add(partition)
        self._source[partition] = partition.leader_id

    def stop_following(self, partition: Partition) -> None:
        leader = self._source.pop(partition, None)
        if leader is not None:
            self._fetchers[leader].remove(partition)

    def failed(self) -> dict[Partition, str]:
        """The partitions that stopped replicating on an error, and why."""
        return {p: why for fetcher in self._fetchers.values() for p, why in fetcher.failed.items()}

    async def close(self) -> None:
        fetchers, self._fetchers = self._fetchers, {}
        for fetcher in fetchers.values():
            await fetcher.close()
