"""A broker's group coordinator: the consumer groups the metadata puts on this broker.

Placement: ``raftka.metadata.group_placement``. A request for a group this broker does
not coordinate (in its image) is answered NOT_COORDINATOR; when the image moves a group
away, its waiting members are told so and its state is dropped, and its members find
the new coordinator. A group this broker takes up carries on from the last rebalance
recorded in the metadata log (``Group.carried_on``): the same generation, members and
assignments, so its members go on heartbeating and committing (and their transactions'
TxnOffsetCommits go through) with no rebalance. A group whose record cannot be carried on
(not Kafka's consumer protocol, whose assignments are recorded decoded; or recorded
before the members' timeouts were) starts its generations above the recorded one, so a
member of an old coordinator's generation cannot commit. This broker's image may lag, so the controller checks the same
on its own (``raftka.metadata.group_ops``): every write names this broker and its broker
epoch, and a refusal reaches the member as NOT_COORDINATOR or ILLEGAL_GENERATION.

Protocol rules live in ``raftka.broker.groups.group``; this module does the I/O: JoinGroup and
SyncGroup wait on futures until their group answers them, one timer task polls the
groups at their deadlines, a completed rebalance is recorded through the active
controller before its members hear their assignment, and offset commits are checked
against the group and then batched: one CommitGroupOffsets in flight, and what arrives
meanwhile goes in the next (at most ``COMMITS_WAITING_MAX`` wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import structlog
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from raftka.broker.controller_link import ControllerLink, LinkError
from raftka.broker.groups.group import PARKED, Delivery, Group, GroupLimits, Rebalanced, State, with_status
from raftka.metadata.group_placement import group_coordinator
from raftka.metadata.image import MetadataImage
from raftka.node.logs import RateLimitedLog
from raftka.rpc.stubs import ControllerRpc
from raftka.security.principal import current_principal
from raftka.v1 import broker_pb2, controller_pb2, metadata_pb2
from raftka.wire.frames import DATA_LISTENER
from raftka.wire.server import current_peer

E = controller_pb2.ErrorCode
Pb = broker_pb2
log = structlog.get_logger("raftka.broker.groups")
REBALANCE_LOG_INTERVAL_S = 10.0

CONTROLLER_WRITE_TIMEOUT_S = 5.0  # Kafka's offsets.commit.timeout.ms: how long a write may take
WRITE_RETRY_BACKOFF_S = 0.05
COMMITS_WAITING_MAX = 10_000  # offset commits queued behind the one in flight; more are refused
POLL_INTERVAL_MAX_S = 1.0
CONSUMER_PROTOCOL = "consumer"


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class GroupCoordinator:
    def __init__(
        self,
        broker_id: int,
        broker_epoch: Callable[[], int],
        limits: GroupLimits,
        link: ControllerLink,
        records_max: int,
        clock_ms: Callable[[], int] = _monotonic_ms,
    ) -> None:
        self.broker_id = broker_id
        self._broker_epoch = broker_epoch
        self.limits = limits
        self._link = link
        self._clock_ms = clock_ms
        self._image = MetadataImage()
        self._groups: dict[str, Group] = {}
        self._parked: dict[
            tuple[str, str, str], asyncio.Future[Pb.JoinGroupResponse | Pb.SyncGroupResponse]
        ] = {}
        self._wake = asyncio.Event()
        self._commits = _CommitBatcher(self._write, records_max, self._identity)
        self._tasks: set[asyncio.Task[None]] = set()
        self._rebalances = RateLimitedLog(log, REBALANCE_LOG_INTERVAL_S)  # a member rebalances at will
        self._emptying: set[str] = set()  # groups whose empty generation is being recorded

    # metadata ------------------------------------------------------------------------------

    def update(self, image: MetadataImage) -> None:
        """A new image: groups whose coordinator is now another broker are let go."""
        self._image = image
        for group_id in [g for g in self._groups if not self._owns(g)]:
            group = self._groups.pop(group_id)
            log.info(
                "group moved to another coordinator", group=group_id, coordinator=self._coordinator(group_id)
            )
            self._deliver(group_id, group.dead())

    def _coordinator(self, group_id: str) -> int | None:
        return group_coordinator(self._image, group_id)

    def _identity(self) -> dict[str, int]:
        """Who writes a group's commits and rebalances: the fields the controller checks."""
        return {"broker_id": self.broker_id, "broker_epoch": self._broker_epoch()}

    def _owns(self, group_id: str) -> bool:
        return self._coordinator(group_id) == self.broker_id

    def _group(self, group_id: str) -> Group:
        group = self._groups.get(group_id)
        if group is None or group.state is State.DEAD:
            group = self._groups[group_id] = self._from_image(group_id)
        return group

    def _existing(self, group_id: str) -> Group | None:
        """The group in memory, or else taken up from its last recorded rebalance (the
        group moved here); None if neither: a member's heartbeat or commit must not be
        refused UNKNOWN_MEMBER_ID only because the group has a new coordinator."""
        group = self._groups.get(group_id)
        if (group is None or group.state is State.DEAD) and group_id in self._image.groups:
            group = self._group(group_id)
        return group

    def _from_image(self, group_id: str) -> Group:
        recorded = self._image.groups.get(group_id)
        if recorded is None:
            return Group(group_id, self.limits)
        if recorded.protocol_type != CONSUMER_PROTOCOL or any(
            m.session_timeout_ms <= 0 for m in recorded.members
        ):
            return Group(group_id, self.limits, generation_floor=recorded.generation_id)
        assignments = {m.member_id: _encoded(m.assignment) for m in recorded.members}
        log.info(
            "group taken over",
            group=group_id,
            generation=recorded.generation_id,
            members=len(recorded.members),
            previous_coordinator=recorded.coordinator,
        )
        return Group.carried_on(group_id, self.limits, recorded, assignments, self._clock_ms())

    def _not_here(self, group_id: str) -> tuple[int, str] | None:
        if not group_id:
            return E.INVALID_GROUP_ID, "group_id: must not be empty"
        if self._owns(group_id):
            return None
        coordinator = self._coordinator(group_id)
        if coordinator is None:
            return E.COORDINATOR_NOT_AVAILABLE, "no unfenced broker can coordinate groups now"
        return (
            E.NOT_COORDINATOR,
            f"broker {self.broker_id} does not coordinate {group_id!r}; broker {coordinator} does",
        )

    # the protocol ----------------------------------------------------------------------------

    async def find_coordinator(self, request: Pb.FindCoordinatorRequest) -> Pb.FindCoordinatorResponse:
        response = Pb.FindCoordinatorResponse()
        coordinator = self._coordinator(request.group_id) if request.group_id else None
        broker = None if coordinator is None else self._image.brokers.get(coordinator)
        endpoint = None if broker is None else broker.endpoint(DATA_LISTENER)
        if not request.group_id:
            with_status(response, E.INVALID_GROUP_ID, "group_id: must not be empty")
        elif endpoint is None:
            with_status(response, E.COORDINATOR_NOT_AVAILABLE, "no unfenced broker can coordinate groups now")
        else:
            response.node_id, response.host, response.port = coordinator, endpoint.host, endpoint.port
        return response

    async def join(self, request: Pb.JoinGroupRequest) -> Pb.JoinGroupResponse:
        problem = self._not_here(request.group_id)
        if problem is not None:
            return with_status(Pb.JoinGroupResponse(member_id=request.member_id, generation_id=-1), *problem)
        if not request.client_host:
            request.client_host = "/" + current_peer.get().rpartition(":")[0]
        group = self._group(request.group_id)
        outcome = group.join(request, self._clock_ms())
        member_id = outcome.new_member_id or request.member_id
        return await self._answer(group.group_id, member_id, "join", outcome.answer, outcome.deliveries)

    async def sync(self, request: Pb.SyncGroupRequest) -> Pb.SyncGroupResponse:
        problem = self._not_here(request.group_id)
        if problem is not None:
            return with_status(Pb.SyncGroupResponse(), *problem)
        group = self._group(request.group_id)
        outcome = group.sync(request, self._clock_ms())
        if outcome.rebalanced is not None:
            self._spawn(self._record(group, outcome.rebalanced))
        return await self._answer(
            group.group_id, request.member_id, "sync", outcome.answer, outcome.deliveries
        )

    async def heartbeat(self, request: Pb.HeartbeatRequest) -> Pb.HeartbeatResponse:
        problem = self._not_here(request.group_id)
        if problem is not None:
            return with_status(Pb.HeartbeatResponse(), *problem)
        group = self._existing(request.group_id)
        if group is None:
            return with_status(
                Pb.HeartbeatResponse(), E.UNKNOWN_MEMBER_ID, f"no member {request.member_id!r}: join again"
            )
        response = group.heartbeat(request, self._clock_ms())
        self._wake.set()
        return response

    async def leave(self, request: Pb.LeaveGroupRequest) -> Pb.LeaveGroupResponse:
        problem = self._not_here(request.group_id)
        if problem is not None:
            return with_status(Pb.LeaveGroupResponse(), *problem)
        group = self._groups.get(request.group_id)
        if group is None or group.state is State.DEAD:
            # As Kafka: leaving a group this coordinator does not hold changes nothing (every
            # member is unknown), so a throwaway group answers and none is kept (else any
            # client could fill the coordinator's memory with LeaveGroups for made-up groups).
            return Group(request.group_id, self.limits).leave(request.members, self._clock_ms()).answer  # type: ignore[return-value]
        outcome = group.leave(request.members, self._clock_ms())
        self._deliver(group.group_id, outcome.deliveries)
        return outcome.answer  # type: ignore[return-value]

    async def describe(self, request: Pb.DescribeGroupsRequest) -> Pb.DescribeGroupsResponse:
        response = Pb.DescribeGroupsResponse()
        for group_id in request.groups:
            problem = self._not_here(group_id)
            group = self._groups.get(group_id)
            if problem is not None:
                described = response.groups.add(group_id=group_id, error=problem[0], message=problem[1])
            elif group is not None and group.state is not State.DEAD:
                described = response.groups.add()
                described.CopyFrom(group.describe(self.broker_id))
            else:
                recorded = self._image.groups.get(group_id)
                known = recorded is not None or group_id in self._image.offsets
                described = response.groups.add(
                    group_id=group_id,
                    state=(State.EMPTY if known else State.DEAD).value,
                    coordinator=self.broker_id,
                    protocol_type=recorded.protocol_type if recorded else "",
                    generation_id=recorded.generation_id if recorded else 0,
                )
        return response

    async def list_groups(self, request: Pb.ListGroupsRequest) -> Pb.ListGroupsResponse:
        """The groups this broker coordinates: in memory, or known to the metadata log."""
        response = Pb.ListGroupsResponse()
        states = set(request.states)
        listed: dict[str, tuple[str, str]] = {}
        for group_id in {*self._image.offsets, *self._image.groups}:
            if self._owns(group_id):
                recorded = self._image.groups.get(group_id)
                listed[group_id] = (
                    recorded.protocol_type if recorded else CONSUMER_PROTOCOL,
                    State.EMPTY.value,
                )
        for group_id, group in self._groups.items():
            if group.state is not State.DEAD and (group.members or group_id not in listed):
                listed[group_id] = (
                    group.protocol_type or listed.get(group_id, (CONSUMER_PROTOCOL, ""))[0],
                    group.state.value,
                )
        for group_id, (protocol_type, state) in sorted(listed.items()):
            if not states or state in states:
                response.groups.add(group_id=group_id, protocol_type=protocol_type, state=state)
        return response

    async def delete(
        self, request: controller_pb2.DeleteGroupsRequest
    ) -> controller_pb2.DeleteGroupsResponse:
        """Only groups without members; their offsets and history go through the quorum."""
        response = controller_pb2.DeleteGroupsResponse()
        deletable: list[str] = []
        for group_id in request.groups:
            result = response.groups.add(group=group_id)
            problem = self._not_here(group_id)
            group = self._groups.get(group_id)
            if problem is None and group is not None and group.members:
                problem = E.NON_EMPTY_GROUP, f"group {group_id!r} has {len(group.members)} members"
            if problem is not None:
                result.error, result.message = problem
            else:
                deletable.append(group_id)
        if not deletable:
            return response
        try:
            answer = await self._write(
                lambda stub: stub.DeleteGroups, controller_pb2.DeleteGroupsRequest(groups=deletable)
            )
        except LinkError as e:
            answer = with_status(controller_pb2.DeleteGroupsResponse(), E.COORDINATOR_NOT_AVAILABLE, str(e))
        outcomes = {r.group: r for r in answer.groups}
        for result in response.groups:
            if result.group not in deletable:
                continue
            outcome = outcomes.get(result.group)
            if answer.status.error != E.NONE or outcome is None:
                result.error, result.message = (
                    answer.status.error or E.UNKNOWN_SERVER_ERROR,
                    answer.status.message,
                )
                continue
            result.error, result.message = outcome.error, outcome.message
            if outcome.error == E.NONE and result.group in self._groups:
                self._deliver(result.group, self._groups.pop(result.group).dead())
        return response

    async def commit(
        self, request: controller_pb2.OffsetCommitRequest
    ) -> controller_pb2.OffsetCommitResponse:
        problem = self._not_here(request.group)
        generation = request.generation_id if request.HasField("generation_id") else None
        instance = request.group_instance_id if request.HasField("group_instance_id") else ""
        group = self._existing(request.group) if problem is None else None
        if problem is None and group is not None and group.state is not State.DEAD:
            problem = group.commit_problem(generation, request.member_id, instance)
            group.touch(request.member_id, self._clock_ms())
        elif problem is None and generation is not None and generation >= 0:
            problem = E.UNKNOWN_MEMBER_ID, f"no member {request.member_id!r} here: join again"
        if problem is not None:
            return with_status(controller_pb2.OffsetCommitResponse(), *problem)
        request.ClearField("coordinator_id")  # only this broker says who forwards it
        if generation is None and current_principal.get() is not None:
            # From outside the group (a reset) with TLS on: on its own, not batched, so the
            # controller judges it as the client that sent it (raftka.metadata.authorization),
            # and this broker as the group's coordinator (raftka.metadata.offset_ops).
            request.coordinator_id, request.coordinator_epoch = self.broker_id, self._broker_epoch()
            try:
                answer = await self._write(lambda stub: stub.OffsetCommit, request)
            except LinkError as e:
                return with_status(controller_pb2.OffsetCommitResponse(), E.COORDINATOR_NOT_AVAILABLE, str(e))
            answer.status.error = _for_members(answer.status.error)
            return answer
        return await self._commits.submit(request)

    async def txn_commit(
        self, request: controller_pb2.TxnOffsetCommitRequest
    ) -> controller_pb2.OffsetCommitResponse:
        """Kafka's TxnOffsetCommit: the member checked as Kafka checks it (only when the
        request names one: a producer outside the group may commit for it), then the
        offsets held in the producer's transaction through the quorum, which checks the
        transaction (``raftka.metadata.txn_ops``) and this broker as the group's coordinator."""
        offsets = request.offsets
        problem = self._not_here(offsets.group)
        generation = offsets.generation_id if offsets.HasField("generation_id") else -1
        instance = offsets.group_instance_id if offsets.HasField("group_instance_id") else ""
        if problem is None and (generation >= 0 or offsets.member_id or instance):
            group = self._existing(offsets.group)
            if group is None or group.state is State.DEAD:
                problem = E.UNKNOWN_MEMBER_ID, f"no member {offsets.member_id!r} here: join again"
            else:
                problem = group.commit_problem(generation, offsets.member_id, instance)
        if problem is not None:
            return with_status(controller_pb2.OffsetCommitResponse(), *problem)
        offsets.coordinator_id, offsets.coordinator_epoch = self.broker_id, self._broker_epoch()
        try:
            answer = await self._write(lambda stub: stub.TxnOffsetCommit, request)
        except LinkError as e:
            return with_status(controller_pb2.OffsetCommitResponse(), E.COORDINATOR_NOT_AVAILABLE, str(e))
        answer.status.error = _for_members(answer.status.error)
        return answer

    # running -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Poll groups at their deadlines until cancelled."""
        while True:
            now = self._clock_ms()
            deadline = self.poll(now)
            self._wake.clear()
            wait_s = min(
                ((deadline - now) / 1000 if deadline is not None else POLL_INTERVAL_MAX_S),
                POLL_INTERVAL_MAX_S,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(wait_s, 0.001))

    def poll(self, now_ms: int) -> int | None:
        """Act on the groups' deadlines that have passed (expired sessions, phases whose
        time is up); the next deadline, if any. ``run`` calls it; a simulation calls it on
        its own clock."""
        deadlines = []
        for group_id, group in list(self._groups.items()):
            deadline = group.next_deadline_ms()
            if deadline is not None and deadline <= now_ms:
                self._deliver(group_id, group.poll(now_ms))
                deadline = group.next_deadline_ms()
            if deadline is not None:
                deadlines.append(deadline)
            if group.state is State.EMPTY and not group.pending and self._log_names_members(group_id):
                self._record_emptied(group)  # kept until the log says so, else it would be carried on
            elif group.state in (State.EMPTY, State.DEAD) and not group.pending:
                del self._groups[group_id]  # nothing to remember: the log has its history
        return min(deadlines, default=None)

    def _log_names_members(self, group_id: str) -> bool:
        recorded = self._image.groups.get(group_id)
        return recorded is not None and bool(recorded.members)

    def _record_emptied(self, group: Group) -> None:
        """Record that the group has no members left, under a new generation (Kafka stores
        an Empty group's metadata too): a coordinator that takes it over later must not
        carry on members that are gone."""
        if group.group_id in self._emptying:
            return
        self._emptying.add(group.group_id)
        recorded = self._image.groups.get(group.group_id)
        floor = recorded.generation_id + 1 if recorded is not None else 0
        group.generation_id = max(group.generation_id, floor)
        self._spawn(self._record_empty(group.group_id, group.generation_id))

    async def _record_empty(self, group_id: str, generation_id: int) -> None:
        record = metadata_pb2.GroupRebalanceRecord(
            group=group_id,
            generation_id=generation_id,
            coordinator=self.broker_id,
        )
        request = controller_pb2.RecordGroupRebalanceRequest(rebalance=record, **self._identity())
        try:
            answer = await self._write(lambda stub: stub.RecordGroupRebalance, request)
            if answer.status.error != E.NONE:
                log.info("empty group not recorded", group=group_id, error=E.Name(answer.status.error))
        except LinkError as e:
            log.info("empty group not recorded", group=group_id, error=str(e))
        finally:
            self._emptying.discard(group_id)  # the next poll looks again

    async def close(self) -> None:
        for group_id, group in list(self._groups.items()):
            self._deliver(group_id, group.dead())
        self._groups.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._commits.close()

    # helpers --------------------------------------------------------------------------------

    async def _answer(
        self, group_id: str, member_id: str, kind: str, answer: object, deliveries: list[Delivery]
    ) -> object:
        """Deliver what others are owed, then answer now or wait to be answered."""
        self._deliver(group_id, deliveries)
        self._wake.set()
        if answer is not PARKED:
            return answer
        key = (group_id, member_id, kind)
        superseded = self._parked.pop(key, None)
        if superseded is not None and not superseded.done():
            superseded.set_result(_superseded(kind))
        future = self._parked[key] = asyncio.get_running_loop().create_future()
        try:
            return await future
        finally:
            if self._parked.get(key) is future:
                del self._parked[key]

    def _deliver(self, group_id: str, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            future = self._parked.pop((group_id, delivery.member_id, delivery.kind), None)
            if future is not None and not future.done():
                future.set_result(delivery.response)

    async def _record(self, group: Group, rebalanced: Rebalanced) -> None:
        """Write the completed rebalance, then let the group answer its members."""
        request = controller_pb2.RecordGroupRebalanceRequest(
            rebalance=self._rebalance_record(group.group_id, rebalanced), **self._identity()
        )
        try:
            answer = await self._write(lambda stub: stub.RecordGroupRebalance, request)
            error, message = _for_members(answer.status.error), answer.status.message
            if error == E.ILLEGAL_GENERATION:  # an old coordinator recorded more than our image showed
                group.generation_id = max(group.generation_id, answer.recorded_generation_id)
                error = E.REBALANCE_IN_PROGRESS
        except LinkError as e:
            error, message = E.COORDINATOR_NOT_AVAILABLE, f"the rebalance could not be recorded: {e}"
        if error != E.NONE:
            self._rebalances.log(
                logging.WARNING,
                "rebalance not recorded",
                group=group.group_id,
                generation=rebalanced.generation_id,
                error=E.Name(error),
                detail=message,
            )
        else:
            self._rebalances.log(
                logging.INFO,
                "rebalance completed",
                group=group.group_id,
                generation=rebalanced.generation_id,
                members=len(rebalanced.members),
            )
        if self._groups.get(group.group_id) is group:
            self._deliver(
                group.group_id, group.recorded(rebalanced.generation_id, error, message, self._clock_ms())
            )

    def _rebalance_record(self, group_id: str, rebalanced: Rebalanced) -> metadata_pb2.GroupRebalanceRecord:
        record = metadata_pb2.GroupRebalanceRecord(
            group=group_id,
            generation_id=rebalanced.generation_id,
            protocol_type=rebalanced.protocol_type,
            protocol_name=rebalanced.protocol_name,
            leader=rebalanced.leader,
            coordinator=self.broker_id,
        )
        for member_id, instance, client_id, host, session_ms, rebalance_ms, assignment in rebalanced.members:
            member = record.members.add(
                member_id=member_id,
                group_instance_id=instance,
                client_id=client_id,
                client_host=host,
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=rebalance_ms,
            )
            if rebalanced.protocol_type == CONSUMER_PROTOCOL:
                for topic, partitions in _assigned(assignment):
                    member.assignment.add(topic=topic, partitions=partitions)
        return record

    async def _write(self, rpc: ControllerRpc, request: object) -> object:
        """One controller write, tried again while no controller answers, up to a deadline."""
        deadline = time.monotonic() + CONTROLLER_WRITE_TIMEOUT_S
        backoff_s = WRITE_RETRY_BACKOFF_S
        while True:
            try:
                return await self._link.call(rpc, request)
            except LinkError:
                if time.monotonic() + backoff_s > deadline:
                    raise
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 1.0)

    def _spawn(self, work: object) -> None:
        task = asyncio.ensure_future(work)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class _CommitBatcher:
    """Offset commits that arrive while one CommitGroupOffsets is in flight go together in
    the next, up to ``records_max`` partitions per call."""

    def __init__(
        self,
        write: Callable,  # type: ignore[type-arg]
        records_max: int,
        identity: Callable[[], dict[str, int]],
    ) -> None:
        self._write = write
        self._records_max = records_max
        self._identity = identity
        self._queue: list[
            tuple[controller_pb2.OffsetCommitRequest, asyncio.Future[controller_pb2.OffsetCommitResponse]]
        ] = []
        self._sender: asyncio.Task[None] | None = None

    async def submit(
        self, request: controller_pb2.OffsetCommitRequest
    ) -> controller_pb2.OffsetCommitResponse:
        if len(self._queue) >= COMMITS_WAITING_MAX:
            return with_status(
                controller_pb2.OffsetCommitResponse(),
                E.REQUEST_TIMED_OUT,
                f"{COMMITS_WAITING_MAX} commits already wait; retry",
            )
        future = asyncio.get_running_loop().create_future()
        self._queue.append((request, future))
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send())
        return await future

    async def _send(self) -> None:
        while self._queue:
            batch, size = [], 0
            while self._queue:
                request = self._queue[0][0]
                partitions = sum(len(t.partitions) for t in request.topics)
                if batch and size + partitions > self._records_max:
                    break
                batch.append(self._queue.pop(0))
                size += partitions
            call = controller_pb2.CommitGroupOffsetsRequest(groups=[r for r, _ in batch], **self._identity())
            try:
                answer = await self._write(lambda stub: stub.CommitGroupOffsets, call)
                error, message = _for_members(answer.status.error), answer.status.message
            except LinkError as e:
                answer, error, message = (
                    None,
                    E.COORDINATOR_NOT_AVAILABLE,
                    f"no active controller took the commit: {e}",
                )
            for index, (_, future) in enumerate(batch):
                if future.done():
                    continue
                if error != E.NONE or answer is None or index >= len(answer.groups):
                    future.set_result(
                        with_status(
                            controller_pb2.OffsetCommitResponse(), error or E.UNKNOWN_SERVER_ERROR, message
                        )
                    )
                else:
                    future.set_result(answer.groups[index])

    async def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
        for _, future in self._queue:
            if not future.done():
                future.set_result(
                    with_status(
                        controller_pb2.OffsetCommitResponse(), E.NOT_COORDINATOR, "the broker is stopping"
                    )
                )
        self._queue.clear()


