"""Admin: the controller API for people and programs, with the retrying done once, here.

Every call goes to the active controller. Which node that is, the client learns as it
goes: it starts with the bootstrap addresses and follows the hint a standby puts in its
``NOT_CONTROLLER`` answer (at once, for an address not yet asked during this call).
Retriable conditions (``NOT_CONTROLLER``, ``REQUEST_TIMED_OUT``, and a node that is
unreachable or silent past the deadline) are retried with jittered exponential backoff
(tenacity), bounded both in attempts and in time; anything else raises ``AdminError``
with the server's error name and message at once. Every RPC carries a deadline.

A retried write may have taken effect before its answer was lost (a controller that
died after committing): as with Kafka's AdminClient, the retry then reports what it
finds, e.g. ``TOPIC_ALREADY_EXISTS``.

The controller bounds the lists of one request (``metadata/validation.py``). A read that
names more is split here into requests within the bounds, each answered on its own; a
write never is: each write request commits as one atomic batch, so a write over a bound
raises the controller's ``INVALID_REQUEST`` naming the list, rather than half-applying.

``AsyncAdmin`` is the asyncio client; ``Admin`` is a small synchronous facade that runs
it on a private event loop, for scripts and the CLI.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import grpc
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_exponential_jitter

from raftka.client.errors import AdminError
from raftka.client.types import (
    AclBinding,
    BrokerConfigs,
    BrokerInfo,
    ClientQuotaEntry,
    ClusterDescription,
    ConfigEntry,
    Endpoint,
    FetchedOffset,
    NewTopic,
    OffsetCommit,
    PartitionInfo,
    PartitionReassignment,
    PartitionResult,
    QuotaEntity,
    ScramDeletion,
    ScramUpsertion,
    TopicConfigs,
    TopicDescription,
    TopicListing,
    TopicResult,
    UserResult,
    UserScramCredentials,
    topic_id_str,
)
from raftka.rpc.stubs import ControllerRpc, NotControllerError, Stubs, controller_answer
from raftka.security import scram
from raftka.security.tls import TlsFiles
from raftka.v1 import controller_pb2, controller_pb2_grpc, metadata_pb2

E = controller_pb2.ErrorCode
T = TypeVar("T")

# The controller's bounds on one request (metadata/validation.py; a test keeps them equal).
TOPICS_PER_REQUEST_MAX = 1_000
OFFSET_FETCH_PARTITIONS_MAX = 10_000

RETRIABLE_CODES = frozenset({E.NOT_CONTROLLER, E.REQUEST_TIMED_OUT})
RETRIABLE_STATUS = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})

_MIN_ATTEMPT_TIMEOUT_S = 0.05
ANY_ACL = AclBinding()  # the filter that matches every ACL


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounds on one call: each attempt's deadline, total time and attempts, backoff."""

    request_timeout_s: float = 5.0
    total_timeout_s: float = 30.0
    max_attempts: int = 100
    backoff_initial_s: float = 0.02
    backoff_max_s: float = 1.0


class _Retriable(Exception):
    """One attempt failed in a way another attempt may not."""

    def __init__(self, code: str, message: str, *, redirect: bool = False) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.redirect = redirect  # a hint to an address this call has not asked yet: no wait


@dataclass(slots=True)
class _CallState:
    deadline: float
    asked: set[str] = field(default_factory=set)


