"""A consumer's membership in its group: Kafka's ConsumerCoordinator, classic protocol.

The coordinator is found from any broker (FindCoordinator). Joining is JoinGroup (a new
member is told MEMBER_ID_REQUIRED and joins again with the id it was given), then
SyncGroup: the leader computes every member's partitions with the assignor the group
chose and sends them; each member gets its own. Subscriptions and assignments are Kafka's
ConsumerProtocol bytes, and the assignors are kafka-python's implementations of Kafka's
(``range``, ``cooperative-sticky``), so raftka consumers and Kafka's own clients can
share a group.

- Eager assignors (range) give up every partition before joining; cooperative-sticky
  (KIP-429) gives up only the partitions that move, and joins again at once when its new
  assignment took some away, so the second round can hand them to their new owner.
- A heartbeat task keeps the session alive between polls. REBALANCE_IN_PROGRESS makes the
  next ``ensure_active`` join again; UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION and
  FENCED_INSTANCE_ID mean the member lost its partitions (``lost``, not revoked: another
  member may already own them) and joins again as new; NOT_COORDINATOR sends it to find
  the coordinator again.
- A member that does not call ``ensure_active`` (its consumer's ``poll``) within
  ``max_poll_interval_ms`` leaves the group, as Kafka's consumer does, so a stuck
  application does not hold partitions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

import structlog
from kafka.coordinator.assignors.abstract import RebalanceProtocol
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from raftka.client.cluster_metadata import ClusterMetadata
from raftka.client.errors import ConsumerError
from raftka.client.types import TopicPartition
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import BrokerClient, WireError

E = controller_pb2.ErrorCode
log = structlog.get_logger("raftka.client.group")

PROTOCOL_TYPE = "consumer"
ASSIGNORS: dict[str, Callable[[], object]] = {
    "range": RangePartitionAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}
_RETRY = frozenset(
    {E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.REBALANCE_IN_PROGRESS, E.REQUEST_TIMED_OUT}
)
_LOST = frozenset({E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.FENCED_INSTANCE_ID})
Partitions = frozenset[TopicPartition]
Callback = Callable[[Partitions], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class _Member:
    """What kafka-python's assignors read of a member."""

    member_id: str
    group_instance_id: str | None
    metadata: object  # a decoded ConsumerProtocolSubscription


class _Cluster:
    """What kafka-python's assignors read of the cluster."""

    def __init__(self, metadata: ClusterMetadata) -> None:
        self._metadata = metadata

    def topics(self) -> set[str]:
        return set(self._metadata.topics)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        info = self._metadata.topics.get(topic)
        return None if info is None else set(info.partitions)


