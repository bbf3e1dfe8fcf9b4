"""The broker's data API (proto/raftka/v1/broker.proto), one handler per call, served two
ways: over the data protocol on the data listener (``wire``: what producers, consumers
and follower brokers use, about twenty times cheaper per message than gRPC in Python)
and over gRPC as the ``Broker`` service, for tools.

Metadata is answered from the broker's own image (as a Kafka broker answers from its
metadata cache), naming each broker's data listener; Produce, Fetch and ListOffsets go
to the replica manager; InitProducerId hands out an id from this broker's block
(``raftka.broker.producer_ids``), or, with a transactional id, the transaction coordinator
does (``raftka.broker.transactions``), which answers the other transaction APIs too; the
group APIs, OffsetCommit and TxnOffsetCommit go to the group coordinator
(``raftka.broker.groups``); OffsetFetch is forwarded to the active controller (a linearizable
read of the quorum), so clients need only brokers. WriteTxnMarkers (a transaction
coordinator's commit or abort markers, ``ReplicaManager.write_txn_markers``) is only a
broker's to call: the request names the calling broker and its broker epoch, checked as a
follower's fetch is (``raftka.broker.replica.follower_check``), and with ACLs it needs
CLUSTER_ACTION.

On the data listener and the gRPC ``Broker`` service a consumer's fetches and every
produce count against the client quotas of the caller's user (neither protocol has a
client id: it is ``""``), as on the Kafka listener (``raftka.broker.kafka.throttling``):
over a byte rate, the answer says how long the connection is muted (on gRPC, the answer
itself waits that long), and a throttled fetch carries no records. Followers'
fetches are replication, which client quotas do not bound (Kafka's rule).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import grpc
import structlog

from raftka.broker.authorization import Guards, RequestAuthorizer
from raftka.broker.controller_link import ControllerLink, LinkError
from raftka.broker.groups.coordinator import GroupCoordinator
from raftka.broker.metrics import timed_fetch, timed_produce
from raftka.broker.producer_ids import ProducerIdManager, ProducerIdsUnavailable
from raftka.broker.quota.manager import ClientQuotas, QuotaWindows
from raftka.broker.quota.throttle import client_user, throttle
from raftka.broker.replica.follower_check import ROUTINE_REFUSALS, broker_refusal
from raftka.broker.replica.manager import ReplicaManager
from raftka.broker.transactions.coordinator import TransactionCoordinator
from raftka.metadata import acls
from raftka.metadata.image import NO_LEADER, MetadataImage
from raftka.node.logs import RateLimitedLog
from raftka.rpc.stubs import ControllerRpc
from raftka.security.grpc_gate import Denial
from raftka.security.plain_checks import PlainChecks
from raftka.security.principal import current_principal
from raftka.security.sasl_sessions import SaslSessions
from raftka.v1 import broker_pb2, broker_pb2_grpc, controller_pb2
from raftka.wire import frames
from raftka.wire.frames import DATA_LISTENER
from raftka.wire.server import CloseConnection, Handler

E = controller_pb2.ErrorCode
Pb = broker_pb2
TOPICS_PER_METADATA_MAX = 1_000
TRANSACTIONAL_ID_KEY = 1  # FindCoordinator's key_type of a transactional id (0: a group)
DATA_CLIENT_ID = ""  # the data protocol names no client id
REFUSAL_LOG_INTERVAL_S = 10.0
log = structlog.get_logger("raftka.broker.data_service")


class BrokerApi:
    def __init__(
        self,
        replicas: ReplicaManager,
        groups: GroupCoordinator,
        link: ControllerLink,
        cluster_id: str,
        controller_id: Callable[[], int],
        producer_ids: ProducerIdManager,
        transactions: TransactionCoordinator,
        authorizer: RequestAuthorizer | None = None,
    ) -> None:
        self.replicas = replicas
        self.quotas = ClientQuotas(
            lambda: replicas.image.client_quotas,
            QuotaWindows(replicas.config.quota_window_num, replicas.config.quota_window_size_seconds),
        )
        self.authorizer = authorizer or RequestAuthorizer(None)
        guard = Guards(self.authorizer)  # every front end's ACL checks (raftka.broker.authorization)
        self.cluster_id = cluster_id
        self.plain_checks = PlainChecks()  # the node's PLAIN hashing, shared by its listeners
        self.sasl_sessions = SaslSessions()  # logins ended when their credentials change
        self._link = link
        self._producer_ids = producer_ids
        self.transactions = transactions
        self._controller_id = controller_id
        self.produce = guard.produce(timed_produce(replicas.produce, replicas.metrics))
        self.fetch = guard.by_topic(
            acls.READ, Pb.FetchResponse, timed_fetch(replicas.fetch, replicas.metrics)
        )
        self.list_offsets = guard.by_topic(acls.DESCRIBE, Pb.ListOffsetsResponse, self._list_offsets)
        self.metadata = guard.metadata(self._metadata)
        self.init_producer_id = guard.init_producer_id(self._init_producer_id)
        self.offset_commit = guard.offset_commit(groups.commit)
        self.offset_fetch = guard.offset_fetch(self._offset_fetch)
        self._find_group_coordinator = guard.one_group(
            acls.DESCRIBE, Pb.FindCoordinatorResponse, groups.find_coordinator
        )
        self._find_transaction_coordinator = guard.transactional_id(
            acls.DESCRIBE,
            Pb.FindCoordinatorResponse,
            lambda r: transactions.find_coordinator(r.group_id),
            field="group_id",
        )
        self.add_partitions_to_txn = guard.add_partitions_to_txn(transactions.add_partitions)
        self.add_offsets_to_txn = guard.transactional_id(
            acls.WRITE, Pb.AddOffsetsToTxnResponse, transactions.add_offsets, group_read=True
        )
        self.txn_offset_commit = guard.txn_offset_commit(groups.txn_commit)
        self.end_txn = guard.transactional_id(acls.WRITE, Pb.EndTxnResponse, transactions.end_txn)
        self.describe_transactions = guard.describe_transactions(transactions.describe)
        self.list_transactions = guard.list_transactions(transactions.list_transactions)
        self.join_group = guard.one_group(acls.READ, Pb.JoinGroupResponse, groups.join)
        self.sync_group = guard.one_group(acls.READ, Pb.SyncGroupResponse, groups.sync)
        self.heartbeat = guard.one_group(acls.READ, Pb.HeartbeatResponse, groups.heartbeat)
        self.leave_group = guard.one_group(acls.READ, Pb.LeaveGroupResponse, groups.leave)
        self.describe_groups = guard.describe_groups(groups.describe)
        self.list_groups = guard.list_groups(groups.list_groups)
        self.delete_groups = guard.delete_groups(groups.delete)
        self._marker_refusals = RateLimitedLog(log, REFUSAL_LOG_INTERVAL_S)

    def wire_handlers(self) -> dict[int, Handler]:
        return {
            frames.METADATA.key: self.metadata,
            frames.PRODUCE.key: self._produce_over_the_wire,
            frames.FETCH.key: self.counted_fetch,
            frames.LIST_OFFSETS.key: self.list_offsets,
            frames.OFFSET_COMMIT.key: self.offset_commit,
            frames.OFFSET_FETCH.key: self.offset_fetch,
            frames.INIT_PRODUCER_ID.key: self.init_producer_id,
            frames.FIND_COORDINATOR.key: self.find_coordinator,
            frames.JOIN_GROUP.key: self.join_group,
            frames.SYNC_GROUP.key: self.sync_group,
            frames.HEARTBEAT.key: self.heartbeat,
            frames.LEAVE_GROUP.key: self.leave_group,
            frames.DESCRIBE_GROUPS.key: self.describe_groups,
            frames.LIST_GROUPS.key: self.list_groups,
            frames.DELETE_GROUPS.key: self.delete_groups,
            frames.ADD_PARTITIONS_TO_TXN.key: self.add_partitions_to_txn,
            frames.ADD_OFFSETS_TO_TXN.key: self.add_offsets_to_txn,
            frames.TXN_OFFSET_COMMIT.key: self.txn_offset_commit,
            frames.END_TXN.key: self.end_txn,
            frames.DESCRIBE_TRANSACTIONS.key: self.describe_transactions,
            frames.LIST_TRANSACTIONS.key: self.list_transactions,
            frames.WRITE_TXN_MARKERS.key: self.write_txn_markers,
        }

    async def find_coordinator(self, request: Pb.FindCoordinatorRequest) -> Pb.FindCoordinatorResponse:
        if request.key_type == TRANSACTIONAL_ID_KEY:
            return await self._find_transaction_coordinator(request)
        if request.key_type != 0:
            response = Pb.FindCoordinatorResponse()
            response.status.error = E.INVALID_REQUEST
            response.status.message = (
                f"key_type: {request.key_type} is neither 0 (a group) nor 1 (a transactional id)"
            )
            return response
        return await self._find_group_coordinator(request)

    async def write_txn_markers(self, request: Pb.WriteTxnMarkersRequest) -> Pb.WriteTxnMarkersResponse:
        """A broker's markers, written (see the module docstring); anyone else's refused whole."""
        principal = current_principal.get()
        denial = broker_refusal(
            self.image, request.broker_id, request.broker_epoch, principal, "WriteTxnMarkers", "broker"
        )
        if denial is None and not self.authorizer.allows(
            self.authorizer.caller(), acls.CLUSTER_ACTION, acls.CLUSTER, acls.CLUSTER_NAME
        ):
            denial = Denial(
                E.CLUSTER_AUTHORIZATION_FAILED, "WriteTxnMarkers needs CLUSTER_ACTION on the cluster"
            )
        if denial is None:
            return await self.replicas.write_txn_markers(request)
        self._marker_refusals.log(
            logging.INFO if denial.code in ROUTINE_REFUSALS else logging.WARNING,
            "WriteTxnMarkers refused",
            broker_id=request.broker_id,
            principal=None if principal is None else principal.name,
            error=E.Name(denial.code),
            detail=denial.message,
        )
        response = Pb.WriteTxnMarkersResponse()
        response.status.error, response.status.message = denial.code, denial.message
        return response

    async def _produce_over_the_wire(self, request: Pb.ProduceRequest) -> Pb.ProduceResponse | None:
        return wire_produce_answer(request, await self.counted_produce(request))

    async def counted_produce(self, request: Pb.ProduceRequest) -> Pb.ProduceResponse:
        """A produce counted against its user's produce quota, the throttle time in the answer."""
        response = await self.produce(request)
        sent = sum(len(p.records) for t in request.topics for p in t.partitions)
        response.throttle_time_ms = throttle(self.quotas.produce, client_user(), DATA_CLIENT_ID, sent)
        return response

    async def counted_fetch(self, request: Pb.FetchRequest) -> Pb.FetchResponse:
        """A consumer's fetch counted against its user's fetch quota: at most what the quota
        allows without a throttle, and none of its records once over it (Kafka's rule)."""
        if request.replica_id >= 0:  # replication
            return await self.fetch(request)
        user, quota = client_user(), self.quotas.fetch
        request.max_bytes = int(min(request.max_bytes, quota.most_without_throttle(user, DATA_CLIENT_ID)))
        response = await self.fetch(request)
        sent = sum(len(p.records) for t in response.topics for p in t.partitions)
        response.throttle_time_ms = throttle(quota, user, DATA_CLIENT_ID, sent)
        if response.throttle_time_ms > 0:  # Kafka's throttled fetch: no records, their bytes taken back
            quota.unrecord(user, DATA_CLIENT_ID, sent)
            for topic in response.topics:
                for partition in topic.partitions:
                    partition.records = b""
        return response

    @property
    def image(self) -> MetadataImage:
        return self.replicas.image

    async def _metadata(self, request: Pb.MetadataRequest) -> Pb.MetadataResponse:
        return metadata_response(self.replicas.image, request, self.cluster_id, self._controller_id())

    async def _list_offsets(self, request: Pb.ListOffsetsRequest) -> Pb.ListOffsetsResponse:
        return self.replicas.list_offsets(request)

    async def _init_producer_id(self, request: Pb.InitProducerIdRequest) -> Pb.InitProducerIdResponse:
        """With a transactional id, the transaction coordinator's answer; without, a new
        producer id with epoch 0 (Kafka's answer to an idempotent producer, which bumps its
        epoch itself afterwards)."""
        if request.transactional_id:
            return await self.transactions.init_producer_id(request)
        response = Pb.InitProducerIdResponse(producer_id=-1, producer_epoch=-1)
        problem = _init_producer_id_problem(request)
        if problem:
            response.status.error, response.status.message = E.INVALID_REQUEST, problem
            return response
        try:
            response.producer_id = await self._producer_ids.next_id()
        except ProducerIdsUnavailable as e:
            response.status.error, response.status.message = (
                E.REQUEST_TIMED_OUT,
                f"no producer id to give: {e}",
            )
            return response
        response.producer_epoch = 0
        return response

    async def _offset_fetch(
        self, request: controller_pb2.OffsetFetchRequest
    ) -> controller_pb2.OffsetFetchResponse:
        return await self.forward(lambda stub: stub.OffsetFetch, request, controller_pb2.OffsetFetchResponse)

    async def forward(self, rpc: ControllerRpc, request, response_type):  # noqa: ANN001 - a controller request
        """The active controller's answer to ``request``, or REQUEST_TIMED_OUT if none answers."""
        try:
            return await self._link.call(rpc, request)
        except LinkError as e:
            response = response_type()
            response.status.error = E.REQUEST_TIMED_OUT
            response.status.message = f"no active controller answered: {e}"
            return response


