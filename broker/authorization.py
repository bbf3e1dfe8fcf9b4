"""What a broker's clients may do: Kafka's ACL checks of each request (the ``authorize``
calls of Kafka's ``KafkaApis``), decided by ``raftka.metadata.acls.Authorizer`` on the
broker's own metadata image.

Every front end answers through ``BrokerApi`` (the data listener, the gRPC ``Broker``
service and the Kafka listener), so each check is made once, here, before any work:

| request | needs |
|---|---|
| Metadata | DESCRIBE on each topic named; a listing of every topic lists only those |
| Produce | WRITE on each topic; with transactional batches, WRITE on its transactional id (else the whole request is refused) |
| Fetch (a consumer's) | READ on each topic (a follower's: ``replica.follower_check``) |
| ListOffsets | DESCRIBE on each topic |
| InitProducerId | IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679); with a transactional id, WRITE on it |
| FindCoordinator, DescribeGroups | DESCRIBE on the group (FindCoordinator of a transactional id: DESCRIBE on it) |
| AddPartitionsToTxn | WRITE on the transactional id and on each topic; verify_only: a broker (CLUSTER_ACTION) |
| AddOffsetsToTxn | WRITE on the transactional id, READ on the group |
| TxnOffsetCommit | WRITE on the transactional id, then as OffsetCommit |
| EndTxn | WRITE on the transactional id |
| DescribeTransactions | DESCRIBE on each transactional id; its topics only those it may DESCRIBE |
| ListTransactions | lists only the transactional ids it may DESCRIBE |
| JoinGroup, SyncGroup, Heartbeat, LeaveGroup | READ on the group |
| ListGroups | DESCRIBE on the cluster, or it lists only the groups it may DESCRIBE |
| DeleteGroups | DELETE on each group |
| OffsetCommit | READ on the group and on each topic |
| OffsetFetch | DESCRIBE on the group and on each topic named; a listing lists only those |

A refused topic, group or transactional id is answered TOPIC_AUTHORIZATION_FAILED,
GROUP_AUTHORIZATION_FAILED or TRANSACTIONAL_ID_AUTHORIZATION_FAILED for it alone (whether or not it exists, so a refusal never
tells what exists), the cluster CLUSTER_AUTHORIZATION_FAILED; the rest of the request is
served as if the refused part had not been asked, so nothing of it is written.

At the gRPC gate (``raftka.security.grpc_gate``), every method of the ``Broker`` service
is listed in ``BROKER_SERVICE_RULES`` as judged here (WriteTxnMarkers: by
``BrokerApi.write_txn_markers``); a method added to broker.proto and not listed is refused.

On when the node has TLS: each connection then has a principal (its certificate's), and
the address it came from (``current_host``). A connection without one while the
authorizer is on would be ``User:ANONYMOUS``, as on Kafka's PLAINTEXT listeners. A
broker's own certificate holds CLUSTER_ACTION, as Kafka's inter-broker principal does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from raftka.metadata import acls
from raftka.metadata.acls import Authorizer
from raftka.node.logs import RateLimitedLog
from raftka.records.batch import transactional_header
from raftka.security.grpc_gate import Rule, anyone, by_name
from raftka.security.principal import BROKER, current_host, current_principal
from raftka.v1 import broker_pb2, controller_pb2

E = controller_pb2.ErrorCode
Pb = broker_pb2
C = controller_pb2
ANONYMOUS = "User:ANONYMOUS"
REFUSAL_LOG_INTERVAL_S = 10.0
CODES = {
    acls.TOPIC: E.TOPIC_AUTHORIZATION_FAILED,
    acls.GROUP: E.GROUP_AUTHORIZATION_FAILED,
    acls.CLUSTER: E.CLUSTER_AUTHORIZATION_FAILED,
    acls.TRANSACTIONAL_ID: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
log = structlog.get_logger("raftka.broker.authorization")
# The gate lets these through to BrokerApi, whose guards (the table above) judge each one.
BROKER_SERVICE_RULES: dict[str, Rule] = by_name(
    broker_pb2.DESCRIPTOR.services_by_name["Broker"],
    {
        name: anyone
        for name in (
            "Metadata",
            "Produce",
            "Fetch",
            "ListOffsets",
            "InitProducerId",
            "OffsetCommit",
            "OffsetFetch",
            "FindCoordinator",
            "JoinGroup",
            "SyncGroup",
            "Heartbeat",
            "LeaveGroup",
            "DescribeGroups",
            "ListGroups",
            "DeleteGroups",
            "WriteTxnMarkers",
            "AddPartitionsToTxn",
            "AddOffsetsToTxn",
            "TxnOffsetCommit",
            "EndTxn",
            "DescribeTransactions",
            "ListTransactions",
        )
    },
)
R = TypeVar("R")
Handler = Callable[[Any], Awaitable[R]]


@dataclass(frozen=True, slots=True)
class Caller:
    principal: str
    host: str  # the IP address the request came from
    broker: bool  # a broker's own certificate


class RequestAuthorizer:
    """The ACL decisions for the request being handled (its principal and host)."""

    def __init__(self, authorizer: Authorizer | None) -> None:
        self._authorizer = authorizer  # None: off
        self._refusals = RateLimitedLog(log, REFUSAL_LOG_INTERVAL_S)

    @property
    def enabled(self) -> bool:
        return self._authorizer is not None

    def caller(self) -> Caller | None:
        """Who asks; None: authorization is off."""
        if self._authorizer is None:
            return None
        principal = current_principal.get()
        if principal is None:
            return Caller(ANONYMOUS, current_host.get(), broker=False)
        return Caller(principal.name, current_host.get(), broker=principal.role == BROKER)

    def allows(self, caller: Caller | None, operation: str, resource_type: str, name: str) -> bool:
        if caller is None or self._authorizer is None:
            return True
        if caller.broker and operation == acls.CLUSTER_ACTION:
            return True
        allowed = self._authorizer.allowed(caller.principal, operation, resource_type, name, caller.host)
        if not allowed:
            self._refusals.log(
                logging.INFO,
                "request refused",
                principal=caller.principal,
                host=caller.host,
                operation=operation,
                resource=f"{resource_type}:{name}",
            )
        return allowed

    def allows_on_any(self, caller: Caller | None, operation: str, resource_type: str) -> bool:
        if caller is None or self._authorizer is None:
            return True
        return self._authorizer.allowed_on_any(caller.principal, operation, resource_type, caller.host)

    def allowed_names(
        self, caller: Caller | None, operation: str, resource_type: str, names: Iterable[str]
    ) -> set[str]:
        return {n for n in set(names) if self.allows(caller, operation, resource_type, n)}


def refusal(caller: Caller, operation: str, resource_type: str, name: str) -> tuple[int, str]:
    """The error and message of a refusal, naming who was refused what."""
    what = (
        "the cluster"
        if resource_type == acls.CLUSTER
        else f"{resource_type.lower().replace('_', ' ')} {name!r}"
    )
    return CODES[resource_type], f"{caller.principal} may not {operation} {what}"


class Guards:
    """Wraps ``BrokerApi``'s handlers with their checks (the table above)."""

    def __init__(self, authorizer: RequestAuthorizer) -> None:
        self.auth = authorizer

    # topics -----------------------------------------------------------------------------

    def metadata(self, handler: Handler[Pb.MetadataResponse]) -> Handler[Pb.MetadataResponse]:
        async def guarded(request: Pb.MetadataRequest) -> Pb.MetadataResponse:
            response = await handler(request)
            caller = self.auth.caller()
            if caller is None or response.status.error != E.NONE:
                return response
            topics = list(response.topics)
            allowed = self.auth.allowed_names(caller, acls.DESCRIBE, acls.TOPIC, (t.name for t in topics))
            del response.topics[:]
            for topic in topics:
                if topic.name in allowed:
                    response.topics.append(topic)
                elif request.topics:  # named: refused; a listing leaves it out
                    error, message = refusal(caller, acls.DESCRIBE, acls.TOPIC, topic.name)
                    response.topics.add(name=topic.name, error=error, message=message)
            return response

        return guarded

    def by_topic(self, operation: str, response_type: type[R], handler: Handler[R]) -> Handler[R]:
        """Produce, Fetch and ListOffsets: ``operation`` on each topic; the refused ones are
        taken out of the request and answered with a refusal for each partition asked."""

        async def guarded(request: Any) -> R:
            caller = self.auth.caller()
            if caller is None or getattr(request, "replica_id", -1) >= 0:  # a follower: follower_check
                return await handler(request)
            allowed = self.auth.allowed_names(caller, operation, acls.TOPIC, (t.name for t in request.topics))
            if all(t.name in allowed for t in request.topics):
                return await handler(request)
            asked = type(request)()
            asked.CopyFrom(request)
            del asked.topics[:]
            asked.topics.extend(t for t in request.topics if t.name in allowed)
            answer = await handler(asked) if asked.topics else response_type()
            if answer is None or answer.status.error != E.NONE:
                return answer
            answered = iter(list(answer.topics))
            del answer.topics[:]
            for topic in request.topics:
                if topic.name in allowed:
                    answer.topics.append(next(answered))
                    continue
                error, message = refusal(caller, operation, acls.TOPIC, topic.name)
                refused = answer.topics.add(name=topic.name)
                if hasattr(refused, "topic_id"):
                    refused.topic_id = topic.topic_id
                for p in topic.partitions:
                    refused.partitions.add(partition=p.partition, error=error, message=message)
            return answer

        return guarded

    def produce(self, handler: Handler[Pb.ProduceResponse]) -> Handler[Pb.ProduceResponse]:
        """Kafka's handleProduceRequest: a request carrying transactional batches needs a
        transactional id and WRITE on it, or every partition is refused; then WRITE on each
        topic (``by_topic``). (The replica manager binds each batch to its transaction.)"""
        by_topic = self.by_topic(acls.WRITE, Pb.ProduceResponse, handler)

        async def guarded(request: Pb.ProduceRequest) -> Pb.ProduceResponse:
            caller = self.auth.caller()
            tid = request.transactional_id
            if (
                caller is None
                or not _has_transactional_batches(request)
                or (tid and self.auth.allows(caller, acls.WRITE, acls.TRANSACTIONAL_ID, tid))
            ):
                return await by_topic(request)
            error, message = (
                refusal(caller, acls.WRITE, acls.TRANSACTIONAL_ID, tid)
                if tid
                else (
                    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "transactional batches need a transactional_id",
                )
            )
            response = Pb.ProduceResponse()
            response.status.error, response.status.message = error, message
            for topic in request.topics:
                refused = response.topics.add(name=topic.name)
                for p in topic.partitions:
                    refused.partitions.add(
                        partition=p.partition,
                        error=error,
                        message=message,
                        base_offset=-1,
                        log_append_time_ms=-1,
                    )
            return response

        return guarded

    def init_producer_id(
        self, handler: Handler[Pb.InitProducerIdResponse]
    ) -> Handler[Pb.InitProducerIdResponse]:
        async def guarded(request: Pb.InitProducerIdRequest) -> Pb.InitProducerIdResponse:
            caller = self.auth.caller()
            response = Pb.InitProducerIdResponse(producer_id=-1, producer_epoch=-1)
            tid = request.transactional_id
            if tid:
                if self.auth.allows(caller, acls.WRITE, acls.TRANSACTIONAL_ID, tid):
                    return await handler(request)
                assert caller is not None
                response.status.error, response.status.message = refusal(
                    caller, acls.WRITE, acls.TRANSACTIONAL_ID, tid
                )
                return response
            if self.auth.allows(
                caller, acls.IDEMPOTENT_WRITE, acls.CLUSTER, acls.CLUSTER_NAME
            ) or self.auth.allows_on_any(caller, acls.WRITE, acls.TOPIC):
                return await handler(request)
            assert caller is not None
            response.status.error = E.CLUSTER_AUTHORIZATION_FAILED
            response.status.message = (
                f"{caller.principal} may not IDEMPOTENT_WRITE the cluster nor WRITE any topic"
            )
            return response

        return guarded

    # transactions -----------------------------------------------------------------------

    def transactional_id(
        self,
        operation: str,
        response_type: type[R],
        handler: Handler[R],
        field: str = "transactional_id",
        group_read: bool = False,
    ) -> Handler[R]:
        """A request about one transactional id (AddOffsetsToTxn, EndTxn, FindCoordinator of
        an id): ``operation`` on it, and READ on its ``group_id`` if ``group_read``."""

        async def guarded(request: Any) -> R:
            caller = self.auth.caller()
            tid = getattr(request, field)
            refused = None
            if not self.auth.allows(caller, operation, acls.TRANSACTIONAL_ID, tid):
                refused = refusal(caller, operation, acls.TRANSACTIONAL_ID, tid)  # type: ignore[arg-type]
            elif group_read and not self.auth.allows(caller, acls.READ, acls.GROUP, request.group_id):
                refused = refusal(caller, acls.READ, acls.GROUP, request.group_id)  # type: ignore[arg-type]
            if refused is None:
                return await handler(request)
            response = response_type()
            response.status.error, response.status.message = refused
            return response

        return guarded

    def add_partitions_to_txn(
        self, handler: Handler[Pb.AddPartitionsToTxnResponse]
    ) -> Handler[Pb.AddPartitionsToTxnResponse]:
        """As Kafka: every partition refused if the id is; else the refused topics'
        partitions refused and the others not attempted."""

        async def guarded(request: Pb.AddPartitionsToTxnRequest) -> Pb.AddPartitionsToTxnResponse:
            caller = self.auth.caller()
            if caller is None:
                return await handler(request)
            if request.verify_only:
                refused = None if caller.broker else refusal(caller, acls.CLUSTER_ACTION, acls.CLUSTER, "")
            elif not self.auth.allows(caller, acls.WRITE, acls.TRANSACTIONAL_ID, request.transactional_id):
                refused = refusal(caller, acls.WRITE, acls.TRANSACTIONAL_ID, request.transactional_id)
            else:
                allowed = self.auth.allowed_names(
                    caller, acls.WRITE, acls.TOPIC, (t.name for t in request.topics)
                )
                if all(t.name in allowed for t in request.topics):
                    return await handler(request)
                response = Pb.AddPartitionsToTxnResponse()
                for topic in request.topics:
                    error, message = (
                        (E.OPERATION_NOT_ATTEMPTED, "another topic of the request was refused")
                        if topic.name in allowed
                        else refusal(caller, acls.WRITE, acls.TOPIC, topic.name)
                    )
                    result = response.topics.add(name=topic.name)
                    for p in topic.partitions:
                        result.partitions.add(partition=p, error=error, message=message)
                return response
            if refused is None:
                return await handler(request)
            response = Pb.AddPartitionsToTxnResponse()
            response.status.error, response.status.message = refused
            for topic in request.topics:
                result = response.topics.add(name=topic.name)
                for p in topic.partitions:
                    result.partitions.add(partition=p, error=refused[0], message=refused[1])
            return response

        return guarded

    def txn_offset_commit(self, handler: Handler[C.OffsetCommitResponse]) -> Handler[C.OffsetCommitResponse]:
        """WRITE on the transactional id, then the checks of an OffsetCommit of its offsets."""

        async def guarded(request: C.TxnOffsetCommitRequest) -> C.OffsetCommitResponse:
            caller = self.auth.caller()
            if caller is None:
                return await handler(request)
            if not self.auth.allows(caller, acls.WRITE, acls.TRANSACTIONAL_ID, request.transactional_id):
                response = C.OffsetCommitResponse()
                response.status.error, response.status.message = refusal(
                    caller, acls.WRITE, acls.TRANSACTIONAL_ID, request.transactional_id
                )
                return response
            return await self.offset_commit(lambda offsets: handler(_with_offsets(request, offsets)))(
                request.offsets
            )

        return guarded

    def describe_transactions(
        self, handler: Handler[Pb.DescribeTransactionsResponse]
    ) -> Handler[Pb.DescribeTransactionsResponse]:
        async def guarded(request: Pb.DescribeTransactionsRequest) -> Pb.DescribeTransactionsResponse:
            caller = self.auth.caller()
            ids = request.transactional_ids
            allowed = self.auth.allowed_names(caller, acls.DESCRIBE, acls.TRANSACTIONAL_ID, ids)
            answer = await handler(
                Pb.DescribeTransactionsRequest(transactional_ids=[t for t in ids if t in allowed])
            )
            if caller is None:
                return answer
            self._describable_topics_only(caller, answer.transactions)
            if allowed >= set(ids):
                return answer
            described = {d.transactional_id: d for d in answer.transactions}
            response = Pb.DescribeTransactionsResponse()
            for tid in ids:
                if tid in described:
                    response.transactions.append(described[tid])
                else:
                    error, message = refusal(caller, acls.DESCRIBE, acls.TRANSACTIONAL_ID, tid)
                    response.transactions.add(transactional_id=tid, error=error, message=message)
            return response

        return guarded

    def _describable_topics_only(
        self, caller: Caller, described: Iterable[Pb.TransactionDescription]
    ) -> None:
        """Kafka's DescribeTransactions: a transaction's topics the caller may not DESCRIBE
        are left out of its description (the transaction itself is described)."""
        for transaction in described:
            topics = list(transaction.topics)
            describable = self.auth.allowed_names(caller, acls.DESCRIBE, acls.TOPIC, (t.name for t in topics))
            if len(describable) < len({t.name for t in topics}):
                del transaction.topics[:]
                transaction.topics.extend(t for t in topics if t.name in describable)

    def list_transactions(
        self, handler: Handler[Pb.ListTransactionsResponse]
    ) -> Handler[Pb.ListTransactionsResponse]:
        async def guarded(request: Pb.ListTransactionsRequest) -> Pb.ListTransactionsResponse:
            response = await handler(request)
            caller = self.auth.caller()
            listed = list(response.transactions)
            del response.transactions[:]
            response.transactions.extend(
                t
                for t in listed
                if self.auth.allows(caller, acls.DESCRIBE, acls.TRANSACTIONAL_ID, t.transactional_id)
            )
            return response

        return guarded

    # groups -----------------------------------------------------------------------------

    def one_group(
        self, operation: str, response_type: type[R], handler: Handler[R], field: str = "group_id"
    ) -> Handler[R]:
        """A request about one group: ``operation`` on it, or the whole request is refused."""

        async def guarded(request: Any) -> R:
            caller = self.auth.caller()
            group = getattr(request, field)
            if self.auth.allows(caller, operation, acls.GROUP, group):
                return await handler(request)
            assert caller is not None
            response = response_type()
            response.status.error, response.status.message = refusal(caller, operation, acls.GROUP, group)
            return response

        return guarded

    def describe_groups(
        self, handler: Handler[Pb.DescribeGroupsResponse]
    ) -> Handler[Pb.DescribeGroupsResponse]:
        async def guarded(request: Pb.DescribeGroupsRequest) -> Pb.DescribeGroupsResponse:
            caller = self.auth.caller()
            allowed = self.auth.allowed_names(caller, acls.DESCRIBE, acls.GROUP, request.groups)
            if caller is None or allowed >= set(request.groups):
                return await handler(request)
            asked = [g for g in request.groups if g in allowed]
            answer = await handler(Pb.DescribeGroupsRequest(groups=asked)) if asked else None
            if answer is not None and answer.status.error != E.NONE:
                return answer
            described = {g.group_id: g for g in answer.groups} if answer is not None else {}
            response = Pb.DescribeGroupsResponse()
            for group in request.groups:
                if group in described:
                    response.groups.append(described[group])
                else:
                    error, message = refusal(caller, acls.DESCRIBE, acls.GROUP, group)
                    response.groups.add(group_id=group, error=error, message=message)
            return response

        return guarded

    def list_groups(self, handler: Handler[Pb.ListGroupsResponse]) -> Handler[Pb.ListGroupsResponse]:
        async def guarded(request: Pb.ListGroupsRequest) -> Pb.ListGroupsResponse:
            response = await handler(request)
            caller = self.auth.caller()
            if self.auth.allows(caller, acls.DESCRIBE, acls.CLUSTER, acls.CLUSTER_NAME):
                return response
            listed = list(response.groups)
            del response.groups[:]
            response.groups.extend(
                g for g in listed if self.auth.allows(caller, acls.DESCRIBE, acls.GROUP, g.group_id)
            )
            return response

        return guarded

    def delete_groups(self, handler: Handler[C.DeleteGroupsResponse]) -> Handler[C.DeleteGroupsResponse]:
        async def guarded(request: C.DeleteGroupsRequest) -> C.DeleteGroupsResponse:
            caller = self.auth.caller()
            allowed = self.auth.allowed_names(caller, acls.DELETE, acls.GROUP, request.groups)
            if caller is None or allowed >= set(request.groups):
                return await handler(request)
            asked = [g for g in request.groups if g in allowed]
            answer = await handler(C.DeleteGroupsRequest(groups=asked)) if asked else C.DeleteGroupsResponse()
            if answer.status.error != E.NONE:
                return answer
            for group in dict.fromkeys(request.groups):
                if group not in allowed:
                    error, message = refusal(caller, acls.DELETE, acls.GROUP, group)
                    answer.groups.add(group=group, error=error, message=message)
            return answer

        return guarded

    # offsets ----------------------------------------------------------------------------

    def offset_commit(self, handler: Handler[C.OffsetCommitResponse]) -> Handler[C.OffsetCommitResponse]:
        async def guarded(request: C.OffsetCommitRequest) -> C.OffsetCommitResponse:
            caller = self.auth.caller()
            if caller is None:
                return await handler(request)
            if not self.auth.allows(caller, acls.READ, acls.GROUP, request.group):
                response = C.OffsetCommitResponse()
                response.status.error, response.status.message = refusal(
                    caller, acls.READ, acls.GROUP, request.group
                )
                return response
            allowed = self.auth.allowed_names(
                caller, acls.READ, acls.TOPIC, (t.topic for t in request.topics)
            )
            if all(t.topic in allowed for t in request.topics):
                return await handler(request)
            asked = C.OffsetCommitRequest()
            asked.CopyFrom(request)
            del asked.topics[:]
            asked.topics.extend(t for t in request.topics if t.topic in allowed)
            answer = await handler(asked) if asked.topics else C.OffsetCommitResponse()
            if answer.status.error != E.NONE:
                return answer
            for topic in request.topics:
                if topic.topic not in allowed:
                    error, message = refusal(caller, acls.READ, acls.TOPIC, topic.topic)
                    answer.partitions.extend(
                        C.PartitionResult(
                            topic=topic.topic, partition=p.partition, error=error, message=message
                        )
                        for p in topic.partitions
                    )
            return answer

        return guarded

    def offset_fetch(self, handler: Handler[C.OffsetFetchResponse]) -> Handler[C.OffsetFetchResponse]:
        async def guarded(request: C.OffsetFetchRequest) -> C.OffsetFetchResponse:
            caller = self.auth.caller()
            if caller is None:
                return await handler(request)
            if not self.auth.allows(caller, acls.DESCRIBE, acls.GROUP, request.group):
                response = C.OffsetFetchResponse()
                response.status.error, response.status.message = refusal(
                    caller, acls.DESCRIBE, acls.GROUP, request.group
                )
                return response
            named = {t.topic for t in request.topics}
            allowed = self.auth.allowed_names(caller, acls.DESCRIBE, acls.TOPIC, named)
            asked = C.OffsetFetchRequest(group=request.group, require_stable=request.require_stable)
            asked.topics.extend(t for t in request.topics if t.topic in allowed)
            answer = await handler(asked) if asked.topics or not named else C.OffsetFetchResponse()
            if answer.status.error != E.NONE:
                return answer
            if not named:  # everything the group committed: only the topics it may describe
                allowed = self.auth.allowed_names(
                    caller, acls.DESCRIBE, acls.TOPIC, (o.topic for o in answer.offsets)
                )
            offsets = [o for o in answer.offsets if o.topic in allowed]
            del answer.offsets[:]
            answer.offsets.extend(offsets)
            for topic in request.topics:
                if topic.topic not in allowed:
                    error, message = refusal(caller, acls.DESCRIBE, acls.TOPIC, topic.topic)
                    answer.offsets.extend(
                        C.FetchedOffset(
                            topic=topic.topic, partition=p, offset=-1, error=error, message=message
                        )
                        for p in topic.partitions
                    )
            return answer

        return guarded


def _has_transactional_batches(request: Pb.ProduceRequest) -> bool:
    """Kafka's ``hasTransactionalRecords``: some partition's first batch is transactional."""
    return any(transactional_header(p.records) is not None for t in request.topics for p in t.partitions)


def _with_offsets(
    request: C.TxnOffsetCommitRequest, offsets: C.OffsetCommitRequest
) -> C.TxnOffsetCommitRequest:
    """``request`` with only the offsets the caller may commit."""
    allowed = C.TxnOffsetCommitRequest()
    allowed.CopyFrom(request)
    allowed.offsets.CopyFrom(offsets)
    return allowed