class GroupMember:
    def __init__(
        self,
        metadata: ClusterMetadata,
        group_id: str,
        *,
        client_id: str,
        assignors: Sequence[str],
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        max_poll_interval_ms: int,
        group_instance_id: str | None,
        retry_backoff_ms: int,
        request_timeout_s: float,
    ) -> None:
        unknown = [a for a in assignors if a not in ASSIGNORS]
        if unknown or not assignors:
            raise ValueError(
                f"partition_assignment_strategy: {unknown or 'none given'}; choose from {sorted(ASSIGNORS)}"
            )
        self._assignors = [ASSIGNORS[name]() for name in assignors]
        # Cooperative only when every assignor is (Kafka's rule: a list with range, its 3.x
        # default, rebalances eagerly, which is always safe).
        self.cooperative = all(
            RebalanceProtocol.COOPERATIVE in a.supported_protocols() for a in self._assignors
        )
        self._metadata = metadata
        self.group_id = group_id
        self._client_id = client_id
        self._session_timeout_ms = session_timeout_ms
        self._heartbeat_s = heartbeat_interval_ms / 1000
        self._max_poll_interval_s = max_poll_interval_ms / 1000
        self._rebalance_wait_s = (
            self._max_poll_interval_s + request_timeout_s
        )  # a join waits for the whole group
        self.group_instance_id = group_instance_id
        self._backoff_s = retry_backoff_ms / 1000
        self._timeout_s = request_timeout_s
        self.member_id = ""
        self.generation = -1
        self.assignment: Partitions = frozenset()
        self.rejoin_needed = True
        self._lost = False  # the last heartbeat said the member is out: its partitions are lost
        self._coordinator: BrokerClient | None = None
        self._joining = False  # heartbeats pause while a join is out: their answer would be stale
        self._last_poll = time.monotonic()
        self._heartbeats: asyncio.Task[None] | None = None
        self._rejoining: asyncio.Task[None] | None = None

    # joining -------------------------------------------------------------------------------

    async def ensure_active(
        self, topics: Iterable[str], revoke: Callback, assign: Callback, lose: Callback, timeout_s: float
    ) -> bool:
        """Join again if a rebalance is due. The join runs in the background, so a poll
        keeps to its timeout (as Kafka's does): True once the member is in a stable
        generation, False while it is still joining."""
        self._last_poll = time.monotonic()
        if self._lost:
            self._lost = False
            await self._give_up(self.assignment, lose)
        if self.rejoin_needed and self._rejoining is None:
            self._rejoining = asyncio.create_task(self._rejoin(sorted(set(topics)), revoke, assign))
        if self._rejoining is not None:
            done, _ = await asyncio.wait({self._rejoining}, timeout=timeout_s)
            if not done:
                return False
            rejoined, self._rejoining = self._rejoining, None
            rejoined.result()  # a fatal group error surfaces in poll
        if self._heartbeats is None or self._heartbeats.done():
            self._heartbeats = asyncio.create_task(self._heartbeat_loop(), name=f"heartbeat-{self.group_id}")
        return True

    async def _rejoin(self, topics: list[str], revoke: Callback, assign: Callback) -> None:
        while self.rejoin_needed:
            if not self.cooperative and self.assignment:
                await self._give_up(self.assignment, revoke)  # eager: everything goes before joining
            self._joining = True
            try:
                assignment = await self._join_and_sync(topics)
            finally:
                self._joining = False
            revoked, added = self.assignment - assignment, assignment - self.assignment
            self.assignment = assignment
            self.rejoin_needed = False
            if revoked:  # cooperative: what moved away goes now, and a second round hands it over
                await revoke(frozenset(revoked))
                self.rejoin_needed = True
            if added:
                await assign(frozenset(added))
            log.info(
                "joined group", group=self.group_id, generation=self.generation, partitions=len(assignment)
            )

    async def _give_up(self, partitions: Partitions, callback: Callback) -> None:
        self.assignment = frozenset()
        if partitions:
            await callback(frozenset(partitions))

    async def _join_and_sync(self, topics: list[str]) -> Partitions:
        while True:
            coordinator = await self._find()
            join = broker_pb2.JoinGroupRequest(
                group_id=self.group_id,
                session_timeout_ms=self._session_timeout_ms,
                rebalance_timeout_ms=int(self._max_poll_interval_s * 1000),
                member_id=self.member_id,
                protocol_type=PROTOCOL_TYPE,
                client_id=self._client_id,
            )
            if self.group_instance_id is not None:
                join.group_instance_id = self.group_instance_id
            for assignor in self._assignors:
                join.protocols.add(name=assignor.name, metadata=assignor.metadata(topics).encode())
            joined = await self._call(
                lambda b, r=join: b.JoinGroup(r, timeout=self._rebalance_wait_s), coordinator
            )
            if joined is None:
                continue
            if joined.status.error == E.MEMBER_ID_REQUIRED:
                self.member_id = joined.member_id
                continue
            if self._retry(joined.status):
                continue
            self.member_id, self.generation = joined.member_id, joined.generation_id
            assignment = await self._sync(coordinator, joined)
            if assignment is not None:
                return assignment

    async def _sync(
        self, coordinator: BrokerClient, joined: broker_pb2.JoinGroupResponse
    ) -> Partitions | None:
        assignor = next(a for a in self._assignors if a.name == joined.protocol_name)
        sync = broker_pb2.SyncGroupRequest(
            group_id=self.group_id,
            generation_id=joined.generation_id,
            member_id=self.member_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=joined.protocol_name,
        )
        if self.group_instance_id is not None:
            sync.group_instance_id = self.group_instance_id
        if joined.leader == self.member_id and not joined.skip_assignment:
            for member_id, assignment in (await self._assign(assignor, joined)).items():
                sync.assignments.add(member_id=member_id, assignment=assignment.encode())
        synced = await self._call(lambda b: b.SyncGroup(sync, timeout=self._rebalance_wait_s), coordinator)
        if synced is None or self._retry(synced.status):
            return None
        decoded = (
            ConsumerProtocolAssignment.decode(synced.assignment)
            if synced.assignment
            else ConsumerProtocolAssignment(0, [], b"")
        )
        assignor.on_assignment(decoded, joined.generation_id)
        return frozenset(
            TopicPartition(t.topic, p) for t in decoded.assigned_partitions for p in t.partitions
        )

    async def _assign(self, assignor: object, joined: broker_pb2.JoinGroupResponse) -> dict[str, object]:
        """The leader's work: every member's partitions, from fresh metadata."""
        members = [
            _Member(
                m.member_id,
                m.group_instance_id if m.HasField("group_instance_id") else None,
                ConsumerProtocolSubscription.decode(m.metadata),
            )
            for m in joined.members
        ]
        await self._metadata.refresh(force=True)
        return assignor.assign(_Cluster(self._metadata), members)  # type: ignore[attr-defined]

    def _retry(self, status: controller_pb2.Status) -> bool:
        """True for an answer worth trying again (after a backoff for most); raises the rest."""
        if status.error == E.NONE:
            return False
        if status.error in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE):
            self._coordinator = None
        if status.error == E.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if status.error in _RETRY or status.error in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            return True
        raise ConsumerError(E.Name(status.error), f"group {self.group_id!r}: {status.message}")

    # heartbeats ----------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_s)
            if time.monotonic() - self._last_poll > self._max_poll_interval_s:
                log.warning("no poll within max_poll_interval_ms: leaving the group", group=self.group_id)
                await self.leave("the application did not poll within max_poll_interval_ms")
                return
            if self._joining or self.generation < 0:
                continue
            generation = self.generation
            request = broker_pb2.HeartbeatRequest(
                group_id=self.group_id, generation_id=generation, member_id=self.member_id
            )
            if self.group_instance_id is not None:
                request.group_instance_id = self.group_instance_id
            answer = await self._call(lambda b, r=request: b.Heartbeat(r, timeout=self._timeout_s))
            if (
                answer is None
                or answer.status.error == E.NONE
                or self._joining
                or self.generation != generation
            ):
                continue  # fine, or about a generation the member has left behind
            error = answer.status.error
            if error == E.REBALANCE_IN_PROGRESS:
                self.rejoin_needed = True
            elif error in _LOST:
                self._reset_membership(lost=True)
            elif error in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE):
                self._coordinator = None
            log.debug("heartbeat answered", group=self.group_id, error=E.Name(error))

    def _reset_membership(self, *, lost: bool) -> None:
        if self.group_instance_id is None:
            self.member_id = ""
        self.generation = -1
        self.rejoin_needed = True
        self._lost = lost

    def commit_failed(self, error: int) -> None:
        """A commit refused as from a stale member: join again (and the partitions are lost)."""
        if error in _LOST:
            self._reset_membership(lost=True)
        elif error == E.REBALANCE_IN_PROGRESS:
            self.rejoin_needed = True

    async def leave(self, reason: str) -> None:
        """Leave the group (a static member does not: its place waits for it, KIP-345)."""
        if self.generation >= 0 and self.group_instance_id is None and self.member_id:
            request = broker_pb2.LeaveGroupRequest(group_id=self.group_id)
            request.members.add(member_id=self.member_id, reason=reason)
            await self._call(lambda b: b.LeaveGroup(request, timeout=self._timeout_s))
        self._reset_membership(lost=False)
        self.assignment = frozenset()

    async def close(self) -> None:
        for task in (self._heartbeats, self._rejoining):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    # the coordinator -----------------------------------------------------------------------

    async def coordinator(self) -> BrokerClient:
        return await self._find()

    def forget_coordinator(self) -> None:
        """It moved or does not answer: the next call finds it again."""
        self._coordinator = None

    async def _find(self) -> BrokerClient:
        if self._coordinator is None:
            self._coordinator = await find_coordinator(
                self._metadata, self.group_id, self._timeout_s, self._backoff_s
            )
        return self._coordinator

    async def _call(self, call: Callable[[BrokerClient], Awaitable], coordinator: BrokerClient | None = None):  # noqa: ANN202
        """One call to the coordinator; None (and the coordinator forgotten) if it got no answer."""
        target = coordinator or await self._find()
        try:
            answer = await call(target)
        except WireError as e:
            log.debug("coordinator unreachable", group=self.group_id, detail=str(e))
            self._coordinator = None
            await asyncio.sleep(self._backoff_s)
            return None
        if answer.status.error in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE):
            self._coordinator = None
            await asyncio.sleep(self._backoff_s)
        return answer


