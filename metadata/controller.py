"""QuorumController: the active controller, running on the Raft leader.

One event loop, no locks. A write request is planned (validated and turned into
records, ``metadata.*_ops``) against the controller's *latest* image: the committed
image plus every batch this controller has appended and not yet seen commit. Planning,
replaying the records onto that image and proposing them to raft happen with no
``await`` in between, so requests are serialized exactly in log order and each sees
the effect of every request before it; the answer is sent once the batch commits.
Bad input is refused during planning, before anything is proposed; ``validate_only``
requests are planned the same way and answered without proposing. A request with a list
over its bound (``metadata.validation``) is refused before it is even planned, and a read
before its barrier, so no client can hold the loop for long or make it write.

Activation. Raft leadership alone is not enough: batches of earlier epochs may not
have reached this node's state machine yet. When the node leads a new epoch, the
controller appends a NoOpRecord and waits for it to commit; by then the state machine
holds every earlier batch, so its image becomes the latest image, broker sessions
restart with a full timeout, and requests are served. Requests that arrive meanwhile
wait for it. Losing the lead (or a batch failing to commit) drops the latest image with
whatever uncommitted state it held; requests are then answered NOT_CONTROLLER with the
leader's id and address, and the next activation starts again from committed state.

Linearizable reads. Before answering a read the controller appends a NoOpRecord and
waits for it to commit, then answers from the committed image: the commit proves this
node still led after the read arrived, and everything acknowledged before the read is
below it in the log. Reads that arrive while one such barrier is in flight share the
next one, so the cost is one small record and one commit round per group of reads,
not per read.

Large changes. Fencing a broker that is in 100,000 ISRs takes a PartitionChangeRecord
per partition, more than one raft batch may hold. Such a change is split into batches
of ``raft.append_max_records``, submitted back to back with nothing between them; each
batch is atomic, the change as a whole is not (as in Kafka), which is harmless: a
partially fenced broker is fenced again by the next controller once its session ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog
from raftka.v1 import controller_pb2, metadata_pb2

from metadata import broker_ops, config_ops, offset_ops, topic_ops
from metadata.delta import MetadataDelta, ReplayError
from metadata.image import MetadataImage
from metadata.plan import ErrorCode, MetadataRecord, Plan
from metadata.records import RecordError, encode
from metadata.sessions import BrokerSessions
from metadata.validation import ValidationError, check_request_bounds
from raft.core import NotLeaderError
from raft.driver import BackpressureError, RaftNode, monotonic_ms

if TYPE_CHECKING:
    from metadata.state_machine import MetadataStateMachine

log = structlog.get_logger("metadata.controller")

WRITES_IN_FLIGHT_MAX = 4096  # bound: writes awaiting commit; more are refused as REQUEST_TIMED_OUT
ACTIVATION_TIMEOUT_S = 5.0
TICK_INTERVAL_MS = 50  # how often sessions are checked (and a new leader activates unasked)
NOOP = MetadataRecord(no_op=metadata_pb2.NoOpRecord())

Status = controller_pb2.Status


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class QuorumController:
    def __init__(
        self,
        node: RaftNode,
        state_machine: MetadataStateMachine,
        *,
        cluster_id: str,
        addresses: Mapping[int, str],
        session_timeout_ms: int,
        max_partitions_per_topic: int,
        clock: Callable[[], int] = monotonic_ms,
        wall_clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._node = node
        self._state_machine = state_machine
        self._cluster_id = cluster_id
        self._addresses = dict(addresses)
        self._clock = clock
        self._wall_clock = wall_clock
        self._records_max = node.core.cfg.append_max_records
        self._limits = topic_ops.Limits(max_partitions_per_topic, self._records_max)
        self._sessions = BrokerSessions(session_timeout_ms)
        self._shutting_down: set[int] = set()  # brokers in controlled shutdown
        self._active_epoch: int | None = None
        self._image: MetadataImage | None = None  # committed + this controller's pending batches
        self._activation: asyncio.Future[None] | None = None
        self._activation_epoch = -1
        self._writes_in_flight = 0
        self._next_barrier: asyncio.Future[Status | None] | None = None
        self._barrier_task: asyncio.Task[None] | None = None
        self._log = log.bind(node_id=node.core.node_id)

    # leadership -----------------------------------------------------------------------
    @property
    def node_id(self) -> int:
        return self._node.core.node_id

    @property
    def is_active(self) -> bool:
        core = self._node.core
        return self._active_epoch is not None and core.is_leader and core.epoch == self._active_epoch

    @property
    def latest_image(self) -> MetadataImage | None:
        """The committed image plus this controller's pending batches; None unless active."""
        return self._image if self.is_active else None

    async def _ensure_active(self) -> Status | None:
        """None once this node is the active controller; else the NOT_CONTROLLER status."""
        if self.is_active:
            return None
        core = self._node.core
        if not core.is_leader:
            self._deactivate()
            return self._not_controller()
        if self._activation is None or self._activation_epoch != core.epoch:
            self._deactivate()
            self._activation_epoch = core.epoch
            self._activation = asyncio.ensure_future(self._activate(core.epoch))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._activation), ACTIVATION_TIMEOUT_S)
        return None if self.is_active else self._not_controller()

    async def _activate(self, epoch: int) -> None:
        try:
            await self._node.append([encode(NOOP)])
        except (NotLeaderError, BackpressureError) as e:
            self._log.info("controller activation failed", epoch=epoch, reason=str(e))
            return
        core = self._node.core
        if not (core.is_leader and core.epoch == epoch):
            return
        self._image = self._state_machine.image
        self._active_epoch = epoch
        self._shutting_down.clear()
        self._sessions.reset(self._image.brokers, self._clock())
        self._log.info(
            "controller active", epoch=epoch, offset=self._image.offset, brokers=len(self._image.brokers)
        )

    def _deactivate(self) -> None:
        if self._active_epoch is not None:
            self._log.info("controller inactive", epoch=self._active_epoch)
        self._active_epoch = None
        self._image = None

    def _not_controller(self) -> Status:
        core = self._node.core
        leader = core.leader_id
        if leader == self.node_id:
            message = f"node {self.node_id} leads epoch {core.epoch} but is not serving yet"
        else:
            message = f"node {self.node_id} is not the active controller"
        return Status(
            error=ErrorCode.NOT_CONTROLLER,
            message=message,
            controller_id=leader,
            controller_address=self._addresses.get(leader, ""),
        )

    def _answer(self, response: Any) -> Any:
        if response.status.error == ErrorCode.NONE:
            response.status.controller_id = self.node_id
            response.status.controller_address = self._addresses.get(self.node_id, "")
        return response

    def _out_of_bounds(self, request: Any) -> Status | None:
        """Why a client's request is refused before any work (a list over its bound), if it is."""
        try:
            check_request_bounds(request, self._records_max)
        except ValidationError as e:
            return Status(error=e.code, message=e.message)
        return None

    # the write path --------------------------------------------------------------------
    async def _write(
        self, response_type: type, plan: Callable[[MetadataImage], Plan], request: Any = None
    ) -> Any:
        """Plan against the latest image, propose, and answer once committed. ``request``
        is the client's, checked against the request bounds first; internal writes have none."""
        status = None if request is None else self._out_of_bounds(request)
        if status is not None:
            return response_type(status=status)
        status = await self._ensure_active()
        if status is not None:
            return response_type(status=status)
        if self._writes_in_flight >= WRITES_IN_FLIGHT_MAX:
            return response_type(status=_busy())
        assert self._image is not None
        made = plan(self._image)
        if made.failed or not made.records:
            return self._answer(made.response)
        status = await self._commit(made.records)
        return response_type(status=status) if status is not None else self._answer(made.response)

    def _propose(self, records: Sequence[MetadataRecord]) -> list[asyncio.Future[int]]:
        """Replay onto the latest image (a record that does not apply raises here, before
        anything is proposed), then submit, in batches raft accepts, back to back."""
        assert self.is_active and self._image is not None
        delta = MetadataDelta(self._image)
        for record in records:
            delta.replay(record)
        encoded = [encode(record) for record in records]
        image = delta.apply(self._node.core.log_end_offset + len(encoded))
        futures: list[asyncio.Future[int]] = []
        try:
            for start in range(0, len(encoded), self._records_max):
                futures.append(self._node.submit(encoded[start : start + self._records_max]))
        except (NotLeaderError, BackpressureError):
            if futures:  # part of the change is in the log: the latest image is unknown
                self._deactivate()
            raise
        finally:
            for future in futures:
                future.add_done_callback(_retrieve)
        self._image = image
        return futures

    async def _commit(self, records: Sequence[MetadataRecord]) -> Status | None:
        """Propose now (the caller planned against the latest image with no await since);
        None once every batch committed, else why not."""
        try:
            futures = self._propose(records)
        except NotLeaderError:
            self._deactivate()
            return self._not_controller()
        except BackpressureError:
            return _busy()
        except (RecordError, ReplayError) as e:
            # A request field no record may carry (a port of 0, an empty host...): refused
            # before anything was proposed, with the field named.
            return Status(error=ErrorCode.INVALID_REQUEST, message=str(e))
        self._writes_in_flight += 1
        try:
            for future in futures:
                await future
        except NotLeaderError:
            self._deactivate()
            return self._not_controller()
        finally:
            self._writes_in_flight -= 1
        return None

    # the read path ---------------------------------------------------------------------
    async def _read(self, response_type: type, answer: Callable[[MetadataImage], Any], request: Any) -> Any:
        status = self._out_of_bounds(request)
        if status is None:
            status = await self._ensure_active()
        if status is None:
            status = await self._confirm_leadership()
        if status is not None:
            return response_type(status=status)
        return self._answer(answer(self._state_machine.image))

    async def _confirm_leadership(self) -> Status | None:
        """Join the next read barrier (see the module doc)."""
        group = self._next_barrier
        if group is None:
            group = self._next_barrier = asyncio.get_running_loop().create_future()
            if self._barrier_task is None:
                self._barrier_task = asyncio.create_task(self._run_barriers())
        return await asyncio.shield(group)

    async def _run_barriers(self) -> None:
        try:
            while self._next_barrier is not None:
                group, self._next_barrier = self._next_barrier, None
                status = await self._commit([NOOP]) if self.is_active else self._not_controller()
                group.set_result(status)
        finally:
            self._barrier_task = None

    # topics ----------------------------------------------------------------------------
    async def create_topics(
        self, request: controller_pb2.CreateTopicsRequest
    ) -> controller_pb2.CreateTopicsResponse:
        return await self._write(
            controller_pb2.CreateTopicsResponse,
            lambda image: topic_ops.create_topics(image, request, self._limits, _topic_id),
            request,
        )

    async def delete_topics(
        self, request: controller_pb2.DeleteTopicsRequest
    ) -> controller_pb2.DeleteTopicsResponse:
        return await self._write(
            controller_pb2.DeleteTopicsResponse,
            lambda image: topic_ops.delete_topics(image, request),
            request,
        )

    async def create_partitions(
        self, request: controller_pb2.CreatePartitionsRequest
    ) -> controller_pb2.CreatePartitionsResponse:
        return await self._write(
            controller_pb2.CreatePartitionsResponse,
            lambda image: topic_ops.create_partitions(image, request, self._limits),
            request,
        )

    async def list_topics(
        self, request: controller_pb2.ListTopicsRequest
    ) -> controller_pb2.ListTopicsResponse:
        return await self._read(controller_pb2.ListTopicsResponse, topic_ops.list_topics, request)

    async def describe_topics(
        self, request: controller_pb2.DescribeTopicsRequest
    ) -> controller_pb2.DescribeTopicsResponse:
        return await self._read(
            controller_pb2.DescribeTopicsResponse,
            lambda image: topic_ops.describe_topics(image, request),
            request,
        )

    # configs ---------------------------------------------------------------------------
    async def describe_configs(
        self, request: controller_pb2.DescribeConfigsRequest
    ) -> controller_pb2.DescribeConfigsResponse:
        return await self._read(
            controller_pb2.DescribeConfigsResponse, lambda image: config_ops.describe(image, request), request
        )

    async def alter_configs(
        self, request: controller_pb2.AlterConfigsRequest
    ) -> controller_pb2.AlterConfigsResponse:
        return await self._write(
            controller_pb2.AlterConfigsResponse, lambda image: config_ops.alter(image, request), request
        )

    # brokers ---------------------------------------------------------------------------
    async def register_broker(
        self, request: controller_pb2.BrokerRegistrationRequest
    ) -> controller_pb2.BrokerRegistrationResponse:
        def plan(image: MetadataImage) -> Plan:
            made = broker_ops.register(image, request, self._node.core.log_end_offset)
            if not made.failed:
                self._sessions.touch(request.broker_id, self._clock())
                self._shutting_down.discard(request.broker_id)
            return made

        return await self._write(controller_pb2.BrokerRegistrationResponse, plan, request)

    async def broker_heartbeat(
        self, request: controller_pb2.BrokerHeartbeatRequest
    ) -> controller_pb2.BrokerHeartbeatResponse:
        def plan(image: MetadataImage) -> Plan:
            made = broker_ops.heartbeat(image, request, self._shutting_down)
            if not made.failed:
                self._sessions.touch(request.broker_id, self._clock())
                if request.want_shut_down and request.broker_id not in self._shutting_down:
                    self._log.info("broker in controlled shutdown", broker_id=request.broker_id)
                    self._shutting_down.add(request.broker_id)
            return made

        return await self._write(controller_pb2.BrokerHeartbeatResponse, plan, request)

    async def describe_cluster(
        self, request: controller_pb2.DescribeClusterRequest
    ) -> controller_pb2.DescribeClusterResponse:
        return await self._read(
            controller_pb2.DescribeClusterResponse,
            lambda image: broker_ops.describe_cluster(
                image, self._cluster_id, self.node_id, self._shutting_down
            ),
            request,
        )

    async def alter_partition(
        self, request: controller_pb2.AlterPartitionRequest
    ) -> controller_pb2.AlterPartitionResponse:
        return await self._write(
            controller_pb2.AlterPartitionResponse,
            lambda image: broker_ops.alter_partition(image, request),
            request,
        )

    async def elect_leaders(
        self, request: controller_pb2.ElectLeadersRequest
    ) -> controller_pb2.ElectLeadersResponse:
        return await self._write(
            controller_pb2.ElectLeadersResponse,
            lambda image: broker_ops.elect_leaders(image, request),
            request,
        )

    async def allocate_producer_ids(
        self, request: controller_pb2.AllocateProducerIdsRequest
    ) -> controller_pb2.AllocateProducerIdsResponse:
        return await self._write(
            controller_pb2.AllocateProducerIdsResponse,
            lambda image: broker_ops.allocate_producer_ids(image, request),
            request,
        )

    # offsets ---------------------------------------------------------------------------
    async def commit_offsets(
        self, request: controller_pb2.OffsetCommitRequest
    ) -> controller_pb2.OffsetCommitResponse:
        return await self._write(
            controller_pb2.OffsetCommitResponse,
            lambda image: offset_ops.commit(image, request, self._wall_clock()),
            request,
        )

    async def fetch_offsets(
        self, request: controller_pb2.OffsetFetchRequest
    ) -> controller_pb2.OffsetFetchResponse:
        return await self._read(
            controller_pb2.OffsetFetchResponse, lambda image: offset_ops.fetch(image, request), request
        )

    # sessions --------------------------------------------------------------------------
    async def tick(self) -> None:
        """Activate if this node newly leads; fence brokers whose session has expired."""
        if await self._ensure_active() is not None:
            return
        for broker_id in self._sessions.expired(self._clock()):
            await self._write(
                controller_pb2.BrokerHeartbeatResponse, lambda image, b=broker_id: self._expire(image, b)
            )
            image = self.latest_image
            if image is None:
                return
            broker = image.brokers.get(broker_id)
            if broker is None or broker.fenced:
                self._sessions.forget(broker_id)

    def _expire(self, image: MetadataImage, broker_id: int) -> Plan:
        broker = image.brokers.get(broker_id)
        response = controller_pb2.BrokerHeartbeatResponse()
        if broker is None or broker.fenced:
            return Plan(response)
        self._log.info("broker session expired: fencing it", broker_id=broker_id, epoch=broker.epoch)
        return Plan(response, broker_ops.fence(image, broker))

    async def run(self) -> None:
        """Tick until cancelled."""
        while True:
            try:
                await self.tick()
            except Exception:
                self._log.exception("controller tick failed")
            await asyncio.sleep(TICK_INTERVAL_MS / 1000)


def _topic_id() -> bytes:
    return uuid.uuid4().bytes


def _busy() -> Status:
    return Status(
        error=ErrorCode.REQUEST_TIMED_OUT,
        message=f"the controller has {WRITES_IN_FLIGHT_MAX} writes awaiting commit; retry later",
    )


def _retrieve(future: asyncio.Future[int]) -> None:
    """Mark a batch's outcome as seen, even when no request is left to await it."""
    if not future.cancelled():
        future.exception()