async def hold_answer(throttle_ms: int) -> None:
    """A throttled gRPC answer waits out its throttle time before it is sent."""
    if throttle_ms > 0:
        await asyncio.sleep(throttle_ms / 1000)


class BrokerService(broker_pb2_grpc.BrokerServicer):
    """The same handlers as the gRPC ``Broker`` service. Produce and a consumer's Fetch
    count against the same client quotas as on the data listener; gRPC has no connection
    to mute, so a throttled answer is held for its throttle time instead (as Kafka held
    its answers before KIP-219)."""

    def __init__(self, api: BrokerApi, hold: Callable[[int], Awaitable[None]] = hold_answer) -> None:
        self._api = api
        self._hold = hold

    async def Metadata(
        self, request: Pb.MetadataRequest, context: grpc.aio.ServicerContext
    ) -> Pb.MetadataResponse:
        return await self._api.metadata(request)

    async def Produce(
        self, request: Pb.ProduceRequest, context: grpc.aio.ServicerContext
    ) -> Pb.ProduceResponse:
        response = await self._api.counted_produce(request)
        await self._hold(response.throttle_time_ms)
        return response

    async def Fetch(self, request: Pb.FetchRequest, context: grpc.aio.ServicerContext) -> Pb.FetchResponse:
        response = await self._api.counted_fetch(request)
        await self._hold(response.throttle_time_ms)
        return response

    async def ListOffsets(
        self, request: Pb.ListOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> Pb.ListOffsetsResponse:
        return await self._api.list_offsets(request)

    async def InitProducerId(
        self, request: Pb.InitProducerIdRequest, context: grpc.aio.ServicerContext
    ) -> Pb.InitProducerIdResponse:
        return await self._api.init_producer_id(request)

    async def OffsetCommit(
        self, request: controller_pb2.OffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.OffsetCommitResponse:
        return await self._api.offset_commit(request)

    async def OffsetFetch(
        self, request: controller_pb2.OffsetFetchRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.OffsetFetchResponse:
        return await self._api.offset_fetch(request)

    async def FindCoordinator(
        self, request: Pb.FindCoordinatorRequest, context: grpc.aio.ServicerContext
    ) -> Pb.FindCoordinatorResponse:
        return await self._api.find_coordinator(request)

    async def JoinGroup(
        self, request: Pb.JoinGroupRequest, context: grpc.aio.ServicerContext
    ) -> Pb.JoinGroupResponse:
        return await self._api.join_group(request)

    async def SyncGroup(
        self, request: Pb.SyncGroupRequest, context: grpc.aio.ServicerContext
    ) -> Pb.SyncGroupResponse:
        return await self._api.sync_group(request)

    async def Heartbeat(
        self, request: Pb.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> Pb.HeartbeatResponse:
        return await self._api.heartbeat(request)

    async def LeaveGroup(
        self, request: Pb.LeaveGroupRequest, context: grpc.aio.ServicerContext
    ) -> Pb.LeaveGroupResponse:
        return await self._api.leave_group(request)

    async def DescribeGroups(
        self, request: Pb.DescribeGroupsRequest, context: grpc.aio.ServicerContext
    ) -> Pb.DescribeGroupsResponse:
        return await self._api.describe_groups(request)

    async def ListGroups(
        self, request: Pb.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> Pb.ListGroupsResponse:
        return await self._api.list_groups(request)

    async def WriteTxnMarkers(
        self, request: Pb.WriteTxnMarkersRequest, context: grpc.aio.ServicerContext
    ) -> Pb.WriteTxnMarkersResponse:
        return await self._api.write_txn_markers(request)

    async def DeleteGroups(
        self, request: controller_pb2.DeleteGroupsRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.DeleteGroupsResponse:
        return await self._api.delete_groups(request)

    async def AddPartitionsToTxn(
        self, request: Pb.AddPartitionsToTxnRequest, context: grpc.aio.ServicerContext
    ) -> Pb.AddPartitionsToTxnResponse:
        return await self._api.add_partitions_to_txn(request)

    async def AddOffsetsToTxn(
        self, request: Pb.AddOffsetsToTxnRequest, context: grpc.aio.ServicerContext
    ) -> Pb.AddOffsetsToTxnResponse:
        return await self._api.add_offsets_to_txn(request)

    async def TxnOffsetCommit(
        self, request: controller_pb2.TxnOffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.OffsetCommitResponse:
        return await self._api.txn_offset_commit(request)

    async def EndTxn(self, request: Pb.EndTxnRequest, context: grpc.aio.ServicerContext) -> Pb.EndTxnResponse:
        return await self._api.end_txn(request)

    async def DescribeTransactions(
        self, request: Pb.DescribeTransactionsRequest, context: grpc.aio.ServicerContext
    ) -> Pb.DescribeTransactionsResponse:
        return await self._api.describe_transactions(request)

    async def ListTransactions(
        self, request: Pb.ListTransactionsRequest, context: grpc.aio.ServicerContext
    ) -> Pb.ListTransactionsResponse:
        return await self._api.list_transactions(request)


def _init_producer_id_problem(request: Pb.InitProducerIdRequest) -> str:
    if (request.producer_id == -1) != (request.producer_epoch == -1):
        return (
            f"producer_id {request.producer_id} and producer_epoch {request.producer_epoch}: "
            "both -1, or both a producer's current id and epoch"
        )
    if request.producer_id < -1 or request.producer_epoch < -1:
        return f"producer_id {request.producer_id}, producer_epoch {request.producer_epoch}: -1 or 0 and more"
    return ""


def wire_produce_answer(
    request: Pb.ProduceRequest, response: Pb.ProduceResponse
) -> Pb.ProduceResponse | None:
    """As Kafka answers a produce: not at all with acks=0, and then a refusal closes the
    connection, so the producer notices and looks the leaders up again."""
    if request.acks != 0:
        return response
    refused = [p for t in response.topics for p in t.partitions if p.error != E.NONE]
    if response.status.error != E.NONE or refused:
        why = response.status.message or f"{len(refused)} partitions refused, the first: {refused[0].message}"
        raise CloseConnection(f"acks=0 produce refused: {why}")
    return None


def metadata_response(
    image: MetadataImage, request: Pb.MetadataRequest, cluster_id: str, controller_id: int
) -> Pb.MetadataResponse:
    response = Pb.MetadataResponse(
        cluster_id=cluster_id, controller_id=controller_id, metadata_offset=image.offset - 1
    )
    if len(request.topics) > TOPICS_PER_METADATA_MAX:
        response.status.error = E.INVALID_REQUEST
        response.status.message = f"topics: {len(request.topics)} names, at most {TOPICS_PER_METADATA_MAX}"
        return response
    for broker in sorted(image.brokers.values(), key=lambda b: b.broker_id):
        endpoint = broker.endpoint(DATA_LISTENER)
        response.brokers.add(
            broker_id=broker.broker_id,
            host=endpoint.host if endpoint else "",
            port=endpoint.port if endpoint else 0,
            rack=broker.rack,
            fenced=broker.fenced,
        )
    names = list(request.topics) or sorted(image.topic_ids_by_name)
    for name in names:
        topic = image.topic(name)
        answer = response.topics.add(name=name)
        if topic is None:
            answer.error = E.UNKNOWN_TOPIC_OR_PARTITION
            answer.message = f"no topic {name!r}"
            continue
        answer.topic_id = topic.topic_id
        for partition_id in sorted(topic.partitions):
            state = topic.partitions[partition_id]
            leader = image.brokers.get(state.leader)
            answer.partitions.add(
                partition=partition_id,
                leader=state.leader,
                leader_epoch=state.leader_epoch,
                replicas=state.replicas,
                isr=state.isr,
                offline=state.leader == NO_LEADER or leader is None or leader.fenced,
            )
    return response