async def find_coordinator(
    metadata: ClusterMetadata,
    group_id: str,
    timeout_s: float,
    backoff_s: float,
    *,
    give_up_after_s: float | None = None,
    key_type: int = 0,
) -> BrokerClient:
    """The group's coordinator, asked of brokers until one answers (a consumer keeps
    trying, as Kafka's does; a tool gives up after ``give_up_after_s``); with
    ``key_type`` 1, ``group_id`` is a transactional id and this its coordinator."""
    deadline = None if give_up_after_s is None else time.monotonic() + give_up_after_s
    problem = ""
    while deadline is None or time.monotonic() < deadline:
        try:
            found = await metadata.any_broker().FindCoordinator(
                broker_pb2.FindCoordinatorRequest(group_id=group_id, key_type=key_type), timeout=timeout_s
            )
        except WireError as e:
            problem = str(e)
        else:
            if found.status.error == E.NONE:
                return metadata.broker_at(f"{found.host}:{found.port}")
            if found.status.error not in _RETRY:
                raise ConsumerError(E.Name(found.status.error), found.status.message)
            problem = f"{E.Name(found.status.error)}: {found.status.message}"
        await asyncio.sleep(backoff_s)
    raise ConsumerError("COORDINATOR_NOT_AVAILABLE", f"group {group_id!r}: no coordinator found: {problem}")