def _for_members(error: int) -> int:
    """The controller's refusal as a member should hear it: a write refused because this
    broker's registration is not the current one means this broker does not coordinate."""
    return E.NOT_COORDINATOR if error in (E.STALE_BROKER_EPOCH, E.BROKER_ID_NOT_REGISTERED) else error


def _assigned(assignment: bytes) -> list[tuple[str, list[int]]]:
    """A consumer's assignment as topic partitions; nothing for bytes that are not Kafka's
    ConsumerProtocolAssignment (the group's protocol is the clients' business)."""
    if not assignment:
        return []
    try:
        decoded = ConsumerProtocolAssignment.decode(assignment)
        return [(t.topic, list(t.partitions)) for t in decoded.assigned_partitions]
    except Exception:  # noqa: BLE001 - opaque bytes: recorded without an assignment
        return []


def _encoded(assigned: tuple[tuple[str, tuple[int, ...]], ...]) -> bytes:
    """A recorded consumer assignment as Kafka's ConsumerProtocolAssignment (version 0; the
    assignor's user data is not recorded)."""
    return ConsumerProtocolAssignment(
        0, [(topic, list(partitions)) for topic, partitions in assigned], b""
    ).encode()


def _superseded(kind: str) -> Pb.JoinGroupResponse | Pb.SyncGroupResponse:
    response = Pb.JoinGroupResponse(generation_id=-1) if kind == "join" else Pb.SyncGroupResponse()
    return with_status(
        response, E.REBALANCE_IN_PROGRESS, "the member sent another request: this one is dropped"
    )
