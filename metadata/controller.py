"""QuorumController: the active controller, running on the Raft leader.

One event loop, no locks. A write request is planned (validated and turned into
records, ``metadata.*_ops``) against the controller's *latest* image: the committed
image plus every batch this controller has appended and not yet seen commit. Planning,
replaying the records onto that image and proposing them to raft happen with no
``await`` in between, so requests are serialized exactly in log order and each sees
the effect of every request before it; the answer is sent once the batch commits.
Bad input is refused during planning, before anything is proposed. A request with a
list over its bound (``raftka.metadata.validation``) is refused before it is even planned, and
a read before its barrier, so no client can hold the loop for long or make it write.

Answers come from committed state only. A plan that writes nothing (a refusal, a
duplicate create, a config already set, ``validate_only``, a heartbeat that finds its
unfence already on the way) still read the latest image, which may hold batches that
never commit if this node is cut off and replaced; so, as Kafka's controller does, it
is answered only once every batch proposed before it has committed, and
NOT_CONTROLLER if one of them fails.

Leadership is pushed by raft (``RaftNode.add_leadership_listener``), which announces
this node as leader only once its epoch's first batch has committed: by then the state
machine holds every earlier batch, so the controller claims at once from the committed
image, and restarts broker sessions with a full timeout. Any other announcement
renounces: the latest image and whatever uncommitted state it held are dropped, and
requests are answered NOT_CONTROLLER with the leader raft names (none while an
election runs or after this node resigned). Requests that arrive while this node leads
but has not claimed yet wait for the claim.

Linearizable reads. Before answering a read the controller appends a NoOpRecord and
waits for it to commit, then answers from the committed image: the commit proves this
node still led after the read arrived, and everything acknowledged before the read is
below it in the log. Reads that arrive while one such barrier is in flight share the
next one, so the cost is one small record and one commit round per group of reads,
not per read.

Large changes. Fencing a broker that is in 100,000 ISRs takes a PartitionChangeRecord
per partition. It runs in steps of at most ``raft.append_max_records`` changes
(``broker_ops.fence``), each planned on the image the previous step produced and
committed before the next, so the loop serves other requests in between; a partially
fenced broker is fenced again by the next controller once its session ends (as in
Kafka). Other changes that span batches (unfencing such a broker) are submitted back
to back with nothing between them, after checking that raft will accept all of them (a
change refused halfway would leave the latest image unknown); each batch is atomic,
the change as a whole is not. Should a submission fail halfway all the same, the
controller resigns raft leadership as Kafka's does, so a fresh claim starts from
committed state instead of leaving a leader that cannot serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from raftka.metadata import (
    acl_ops,
    broker_ops,
    config_ops,
    elections,
    group_ops,
    offset_ops,
    quota_ops,
    reassign_ops,
    scram_ops,
    topic_ops,
    txn_ops,
)
from raftka.metadata.delta import MetadataDelta, ReplayError
from raftka.metadata.image import MetadataImage
from raftka.metadata.offline_replicas import OfflineReplicas
from raftka.metadata.plan import ErrorCode, MetadataRecord, Plan
from raftka.metadata.records import RecordError, encode
from raftka.metadata.sessions import BrokerSessions
from raftka.metadata.validation import ValidationError, check_request_bounds
from raftka.raft.core import NotLeaderError
from raftka.raft.driver import BackpressureError, LeaderAndEpoch, RaftNode, monotonic_ms
from raftka.security import scram
from raftka.v1 import controller_pb2, metadata_pb2

if TYPE_CHECKING:
    from raftka.metadata.state_machine import MetadataStateMachine

log = structlog.get_logger("raftka.metadata.controller")

WRITES_IN_FLIGHT_MAX = 4096  # bound: writes awaiting commit; more are refused as REQUEST_TIMED_OUT
CLAIM_WAIT_S = 5.0  # a request to a leader that has not claimed yet waits this long at most
TICK_INTERVAL_MS = 50  # how often broker sessions are checked
OFFSET_EXPIRY_INTERVAL_MS = 60_000  # how often the active controller looks for idle groups to expire
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
        address_of: Callable[[int], str],
        session_timeout_ms: int,
        max_partitions_per_topic: int,
        offsets_retention_ms: int,
        transactional_id_expiration_ms: int = 604_800_000,
        leader_rebalance_interval_ms: int = 0,
        disconnect_fence_ms: int = 0,
        clock: Callable[[], int] = monotonic_ms,
        wall_clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._node = node
        self._state_machine = state_machine
        self._cluster_id = cluster_id
        self._address_of = address_of  # a controller's address, from the voter set in the log
        self._clock = clock
        self._wall_clock = wall_clock
        self._records_max = node.config.append_max_records
        self._limits = topic_ops.Limits(max_partitions_per_topic, self._records_max)
        self._sessions = BrokerSessions(session_timeout_ms, disconnect_fence_ms)
        self._offsets_retention_ms = offsets_retention_ms
        self._transactional_id_expiration_ms = transactional_id_expiration_ms
        self._next_offset_expiry_ms = 0  # monotonic: the first tick as active controller looks
        self._leader_rebalance_interval_ms = leader_rebalance_interval_ms  # 0: off
        self._next_leader_rebalance_ms = clock() + leader_rebalance_interval_ms
        self._shutting_down: set[int] = set()  # brokers in controlled shutdown
        self._offline = OfflineReplicas()  # what each broker last reported offline
        # who may be elected: not a broker in controlled shutdown, nor one reporting the partition offline
        self._may_lead = elections.staying(self._shutting_down, self._offline.may_lead)
        self._leadership = node.leadership
        self._active_epoch: int | None = None
        self._active_since_ms = 0  # when this controller last claimed, on its clock
        self._image: MetadataImage | None = None  # committed + this controller's pending batches
        self._last_proposed: asyncio.Future[int] | None = None  # the newest batch not known committed
        self._claimed = asyncio.Event()
        self._writes_in_flight = 0
        self._next_barrier: asyncio.Future[Status | None] | None = None
        self._barrier_task: asyncio.Task[None] | None = None
        self._log = log.bind(node_id=node.node_id)
        node.add_leadership_listener(self._on_leadership)
        node.add_peer_connection_listener(self._on_peer_connection)

    # leadership -----------------------------------------------------------------------
    @property
    def node_id(self) -> int:
        return self._node.node_id

    @property
    def is_active(self) -> bool:
        return self._active_epoch is not None

    @property
    def latest_image(self) -> MetadataImage | None:
        """The committed image plus this controller's pending batches; None unless active."""
        return self._image

    def _on_leadership(self, leadership: LeaderAndEpoch) -> None:
        self._leadership = leadership
        if leadership.leader_id == self.node_id:
            if self._active_epoch != leadership.epoch:
                self._claim(leadership.epoch)
        elif self._active_epoch is not None:
            self._renounce()

    def _claim(self, epoch: int) -> None:
        self._image = self._state_machine.image
        self._active_epoch = epoch
        self._last_proposed = None
        self._shutting_down.clear()
        self._offline.clear()
        self._active_since_ms = self._clock()
        self._sessions.reset(self._image.brokers, self._active_since_ms)
        self._claimed.set()
        self._log.info(
            "controller active", epoch=epoch, offset=self._image.offset, brokers=len(self._image.brokers)
        )

    def _renounce(self) -> None:
        self._log.info("controller inactive", epoch=self._active_epoch, leader_id=self._leadership.leader_id)
        self._active_epoch = None
        self._image = None
        self._last_proposed = None
        self._claimed.clear()

    async def _ensure_active(self) -> Status | None:
        """None once this node is the active controller; else the NOT_CONTROLLER status.
        A node that leads but has not claimed yet (its epoch not committed) is waited for."""
        if not self.is_active and self._node.is_leader:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._claimed.wait(), CLAIM_WAIT_S)
        return None if self.is_active else self._not_controller()

    def _not_controller(self) -> Status:
        leader = self._leadership.leader_id
        if self._node.is_leader:
            message = f"node {self.node_id} leads epoch {self._leadership.epoch} but is not serving yet"
        else:
            message = f"node {self.node_id} is not the active controller"
        return Status(
            error=ErrorCode.NOT_CONTROLLER,
            message=message,
            controller_id=leader,
            controller_address=self._address_of(leader),
        )

    def _answer(self, response: Any) -> Any:
        if response.status.error == ErrorCode.NONE:
            response.status.controller_id = self.node_id
            response.status.controller_address = self._address_of(self.node_id)
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
        self,
        response_type: type,
        plan: Callable[[MetadataImage], Plan],
        request: Any = None,
        planned: Callable[[Plan], None] | None = None,
    ) -> Any:
        """Plan against the latest image, propose, and answer once committed.

        ``request`` is the client's, checked against the request bounds first; internal
        writes have none. ``planned`` runs right after planning, before anything can
        interleave: the controller's own bookkeeping for the request (sessions), kept out
        of the plan."""
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
        if planned is not None:
            planned(made)
        if made.failed or not made.records:
            status = await self._pending_committed()
        else:
            status = await self._commit(made.records)
        return response_type(status=status) if status is not None else self._answer(made.response)

    async def _pending_committed(self) -> Status | None:
        """Wait until every batch proposed so far has committed (see the module doc)."""
        pending = self._last_proposed
        if pending is None:
            return None
        self._writes_in_flight += 1
        try:
            await asyncio.shield(pending)
        except NotLeaderError:
            return self._not_controller()
        finally:
            self._writes_in_flight -= 1
        if self._last_proposed is pending:
            self._last_proposed = None
        return None

    def _propose(self, records: Sequence[MetadataRecord]) -> None:
        """Replay onto the latest image (a record that does not apply raises here, before
        anything is proposed), then submit, in batches raft accepts, back to back."""
        assert self.is_active and self._image is not None
        delta = MetadataDelta(self._image)
        for record in records:
            delta.replay(record)
        encoded = [encode(record) for record in records]
        chunks = [
            encoded[start : start + self._records_max] for start in range(0, len(encoded), self._records_max)
        ]
        if len(chunks) > self._node.append_capacity:
            raise BackpressureError(f"{len(chunks)} batches do not fit in raft's pending appends")
        image = delta.apply(self._node.log_end_offset + len(encoded))
        futures: list[asyncio.Future[int]] = []
        try:
            for chunk in chunks:
                futures.append(self._node.submit(chunk))
        except (NotLeaderError, BackpressureError):
            if futures:  # part of the change is in the log: the latest image is unknown
                self._log.error("a change was submitted only in part: resigning", batches=len(chunks))
                self._node.resign()
            raise
        finally:
            for future in futures:
                future.add_done_callback(_retrieve)
        self._image = image
        self._last_proposed = futures[-1]

    async def _commit(self, records: Sequence[MetadataRecord]) -> Status | None:
        """Propose now (the caller planned against the latest image with no await since);
        None once every batch committed, else why not. Batches commit in log order, so
        waiting for the last is waiting for all."""
        try:
            self._propose(records)
        except NotLeaderError:
            return self._not_controller()
        except BackpressureError:
            return _busy()
        except (RecordError, ReplayError) as e:
            # A request field no record may carry (a port of 0, an empty host...): refused
            # before anything was proposed, with the field named.
            return Status(error=ErrorCode.INVALID_REQUEST, message=str(e))
        return await self._pending_committed()

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
            lambda image: topic_ops.create_topics(
                image, request, self._limits, _topic_id, self._shutting_down
            ),
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
            lambda image: topic_ops.create_partitions(image, request, self._limits, self._shutting_down),
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
            controller_pb2.AlterConfigsResponse,
            lambda image: config_ops.alter(image, request, self._may_lead),
            request,
        )

    # brokers ---------------------------------------------------------------------------
    async def register_broker(
        self, request: controller_pb2.BrokerRegistrationRequest
    ) -> controller_pb2.BrokerRegistrationResponse:
        def plan(image: MetadataImage) -> Plan:
            live = self._sessions.is_live(request.broker_id, self._clock())
            return broker_ops.register(
                image, request, self._node.log_end_offset, has_live_session=live, may_lead=self._may_lead
            )

        def planned(made: Plan) -> None:
            if not made.failed:
                self._sessions.touch(request.broker_id, self._clock())
                self._shutting_down.discard(request.broker_id)
                self._offline.forget(request.broker_id)  # the new incarnation reports its own

        await self._fence_previous_incarnation(request)
        return await self._write(controller_pb2.BrokerRegistrationResponse, plan, request, planned)

    async def _fence_previous_incarnation(self, request: controller_pb2.BrokerRegistrationRequest) -> None:
        """A broker restarted before its session ran out (``broker_ops.restarted``): its
        previous incarnation is gone, so its session ends now and it is fenced as an
        expired one is, in steps, before the new one registers. The partitions it led get
        new leaders in new leader epochs at once, not a session timeout later, and the
        image never names the dead process leader when the new one starts serving.
        (Kafka refuses such a registration until the session lapses.)"""
        image = self.latest_image
        if image is None or self._out_of_bounds(request) is not None:
            return  # _write answers
        live = self._sessions.is_live(request.broker_id, self._clock())
        previous = broker_ops.restarted(image, request, has_live_session=live)
        if previous is None:
            return
        self._log.info(
            "broker restarted before its session ended: fencing its previous incarnation",
            broker_id=request.broker_id,
            incarnation_id=request.incarnation_id,
            previous_incarnation_id=previous.incarnation_id,
        )
        self._sessions.end(request.broker_id, self._clock())
        await self._fence_expired(request.broker_id)

    async def unregister_broker(
        self, request: controller_pb2.UnregisterBrokerRequest
    ) -> controller_pb2.UnregisterBrokerResponse:
        """Kafka's UnregisterBroker, in steps of at most a batch (``broker_ops.unregister``).
        While it runs the broker counts as shutting down, so no leader takes it back into
        an ISR between two steps; once it is gone its session and reports are forgotten."""
        done = False

        def planned(made: Plan) -> None:
            nonlocal done
            done = made.failed or made.records[-1].HasField("unregister_broker")

        broker_id = request.broker_id
        leaving = broker_id not in self._shutting_down
        self._shutting_down.add(broker_id)
        try:
            while True:
                response = await self._write(
                    controller_pb2.UnregisterBrokerResponse,
                    lambda image: broker_ops.unregister(image, broker_id, self._records_max, self._may_lead),
                    request,
                    planned,
                )
                if response.status.error != ErrorCode.NONE or done:
                    break
        finally:
            if leaving:
                self._shutting_down.discard(broker_id)
        if response.status.error == ErrorCode.NONE:
            self._log.info("broker unregistered", broker_id=broker_id)
            self._sessions.forget(broker_id)
            self._offline.forget(broker_id)
        return response

    async def broker_heartbeat(
        self, request: controller_pb2.BrokerHeartbeatRequest
    ) -> controller_pb2.BrokerHeartbeatResponse:
        steps_left = False  # a step of this heartbeat's changes filled a batch: plan again

        def planned(made: Plan) -> None:
            nonlocal steps_left
            steps_left = len(made.records) >= self._records_max
            if made.failed:
                return
            self._sessions.touch(request.broker_id, self._clock())
            assert self._image is not None  # the image just planned on
            before = self._offline.last_heard(request.broker_id) or frozenset()
            offline = self._offline.hear(self._image, request)
            if offline != before:  # once per change of the report, not per heartbeat
                self._log.info(
                    "broker's offline partitions changed",
                    broker_id=request.broker_id,
                    offline=len(offline),
                    back=len(before - offline),
                )
            if request.want_shut_down and request.broker_id not in self._shutting_down:
                self._log.info("broker in controlled shutdown", broker_id=request.broker_id)
                self._shutting_down.add(request.broker_id)

        def fencing(response: controller_pb2.BrokerHeartbeatResponse) -> bool:
            """A fence this heartbeat asked for has steps left (see ``broker_ops.fence``)."""
            return (
                response.status.error == ErrorCode.NONE
                and not response.is_fenced
                and (request.want_fence or request.want_shut_down or request.broker_id in self._shutting_down)
            )

        while True:
            response = await self._write(
                controller_pb2.BrokerHeartbeatResponse,
                lambda image: broker_ops.heartbeat(
                    image, request, self._shutting_down, self._records_max, self._offline
                ),
                request,
                planned,
            )
            if not fencing(response) and not (steps_left and response.status.error == ErrorCode.NONE):
                return response

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
            lambda image: broker_ops.alter_partition(image, request, self._shutting_down),
            request,
        )

    async def elect_leaders(
        self, request: controller_pb2.ElectLeadersRequest
    ) -> controller_pb2.ElectLeadersResponse:
        return await self._write(
            controller_pb2.ElectLeadersResponse,
            lambda image: broker_ops.elect_leaders(image, request, self._may_lead),
            request,
        )

    async def alter_partition_reassignments(
        self, request: controller_pb2.AlterPartitionReassignmentsRequest
    ) -> controller_pb2.AlterPartitionReassignmentsResponse:
        return await self._write(
            controller_pb2.AlterPartitionReassignmentsResponse,
            lambda image: reassign_ops.alter(image, request, self._shutting_down),
            request,
        )

    async def list_partition_reassignments(
        self, request: controller_pb2.ListPartitionReassignmentsRequest
    ) -> controller_pb2.ListPartitionReassignmentsResponse:
        return await self._read(
            controller_pb2.ListPartitionReassignmentsResponse,
            lambda image: reassign_ops.list_reassignments(image, request),
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

    # consumer groups (written by their coordinators) -----------------------------------
    async def commit_group_offsets(
        self, request: controller_pb2.CommitGroupOffsetsRequest
    ) -> controller_pb2.CommitGroupOffsetsResponse:
        return await self._write(
            controller_pb2.CommitGroupOffsetsResponse,
            lambda image: group_ops.commit_batch(image, request, self._wall_clock()),
            request,
        )

    async def record_group_rebalance(
        self, request: controller_pb2.RecordGroupRebalanceRequest
    ) -> controller_pb2.RecordGroupRebalanceResponse:
        return await self._write(
            controller_pb2.RecordGroupRebalanceResponse,
            lambda image: group_ops.record_rebalance(image, request, self._wall_clock()),
            request,
        )

    async def delete_groups(
        self, request: controller_pb2.DeleteGroupsRequest
    ) -> controller_pb2.DeleteGroupsResponse:
        return await self._write(
            controller_pb2.DeleteGroupsResponse, lambda image: group_ops.delete(image, request), request
        )

    # transactions (written by their coordinators) --------------------------------------
    async def write_transaction(
        self, request: controller_pb2.WriteTransactionRequest
    ) -> controller_pb2.WriteTransactionResponse:
        return await self._write(
            controller_pb2.WriteTransactionResponse,
            lambda image: txn_ops.write(image, request, self._wall_clock()),
            request,
        )

    async def txn_offset_commit(
        self, request: controller_pb2.TxnOffsetCommitRequest
    ) -> controller_pb2.OffsetCommitResponse:
        return await self._write(
            controller_pb2.OffsetCommitResponse,
            lambda image: txn_ops.commit_offsets(image, request, self._wall_clock()),
            request,
        )

    # ACLs ------------------------------------------------------------------------------

    async def create_acls(
        self, request: controller_pb2.CreateAclsRequest
    ) -> controller_pb2.CreateAclsResponse:
        return await self._write(
            controller_pb2.CreateAclsResponse, lambda image: acl_ops.create(image, request), request
        )

    async def delete_acls(
        self, request: controller_pb2.DeleteAclsRequest
    ) -> controller_pb2.DeleteAclsResponse:
        return await self._write(
            controller_pb2.DeleteAclsResponse, lambda image: acl_ops.delete(image, request), request
        )

    async def describe_acls(
        self, request: controller_pb2.DescribeAclsRequest
    ) -> controller_pb2.DescribeAclsResponse:
        return await self._read(
            controller_pb2.DescribeAclsResponse, lambda image: acl_ops.describe(image, request), request
        )

    # client quotas ---------------------------------------------------------------------

    async def alter_client_quotas(
        self, request: controller_pb2.AlterClientQuotasRequest
    ) -> controller_pb2.AlterClientQuotasResponse:
        return await self._write(
            controller_pb2.AlterClientQuotasResponse, lambda image: quota_ops.alter(image, request), request
        )

    async def describe_client_quotas(
        self, request: controller_pb2.DescribeClientQuotasRequest
    ) -> controller_pb2.DescribeClientQuotasResponse:
        return await self._read(
            controller_pb2.DescribeClientQuotasResponse,
            lambda image: quota_ops.describe(image, request),
            request,
        )

    # SCRAM credentials -----------------------------------------------------------------

    async def alter_user_scram_credentials(
        self, request: controller_pb2.AlterUserScramCredentialsRequest
    ) -> controller_pb2.AlterUserScramCredentialsResponse:
        return await self._write(
            controller_pb2.AlterUserScramCredentialsResponse,
            lambda image: scram_ops.alter(image, request, secrets.token_bytes(scram.DECOY_KEY_BYTES)),
            request,
        )

    async def describe_user_scram_credentials(
        self, request: controller_pb2.DescribeUserScramCredentialsRequest
    ) -> controller_pb2.DescribeUserScramCredentialsResponse:
        return await self._read(
            controller_pb2.DescribeUserScramCredentialsResponse,
            lambda image: scram_ops.describe(image, request),
            request,
        )

    # sessions --------------------------------------------------------------------------
    async def tick(self) -> None:
        """Fence brokers whose session has expired; now and then, expire the offsets of
        idle groups and idle transactional ids, and give partitions back to their
        preferred leaders."""
        if not self.is_active:
            return
        expired = self._sessions.expired(self._clock())
        if expired and self._cut_off_from_brokers():
            return
        for broker_id in expired:
            if self._still_expiring(broker_id):
                self._log.info("broker session expired: fencing it", broker_id=broker_id)
            if not await self._fence_expired(broker_id):
                return
        if self._clock() >= self._next_offset_expiry_ms:
            self._next_offset_expiry_ms = self._clock() + OFFSET_EXPIRY_INTERVAL_MS
            await self._write(controller_pb2.OffsetCommitResponse, self._expire_offsets)
            await self._write(controller_pb2.WriteTransactionResponse, self._expire_transactional_ids)
        if self._leader_rebalance_interval_ms and self._clock() >= self._next_leader_rebalance_ms:
            self._next_leader_rebalance_ms = self._clock() + self._leader_rebalance_interval_ms
            await self._write(controller_pb2.ElectLeadersResponse, self._rebalance_leaders)

    def _cut_off_from_brokers(self) -> bool:
        """True: do not fence now, every unfenced broker fell silent together.

        This controller still has its quorum (it could not write otherwise), and silence
        from all brokers at once is more likely a network cut around it than every broker
        dying together (a dead process closes its connections, which is news, not
        silence). Fencing them all would gain nothing either way: no live broker would be
        left to lead. So it waits until the last silent session runs out, then resigns
        (EndQuorumEpoch to the most caught-up voters); the next controller starts every
        session afresh and, if the brokers reach it, keeps them. No flapping: a controller
        active for less than two session timeouts never resigns for this, so when the
        brokers are really gone its successor fences them one session timeout later.
        """
        image = self.latest_image
        if image is None or len(self._node.core.voters) < 2:
            return False
        now = self._clock()
        if now - self._active_since_ms < 2 * self._sessions.timeout_ms:
            return False
        unfenced = [b for b, broker in image.brokers.items() if not broker.fenced]
        if not self._sessions.silent_together(unfenced, now):
            return False
        if all(not self._sessions.is_live(b, now) for b in unfenced):
            self._log.warning(
                "every broker's session ran out together while this controller keeps its quorum: "
                "resigning rather than fencing them all",
                brokers=unfenced,
            )
            self._node.resign()
        return True

    async def _fence_expired(self, broker_id: int) -> bool:
        """Fence a broker whose session has ended, one step per batch (``broker_ops.fence``);
        False if this controller could not write."""
        while self._still_expiring(broker_id):
            step = await self._write(controller_pb2.BrokerHeartbeatResponse, self._expiry_step(broker_id))
            if step.status.error != ErrorCode.NONE:
                return False
        image = self.latest_image
        if image is None:
            return False
        broker = image.brokers.get(broker_id)
        if broker is None or broker.fenced:
            self._sessions.forget(broker_id)
        return True

    def _rebalance_leaders(self, image: MetadataImage) -> Plan:
        """Kafka's auto leader rebalance: every partition whose preferred replica is back
        in its ISR and unfenced is led by it again (at most one batch per check)."""
        plan = broker_ops.elect_leaders(image, controller_pb2.ElectLeadersRequest(), self._may_lead)
        if plan.records:
            self._log.info("rebalancing leaders to preferred replicas", partitions=len(plan.records))
        return Plan(plan.response, plan.records[: self._records_max])

    def _on_peer_connection(self, node_id: int, connected: bool) -> None:
        """A broker fetches the metadata log from this node over a connection that lives as
        long as its process: when the last one closes, it is fenced soon unless it comes
        back (``BrokerSessions``); the next tick does it."""
        if not self.is_active:
            return
        if connected:
            self._sessions.reconnected(node_id, self._clock())
        elif self._sessions.disconnected(node_id, self._clock()):
            self._log.info(
                "broker disconnected: fencing it unless it reconnects",
                broker_id=node_id,
                within_ms=self._sessions.disconnect_fence_ms,
            )

    def _still_expiring(self, broker_id: int) -> bool:
        image = self.latest_image
        broker = None if image is None else image.brokers.get(broker_id)
        return (
            broker is not None and not broker.fenced and not self._sessions.is_live(broker_id, self._clock())
        )

    def _expiry_step(self, broker_id: int) -> Callable[[MetadataImage], Plan]:
        """One step of fencing a broker whose session expired (``broker_ops.fence``),
        unless it heartbeated while earlier steps or fences were committing."""

        def plan(image: MetadataImage) -> Plan:
            response = controller_pb2.BrokerHeartbeatResponse()
            broker = image.brokers.get(broker_id)
            if broker is None or broker.fenced or self._sessions.is_live(broker_id, self._clock()):
                return Plan(response)
            return Plan(response, broker_ops.fence(image, broker, self._records_max, self._may_lead))

        return plan

    def _expire_transactional_ids(self, image: MetadataImage) -> Plan:
        made = txn_ops.expire(
            image, self._wall_clock(), self._transactional_id_expiration_ms, self._records_max
        )
        if made.records:
            self._log.info("transactional ids expired", ids=len(made.records))
        return made

    def _expire_offsets(self, image: MetadataImage) -> Plan:
        made = offset_ops.expire(image, self._wall_clock(), self._offsets_retention_ms, self._records_max)
        if made.records:
            self._log.info("committed offsets expired", groups=len(made.records))
        return made

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