class AsyncAdmin:
    def __init__(
        self, bootstrap: Sequence[str], policy: RetryPolicy | None = None, tls: TlsFiles | None = None
    ) -> None:
        """``tls``: mutual TLS to the controllers with these files; None: plaintext."""
        addresses = [a.strip() for a in bootstrap if a.strip()]
        if not addresses:
            raise ValueError("bootstrap: expected at least one HOST:PORT")
        self._bootstrap = addresses
        self._policy = policy or RetryPolicy()
        self._next_bootstrap = 0
        self._controller: str | None = None  # the last known active controller
        self._stubs = Stubs(controller_pb2_grpc.ControllerStub, tls)
        self._backoff = wait_exponential_jitter(
            multiplier=self._policy.backoff_initial_s,
            max=self._policy.backoff_max_s,
            jitter=self._policy.backoff_initial_s,
        )

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._stubs.close()

    # ACLs -----------------------------------------------------------------------------

    async def create_acls(self, acls: Sequence[AclBinding]) -> None:
        """Add ``acls`` (one batch: all or none); an ACL already there stays one ACL."""
        defaults = {"pattern_type": "LITERAL", "permission_type": "ALLOW", "host": "*"}
        request = controller_pb2.CreateAclsRequest()
        for acl in acls:
            fields = {name: getattr(acl, name) or defaults.get(name, "") for name in _ACL_FIELDS}
            request.acls.add(**fields)
        await self._call(lambda stub: stub.CreateAcls, request)

    async def delete_acls(self, filters: Sequence[AclBinding]) -> list[AclBinding]:
        """Remove every ACL some filter matches; the ACLs removed."""
        request = controller_pb2.DeleteAclsRequest(filters=[_acl_pb(f) for f in filters])
        return [_acl(a) for a in (await self._call(lambda stub: stub.DeleteAcls, request)).deleted]

    async def describe_acls(self, acl_filter: AclBinding = ANY_ACL) -> list[AclBinding]:
        request = controller_pb2.DescribeAclsRequest(filter=_acl_pb(acl_filter))
        return [_acl(a) for a in (await self._call(lambda stub: stub.DescribeAcls, request)).acls]

    # SCRAM credentials ------------------------------------------------------------------

    async def alter_user_scram_credentials(
        self, upsertions: Sequence[ScramUpsertion] = (), deletions: Sequence[ScramDeletion] = ()
    ) -> list[UserResult]:
        """Set or remove users' SCRAM credentials; a user with one bad change has none made.
        Each password is salted (a fresh random salt) and hashed here: the controller gets
        the salted password, and keeps only the keys derived from it."""
        request = controller_pb2.AlterUserScramCredentialsRequest(
            deletions=[
                controller_pb2.ScramCredentialDeletion(name=d.user, mechanism=d.mechanism) for d in deletions
            ]
        )
        for u in upsertions:
            salt = secrets.token_bytes(scram.SALT_BYTES)
            salted = (
                scram.salted_password(u.mechanism, u.password, salt, u.iterations)
                if u.mechanism in scram.MECHANISMS
                and scram.ITERATIONS_MIN <= u.iterations <= scram.ITERATIONS_MAX
                else b""  # the controller names the problem
            )
            request.upsertions.add(
                name=u.user, mechanism=u.mechanism, iterations=u.iterations, salt=salt, salted_password=salted
            )
        response = await self._call(lambda stub: stub.AlterUserScramCredentials, request)
        return [UserResult(r.user, _error_name(r.error), r.message) for r in response.results]

    async def describe_user_scram_credentials(self, users: Sequence[str] = ()) -> list[UserScramCredentials]:
        """Every user with a credential when ``users`` is empty."""
        response = await self._call(
            lambda stub: stub.DescribeUserScramCredentials,
            controller_pb2.DescribeUserScramCredentialsRequest(users=list(users)),
        )
        return [
            UserScramCredentials(
                u.user,
                tuple((c.mechanism, c.iterations) for c in u.credentials),
                _error_name(u.error),
                u.message,
            )
            for u in response.users
        ]

    # topics ---------------------------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False
    ) -> list[TopicResult]:
        request = controller_pb2.CreateTopicsRequest(validate_only=validate_only)
        for topic in topics:
            request.topics.add(
                name=topic.name,
                num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
                configs=dict(topic.configs),
            )
        response = await self._call(lambda stub: stub.CreateTopics, request)
        return [_topic_result(r) for r in response.topics]

    async def delete_topics(self, names: Sequence[str]) -> list[TopicResult]:
        response = await self._call(
            lambda stub: stub.DeleteTopics, controller_pb2.DeleteTopicsRequest(names=list(names))
        )
        return [_topic_result(r) for r in response.topics]

    async def create_partitions(
        self, new_totals: Mapping[str, int], *, validate_only: bool = False
    ) -> list[TopicResult]:
        """``new_totals``: topic -> its new total number of partitions (increase only)."""
        request = controller_pb2.CreatePartitionsRequest(validate_only=validate_only)
        for name, count in new_totals.items():
            request.topics.add(name=name, count=count)
        response = await self._call(lambda stub: stub.CreatePartitions, request)
        return [_topic_result(r) for r in response.topics]

    async def list_topics(self) -> list[TopicListing]:
        response = await self._call(lambda stub: stub.ListTopics, controller_pb2.ListTopicsRequest())
        return [TopicListing(t.name, topic_id_str(t.topic_id), t.partitions) for t in response.topics]

    async def describe_topics(self, names: Sequence[str] = ()) -> list[TopicDescription]:
        """Every topic when ``names`` is empty; an unknown name comes back with its error."""
        return [
            description
            for run in _runs(list(names), TOPICS_PER_REQUEST_MAX)
            for description in await self._describe_topics(run)
        ]

    async def _describe_topics(self, names: list[str]) -> list[TopicDescription]:
        response = await self._call(
            lambda stub: stub.DescribeTopics, controller_pb2.DescribeTopicsRequest(names=names)
        )
        return [
            TopicDescription(
                name=t.name,
                topic_id=topic_id_str(t.topic_id),
                partitions=tuple(
                    PartitionInfo(
                        p.partition,
                        p.leader,
                        p.leader_epoch,
                        p.partition_epoch,
                        tuple(p.replicas),
                        tuple(p.isr),
                        tuple(p.elr),
                        tuple(p.adding_replicas),
                        tuple(p.removing_replicas),
                    )
                    for p in sorted(t.partitions, key=lambda p: p.partition)
                ),
                error=_error_name(t.error),
                message=t.message,
            )
            for t in response.topics
        ]

    # configs --------------------------------------------------------------------------

    async def describe_configs(self, topics: Sequence[str]) -> list[TopicConfigs]:
        return [
            configs
            for run in _runs(list(topics), TOPICS_PER_REQUEST_MAX)
            for configs in await self._describe_configs(run)
        ]

    async def _describe_configs(self, topics: list[str]) -> list[TopicConfigs]:
        response = await self._call(
            lambda stub: stub.DescribeConfigs, controller_pb2.DescribeConfigsRequest(topics=topics)
        )
        return [
            TopicConfigs(
                topic=t.topic,
                entries=tuple(ConfigEntry(e.name, e.value, e.is_default) for e in t.entries),
                error=_error_name(t.error),
                message=t.message,
            )
            for t in response.topics
        ]

    async def alter_configs(
        self, changes: Mapping[str, Mapping[str, str | None]], *, validate_only: bool = False
    ) -> list[TopicResult]:
        """``changes``: topic -> {key: new value, or None to return the key to its default}.
        Only the named keys change (Kafka's IncrementalAlterConfigs)."""
        request = controller_pb2.AlterConfigsRequest(validate_only=validate_only)
        for topic, ops in changes.items():
            _add_ops(request.topics.add(topic=topic).ops, ops)
        response = await self._call(lambda stub: stub.AlterConfigs, request)
        return [_topic_result(r) for r in response.topics]

    async def describe_broker_configs(self, brokers: Sequence[str]) -> list[BrokerConfigs]:
        """Each broker's dynamic configs: a broker id, or "" for the cluster-wide default."""
        response = await self._call(
            lambda stub: stub.DescribeConfigs, controller_pb2.DescribeConfigsRequest(brokers=list(brokers))
        )
        return [
            BrokerConfigs(
                b.broker,
                tuple(ConfigEntry(e.name, e.value, e.is_default) for e in b.entries),
                _error_name(b.error),
                b.message,
            )
            for b in response.brokers
        ]

    async def alter_broker_configs(
        self, changes: Mapping[str, Mapping[str, str | None]], *, validate_only: bool = False
    ) -> list[BrokerConfigs]:
        """``changes``: broker id (or "" for the default) -> {key: new value, or None to delete}."""
        request = controller_pb2.AlterConfigsRequest(validate_only=validate_only)
        for broker, ops in changes.items():
            _add_ops(request.brokers.add(broker=broker).ops, ops)
        response = await self._call(lambda stub: stub.AlterConfigs, request)
        return [BrokerConfigs(b.broker, (), _error_name(b.error), b.message) for b in response.brokers]

    # client quotas --------------------------------------------------------------------

    async def alter_client_quotas(
        self, entity: QuotaEntity, changes: Mapping[str, float | None], *, validate_only: bool = False
    ) -> None:
        """Set (a value) or remove (None) quota keys of one entity (Kafka's AlterClientQuotas);
        a refused entity or value raises ``AdminError`` naming the field."""
        request = controller_pb2.AlterClientQuotasRequest(validate_only=validate_only)
        entry = request.entries.add(entity=_quota_entity_pb(entity))
        for key, value in changes.items():
            if value is None:
                entry.ops.add(key=key, remove=True)
            else:
                entry.ops.add(key=key, value=value)
        response = await self._call(lambda stub: stub.AlterClientQuotas, request)
        result = response.entries[0]
        if result.error != E.NONE:
            raise AdminError(E.Name(result.error), result.message)

    async def describe_client_quotas(
        self, components: Sequence[tuple[str, int, str]] = (), *, strict: bool = False
    ) -> list[ClientQuotaEntry]:
        """The entities whose quotas match every (entity type, match type, name) component:
        match type 0 the name, 1 the default entity, 2 any; none: every entity."""
        request = controller_pb2.DescribeClientQuotasRequest(strict=strict)
        for entity_type, match_type, name in components:
            request.components.add(entity_type=entity_type, match_type=match_type, match=name)
        response = await self._call(lambda stub: stub.DescribeClientQuotas, request)
        return [
            ClientQuotaEntry(
                {c.entity_type: c.entity_name if c.HasField("entity_name") else None for c in entry.entity},
                dict(entry.values),
            )
            for entry in response.entries
        ]

    # cluster --------------------------------------------------------------------------

    async def unregister_broker(self, broker_id: int) -> None:
        """Kafka's UnregisterBroker: the broker leaves every ISR and ELR and its registration
        goes; a refusal (no such broker: BROKER_ID_NOT_REGISTERED) raises ``AdminError``."""
        await self._call(
            lambda stub: stub.UnregisterBroker, controller_pb2.UnregisterBrokerRequest(broker_id=broker_id)
        )

    async def describe_cluster(self) -> ClusterDescription:
        response = await self._call(
            lambda stub: stub.DescribeCluster, controller_pb2.DescribeClusterRequest()
        )
        return ClusterDescription(
            cluster_id=response.cluster_id,
            controller_id=response.controller_id,
            brokers=tuple(
                BrokerInfo(
                    broker_id=b.broker_id,
                    endpoints=tuple(Endpoint(e.name, e.host, e.port) for e in b.endpoints),
                    rack=b.rack,
                    fenced=b.fenced,
                    epoch=b.epoch,
                    in_controlled_shutdown=b.in_controlled_shutdown,
                )
                for b in sorted(response.brokers, key=lambda b: b.broker_id)
            ),
        )

    async def elect_leaders(
        self, partitions: Mapping[str, Sequence[int]] | None = None
    ) -> list[PartitionResult]:
        """Preferred leader election; ``partitions`` topic -> ids (empty: all of the topic),
        None: every partition of the cluster."""
        request = controller_pb2.ElectLeadersRequest()
        for topic, ids in (partitions or {}).items():
            request.topics.add(topic=topic, partitions=list(ids))
        response = await self._call(lambda stub: stub.ElectLeaders, request)
        return [
            PartitionResult(r.topic, r.partition, _error_name(r.error), r.message)
            for r in response.partitions
        ]

    # partition reassignment (KIP-455) ---------------------------------------------------

    async def alter_partition_reassignments(
        self, targets: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> list[PartitionResult]:
        """Move each (topic, partition) to its target replicas (the first the preferred
        leader); None cancels the reassignment in progress. One request, one atomic batch."""
        request = controller_pb2.AlterPartitionReassignmentsRequest()
        by_topic: dict[str, controller_pb2.ReassignableTopic] = {}
        for (topic, partition), replicas in targets.items():
            if topic not in by_topic:
                by_topic[topic] = request.topics.add(name=topic)
            asked = by_topic[topic].partitions.add(partition=partition)
            if replicas is not None:
                asked.replicas.SetInParent()
                asked.replicas.ids.extend(replicas)
        response = await self._call(lambda stub: stub.AlterPartitionReassignments, request)
        return [
            PartitionResult(r.topic, r.partition, _error_name(r.error), r.message)
            for r in response.partitions
        ]

    async def list_partition_reassignments(
        self, partitions: Mapping[str, Sequence[int]] | None = None
    ) -> list[PartitionReassignment]:
        """The reassignments in progress; ``partitions`` topic -> ids (empty: the whole
        topic), None: every one in the cluster."""
        request = controller_pb2.ListPartitionReassignmentsRequest()
        for topic, ids in (partitions or {}).items():
            request.topics.add(topic=topic, partitions=list(ids))
        response = await self._call(lambda stub: stub.ListPartitionReassignments, request)
        return [
            PartitionReassignment(
                r.topic, r.partition, tuple(r.replicas), tuple(r.adding_replicas), tuple(r.removing_replicas)
            )
            for r in response.reassignments
        ]

    # offsets --------------------------------------------------------------------------

    async def commit_offsets(self, group: str, offsets: Sequence[OffsetCommit]) -> list[PartitionResult]:
        request = controller_pb2.OffsetCommitRequest(group=group)
        by_topic: dict[str, controller_pb2.OffsetCommitTopic] = {}
        for commit in offsets:
            topic = by_topic.get(commit.topic)
            if topic is None:
                topic = by_topic[commit.topic] = request.topics.add(topic=commit.topic)
            topic.partitions.add(partition=commit.partition, offset=commit.offset, metadata=commit.metadata)
        response = await self._call(lambda stub: stub.OffsetCommit, request)
        return [
            PartitionResult(r.topic, r.partition, _error_name(r.error), r.message)
            for r in response.partitions
        ]

    async def fetch_offsets(
        self, group: str, partitions: Mapping[str, Sequence[int]] | None = None
    ) -> list[FetchedOffset]:
        """``partitions`` topic -> ids (empty: every partition); None: all the group committed."""
        fetched = []
        for request in _offset_fetch_requests(group, partitions or {}):
            response = await self._call(lambda stub: stub.OffsetFetch, request)
            fetched += [
                FetchedOffset(o.topic, o.partition, o.offset, o.metadata, _error_name(o.error), o.message)
                for o in response.offsets
            ]
        return fetched

    # the retry loop -------------------------------------------------------------------

    async def _call(self, rpc: ControllerRpc, request: Any) -> Any:
        policy = self._policy
        state = _CallState(deadline=time.monotonic() + policy.total_timeout_s)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(policy.max_attempts) | _stop_at(state.deadline),
            wait=self._wait,
            retry=retry_if_exception_type(_Retriable),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._attempt(rpc, request, state)
        except _Retriable as e:
            method = type(request).__name__.removesuffix("Request")  # the RPC's name
            raise AdminError(
                e.code,
                f"{e.message} (gave up on {method} after {retrying.statistics['attempt_number']} attempts; "
                f"asked {', '.join(sorted(state.asked))})",
            ) from None
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def _attempt(self, rpc: ControllerRpc, request: Any, state: _CallState) -> Any:
        address = self._controller or self._bootstrap[self._next_bootstrap % len(self._bootstrap)]
        state.asked.add(address)
        timeout_s = max(
            _MIN_ATTEMPT_TIMEOUT_S, min(self._policy.request_timeout_s, state.deadline - time.monotonic())
        )
        try:
            response = controller_answer(address, await rpc(self._stubs[address])(request, timeout=timeout_s))
        except grpc.aio.AioRpcError as e:
            if e.code() in RETRIABLE_STATUS:
                self._forget(address)
                raise _Retriable(e.code().name, f"{address}: {e.details() or e.code().name}") from None
            raise AdminError(e.code().name, f"{address}: {e.details()}") from None
        except NotControllerError as e:
            self._forget(address)
            if e.redirect:
                self._controller = e.redirect
            raise _Retriable(
                "NOT_CONTROLLER", str(e), redirect=e.redirect not in (None, *state.asked)
            ) from None
        status = response.status
        if status.error == E.NONE:
            return response
        if status.error in RETRIABLE_CODES:
            raise _Retriable(E.Name(status.error), status.message)
        raise AdminError(E.Name(status.error), status.message)

    def _forget(self, address: str) -> None:
        """``address`` did not serve the call: next time ask the next bootstrap address."""
        if self._controller == address:
            self._controller = None
        if self._bootstrap[self._next_bootstrap % len(self._bootstrap)] == address:
            self._next_bootstrap += 1

    def _wait(self, retry_state: RetryCallState) -> float:
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None else None
        if isinstance(error, _Retriable) and error.redirect:
            return 0.0
        return self._backoff(retry_state)


class Admin:
    """The synchronous facade: each method runs AsyncAdmin's on a private event loop.

    Not for use inside a running event loop (use AsyncAdmin there). Close it, or use it
    as a context manager, to release its channels.
    """

    def __init__(
        self, bootstrap: Sequence[str], policy: RetryPolicy | None = None, tls: TlsFiles | None = None
    ) -> None:
        self._admin = AsyncAdmin(bootstrap, policy, tls)  # first: a bad bootstrap leaks no loop
        self._loop = asyncio.new_event_loop()

    def __enter__(self) -> Admin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self._admin.close())
            self._loop.close()

    def _run(self, call: Awaitable[T]) -> T:
        return self._loop.run_until_complete(call)

    def create_topics(self, topics: Sequence[NewTopic], *, validate_only: bool = False) -> list[TopicResult]:
        return self._run(self._admin.create_topics(topics, validate_only=validate_only))

    def delete_topics(self, names: Sequence[str]) -> list[TopicResult]:
        return self._run(self._admin.delete_topics(names))

    def create_partitions(
        self, new_totals: Mapping[str, int], *, validate_only: bool = False
    ) -> list[TopicResult]:
        return self._run(self._admin.create_partitions(new_totals, validate_only=validate_only))

    def list_topics(self) -> list[TopicListing]:
        return self._run(self._admin.list_topics())

    def describe_topics(self, names: Sequence[str] = ()) -> list[TopicDescription]:
        return self._run(self._admin.describe_topics(names))

    def describe_configs(self, topics: Sequence[str]) -> list[TopicConfigs]:
        return self._run(self._admin.describe_configs(topics))

    def alter_configs(
        self, changes: Mapping[str, Mapping[str, str | None]], *, validate_only: bool = False
    ) -> list[TopicResult]:
        return self._run(self._admin.alter_configs(changes, validate_only=validate_only))

    def describe_broker_configs(self, brokers: Sequence[str]) -> list[BrokerConfigs]:
        return self._run(self._admin.describe_broker_configs(brokers))

    def alter_broker_configs(
        self, changes: Mapping[str, Mapping[str, str | None]], *, validate_only: bool = False
    ) -> list[BrokerConfigs]:
        return self._run(self._admin.alter_broker_configs(changes, validate_only=validate_only))

    def unregister_broker(self, broker_id: int) -> None:
        self._run(self._admin.unregister_broker(broker_id))

    def describe_cluster(self) -> ClusterDescription:
        return self._run(self._admin.describe_cluster())

    def elect_leaders(self, partitions: Mapping[str, Sequence[int]] | None = None) -> list[PartitionResult]:
        return self._run(self._admin.elect_leaders(partitions))

    def alter_partition_reassignments(
        self, targets: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> list[PartitionResult]:
        return self._run(self._admin.alter_partition_reassignments(targets))

    def list_partition_reassignments(
        self, partitions: Mapping[str, Sequence[int]] | None = None
    ) -> list[PartitionReassignment]:
        return self._run(self._admin.list_partition_reassignments(partitions))

    def create_acls(self, acls: Sequence[AclBinding]) -> None:
        self._run(self._admin.create_acls(acls))

    def alter_user_scram_credentials(
        self, upsertions: Sequence[ScramUpsertion] = (), deletions: Sequence[ScramDeletion] = ()
    ) -> list[UserResult]:
        return self._run(self._admin.alter_user_scram_credentials(upsertions, deletions))

    def describe_user_scram_credentials(self, users: Sequence[str] = ()) -> list[UserScramCredentials]:
        return self._run(self._admin.describe_user_scram_credentials(users))

    def delete_acls(self, filters: Sequence[AclBinding]) -> list[AclBinding]:
        return self._run(self._admin.delete_acls(filters))

    def describe_acls(self, acl_filter: AclBinding = ANY_ACL) -> list[AclBinding]:
        return self._run(self._admin.describe_acls(acl_filter))

    def alter_client_quotas(
        self, entity: QuotaEntity, changes: Mapping[str, float | None], *, validate_only: bool = False
    ) -> None:
        self._run(self._admin.alter_client_quotas(entity, changes, validate_only=validate_only))

    def describe_client_quotas(
        self, components: Sequence[tuple[str, int, str]] = (), *, strict: bool = False
    ) -> list[ClientQuotaEntry]:
        return self._run(self._admin.describe_client_quotas(components, strict=strict))

    def commit_offsets(self, group: str, offsets: Sequence[OffsetCommit]) -> list[PartitionResult]:
        return self._run(self._admin.commit_offsets(group, offsets))

    def fetch_offsets(
        self, group: str, partitions: Mapping[str, Sequence[int]] | None = None
    ) -> list[FetchedOffset]:
        return self._run(self._admin.fetch_offsets(group, partitions))


def _stop_at(deadline: float) -> Any:
    def stop(retry_state: RetryCallState) -> bool:
        return time.monotonic() >= deadline

    return stop


def _runs(items: list[T], size: int) -> list[list[T]]:
    """``items`` in runs of at most ``size``; no items is one empty run (it means "all")."""
    return [items[start : start + size] for start in range(0, len(items), size)] or [items]


def _offset_fetch_requests(
    group: str, partitions: Mapping[str, Sequence[int]]
) -> list[controller_pb2.OffsetFetchRequest]:
    """The fewest requests within the controller's bounds that ask for ``partitions``."""
    requests = [controller_pb2.OffsetFetchRequest(group=group)]
    named = 0  # partitions named in the last request
    for topic, ids in partitions.items():
        for run in _runs(list(ids), OFFSET_FETCH_PARTITIONS_MAX):
            last = requests[-1]
            if len(last.topics) == TOPICS_PER_REQUEST_MAX or named + len(run) > OFFSET_FETCH_PARTITIONS_MAX:
                last = controller_pb2.OffsetFetchRequest(group=group)
                requests.append(last)
                named = 0
            last.topics.add(topic=topic, partitions=run)
            named += len(run)
    return requests


_ACL_FIELDS = tuple(f.name for f in dataclasses.fields(AclBinding))


def _acl_pb(acl: AclBinding) -> controller_pb2.AclBinding:
    return controller_pb2.AclBinding(**{name: getattr(acl, name) for name in _ACL_FIELDS})


def _acl(message: controller_pb2.AclBinding) -> AclBinding:
    return AclBinding(**{name: getattr(message, name) for name in _ACL_FIELDS})


def _quota_entity_pb(entity: QuotaEntity) -> list[metadata_pb2.ClientQuotaEntity]:
    out = []
    for entity_type, name in sorted(entity.items()):
        component = metadata_pb2.ClientQuotaEntity(entity_type=entity_type)
        if name is not None:
            component.entity_name = name
        out.append(component)
    return out


def _error_name(code: int) -> str | None:
    return None if code == E.NONE else E.Name(code)


def _add_ops(added: Any, ops: Mapping[str, str | None]) -> None:
    """Incremental alter ops: a value sets its key, None returns it to its default."""
    for name, value in ops.items():
        if value is None:
            added.add(name=name, op=controller_pb2.ALTER_CONFIG_DELETE)
        else:
            added.add(name=name, value=value, op=controller_pb2.ALTER_CONFIG_SET)


def _topic_result(result: controller_pb2.TopicResult) -> TopicResult:
    return TopicResult(result.name, topic_id_str(result.topic_id), _error_name(result.error), result.message)
