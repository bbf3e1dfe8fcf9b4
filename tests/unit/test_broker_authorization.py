"""The broker's checks (``raftka.broker.authorization``) around handlers that record what
reaches them: a refused topic or group never reaches the handler (so nothing of it is
written), is answered with Kafka's error in its place, and the rest is served as asked.
With the authorizer off (no TLS) everything passes; a broker's certificate holds
CLUSTER_ACTION."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from raftka.broker.authorization import Guards, RequestAuthorizer
from raftka.metadata import acls
from raftka.metadata.acls import Acl, Authorizer
from raftka.security.principal import BROKER, CLIENT, Principal, current_host, current_principal
from raftka.v1 import broker_pb2 as Pb
from raftka.v1 import controller_pb2 as C
from tests.unit.test_transaction_markers import txn_batch

E = C.ErrorCode
ALICE = Principal("User:CN=alice,OU=client,O=raftka", CLIENT)
BROKER_101 = Principal("User:CN=broker-101,OU=broker,O=raftka", BROKER, 101)
HOST = "10.0.0.5"


def grant(operation: str, resource_type: str, name: str, pattern: str = acls.LITERAL) -> Acl:
    return Acl(resource_type, name, pattern, ALICE.name, "*", operation, acls.ALLOW)


def guards(*granted: Acl, enabled: bool = True) -> Guards:
    authorizer = Authorizer((), lambda: {a.id: a for a in granted})
    return Guards(RequestAuthorizer(authorizer if enabled else None))


class Recorder:
    """A handler answering every partition or group it is asked about with success."""

    def __init__(self, answer: Callable[[Any], Any]) -> None:
        self.seen: list[Any] = []
        self._answer = answer

    async def __call__(self, request: Any) -> Any:
        self.seen.append(request)
        return self._answer(request)


def as_(principal: Principal | None, call: Any) -> Any:
    async def body() -> Any:
        current_principal.set(principal)
        current_host.set(HOST)
        return await call

    return asyncio.run(body())


def produce_answer(request: Pb.ProduceRequest) -> Pb.ProduceResponse:
    response = Pb.ProduceResponse()
    for topic in request.topics:
        answered = response.topics.add(name=topic.name)
        for p in topic.partitions:
            answered.partitions.add(partition=p.partition, base_offset=7)
    return response


def produce_request(*topics: str) -> Pb.ProduceRequest:
    request = Pb.ProduceRequest(acks=-1)
    for name in topics:
        request.topics.add(name=name).partitions.add(partition=0, records=b"x")
    return request


def test_produce_writes_only_the_topics_it_may_write_and_answers_in_order() -> None:
    handler = Recorder(produce_answer)
    produce = guards(grant(acls.WRITE, acls.TOPIC, "orders")).by_topic(
        acls.WRITE, Pb.ProduceResponse, handler
    )
    answer = as_(ALICE, produce(produce_request("secret", "orders", "nowhere")))
    assert [[t.name for t in r.topics] for r in handler.seen] == [["orders"]]
    assert [(t.name, t.partitions[0].error) for t in answer.topics] == [
        ("secret", E.TOPIC_AUTHORIZATION_FAILED),
        ("orders", E.NONE),
        ("nowhere", E.TOPIC_AUTHORIZATION_FAILED),  # existing or not, the same answer
    ]
    assert ALICE.name in answer.topics[0].partitions[0].message


def test_a_request_wholly_refused_never_reaches_the_handler() -> None:
    handler = Recorder(produce_answer)
    produce = guards(grant(acls.READ, acls.TOPIC, "orders")).by_topic(acls.WRITE, Pb.ProduceResponse, handler)
    answer = as_(ALICE, produce(produce_request("orders")))
    assert handler.seen == []
    assert answer.topics[0].partitions[0].error == E.TOPIC_AUTHORIZATION_FAILED


def test_without_tls_everything_passes_and_a_follower_fetch_is_left_to_follower_check() -> None:
    handler = Recorder(produce_answer)
    produce = guards(enabled=False).by_topic(acls.WRITE, Pb.ProduceResponse, handler)
    as_(None, produce(produce_request("orders")))
    fetch = guards().by_topic(acls.READ, Pb.FetchResponse, handler)
    follower = Pb.FetchRequest(replica_id=102)
    follower.topics.add(name="orders").partitions.add(partition=0)
    as_(BROKER_101, fetch(follower))
    assert len(handler.seen) == 2


def test_metadata_lists_only_describable_topics_and_refuses_named_ones() -> None:
    def answer(request: Pb.MetadataRequest) -> Pb.MetadataResponse:
        response = Pb.MetadataResponse()
        for name in request.topics or ["orders", "secret"]:
            response.topics.add(name=name, error=E.NONE if name != "ghost" else E.UNKNOWN_TOPIC_OR_PARTITION)
        return response

    metadata = guards(grant(acls.READ, acls.TOPIC, "orders")).metadata(
        Recorder(answer)
    )  # READ implies DESCRIBE
    assert [t.name for t in as_(ALICE, metadata(Pb.MetadataRequest())).topics] == ["orders"]
    named = as_(ALICE, metadata(Pb.MetadataRequest(topics=["orders", "secret", "ghost"])))
    assert [(t.name, t.error) for t in named.topics] == [
        ("orders", E.NONE),
        ("secret", E.TOPIC_AUTHORIZATION_FAILED),
        ("ghost", E.TOPIC_AUTHORIZATION_FAILED),  # never "unknown": existence is not told
    ]


def test_group_membership_needs_read_on_the_group() -> None:
    handler = Recorder(lambda r: Pb.JoinGroupResponse(member_id="m"))
    join = guards(grant(acls.READ, acls.GROUP, "team-", acls.PREFIXED)).one_group(
        acls.READ, Pb.JoinGroupResponse, handler
    )
    assert as_(ALICE, join(Pb.JoinGroupRequest(group_id="team-a"))).status.error == E.NONE
    refused = as_(ALICE, join(Pb.JoinGroupRequest(group_id="other")))
    assert refused.status.error == E.GROUP_AUTHORIZATION_FAILED
    assert [r.group_id for r in handler.seen] == ["team-a"]


def test_a_commit_needs_read_on_the_group_and_commits_only_readable_topics() -> None:
    handler = Recorder(lambda r: C.OffsetCommitResponse())
    commit = guards(grant(acls.READ, acls.GROUP, "g"), grant(acls.READ, acls.TOPIC, "orders")).offset_commit(
        handler
    )
    request = C.OffsetCommitRequest(group="g")
    for name in ("orders", "secret"):
        request.topics.add(topic=name, partitions=[C.OffsetCommitPartition(partition=0, offset=5)])
    answer = as_(ALICE, commit(request))
    assert [[t.topic for t in r.topics] for r in handler.seen] == [["orders"]]
    assert [(p.topic, p.error) for p in answer.partitions] == [("secret", E.TOPIC_AUTHORIZATION_FAILED)]
    other = C.OffsetCommitRequest(group="h", topics=request.topics)
    assert as_(ALICE, commit(other)).status.error == E.GROUP_AUTHORIZATION_FAILED
    assert len(handler.seen) == 1


def test_offset_fetch_lists_only_describable_topics() -> None:
    def answer(request: C.OffsetFetchRequest) -> C.OffsetFetchResponse:
        names = [t.topic for t in request.topics] or ["orders", "secret"]
        return C.OffsetFetchResponse(offsets=[C.FetchedOffset(topic=n, partition=0, offset=3) for n in names])

    fetch = guards(
        grant(acls.DESCRIBE, acls.GROUP, "g"), grant(acls.WRITE, acls.TOPIC, "orders")
    ).offset_fetch(Recorder(answer))
    assert [o.topic for o in as_(ALICE, fetch(C.OffsetFetchRequest(group="g"))).offsets] == ["orders"]
    named = C.OffsetFetchRequest(group="g", topics=[C.TopicPartitions(topic="secret", partitions=[0])])
    assert [(o.topic, o.offset, o.error) for o in as_(ALICE, fetch(named)).offsets] == [
        ("secret", -1, E.TOPIC_AUTHORIZATION_FAILED)
    ]


def test_an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic() -> None:
    handler = Recorder(lambda r: Pb.InitProducerIdResponse(producer_id=1))
    request = Pb.InitProducerIdRequest(producer_id=-1, producer_epoch=-1)
    for granted, expected in (
        ((), E.CLUSTER_AUTHORIZATION_FAILED),
        ((grant(acls.READ, acls.TOPIC, "orders"),), E.CLUSTER_AUTHORIZATION_FAILED),
        ((grant(acls.WRITE, acls.TOPIC, "orders"),), E.NONE),
        ((grant(acls.IDEMPOTENT_WRITE, acls.CLUSTER, acls.CLUSTER_NAME),), E.NONE),
    ):
        init = guards(*granted).init_producer_id(handler)
        assert as_(ALICE, init(request)).status.error == expected, granted
    assert len(handler.seen) == 2


def test_a_brokers_certificate_holds_cluster_action_and_nothing_else() -> None:
    auth = RequestAuthorizer(Authorizer((), dict))

    async def body() -> tuple[bool, bool]:
        current_principal.set(BROKER_101)
        caller = auth.caller()
        return (
            auth.allows(caller, acls.CLUSTER_ACTION, acls.CLUSTER, acls.CLUSTER_NAME),
            auth.allows(caller, acls.READ, acls.TOPIC, "orders"),
        )

    assert asyncio.run(body()) == (True, False)


# transactions ---------------------------------------------------------------------------------


def test_transactional_requests_need_write_on_the_transactional_id() -> None:
    handler = Recorder(lambda r: Pb.InitProducerIdResponse(producer_id=1))
    request = Pb.InitProducerIdRequest(transactional_id="app", producer_id=-1, producer_epoch=-1)
    for granted, expected in (
        (
            (grant(acls.IDEMPOTENT_WRITE, acls.CLUSTER, acls.CLUSTER_NAME),),
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ),
        ((grant(acls.DESCRIBE, acls.TRANSACTIONAL_ID, "app"),), E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ((grant(acls.WRITE, acls.TRANSACTIONAL_ID, "ap", acls.PREFIXED),), E.NONE),
    ):
        assert as_(ALICE, guards(*granted).init_producer_id(handler)(request)).status.error == expected
    end = guards(grant(acls.WRITE, acls.TRANSACTIONAL_ID, "app")).transactional_id(
        acls.WRITE, Pb.EndTxnResponse, Recorder(lambda r: Pb.EndTxnResponse())
    )
    assert as_(ALICE, end(Pb.EndTxnRequest(transactional_id="app"))).status.error == E.NONE
    refused = as_(ALICE, end(Pb.EndTxnRequest(transactional_id="other")))
    assert refused.status.error == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED and "transactional id 'other'" in (
        refused.status.message
    )
    offsets = guards(grant(acls.WRITE, acls.TRANSACTIONAL_ID, "app")).transactional_id(
        acls.WRITE,
        Pb.AddOffsetsToTxnResponse,
        Recorder(lambda r: Pb.AddOffsetsToTxnResponse()),
        group_read=True,
    )
    answer = as_(ALICE, offsets(Pb.AddOffsetsToTxnRequest(transactional_id="app", group_id="g")))
    assert answer.status.error == E.GROUP_AUTHORIZATION_FAILED
    assert len(handler.seen) == 1


def test_add_partitions_refuses_unwritable_topics_and_attempts_none_of_the_others() -> None:
    handler = Recorder(lambda r: Pb.AddPartitionsToTxnResponse())
    add = guards(
        grant(acls.WRITE, acls.TRANSACTIONAL_ID, "app"), grant(acls.WRITE, acls.TOPIC, "orders")
    ).add_partitions_to_txn(handler)
    request = Pb.AddPartitionsToTxnRequest(
        transactional_id="app",
        topics=[Pb.TxnTopic(name="orders", partitions=[0]), Pb.TxnTopic(name="secret", partitions=[1])],
    )
    answer = as_(ALICE, add(request))
    assert {(t.name, p.error) for t in answer.topics for p in t.partitions} == {
        ("orders", E.OPERATION_NOT_ATTEMPTED),
        ("secret", E.TOPIC_AUTHORIZATION_FAILED),
    }
    verify = Pb.AddPartitionsToTxnRequest(transactional_id="app", topics=request.topics[:1], verify_only=True)
    refused = as_(ALICE, add(verify))  # only a broker may ask to verify
    assert refused.topics[0].partitions[0].error == E.CLUSTER_AUTHORIZATION_FAILED
    as_(BROKER_101, add(verify))
    assert [r.verify_only for r in handler.seen] == [True]


def test_transactions_are_described_and_listed_only_where_describable() -> None:
    def described(request: Pb.DescribeTransactionsRequest) -> Pb.DescribeTransactionsResponse:
        return Pb.DescribeTransactionsResponse(
            transactions=[
                Pb.TransactionDescription(transactional_id=t, state="Ongoing")
                for t in request.transactional_ids
            ]
        )

    allowed = guards(grant(acls.DESCRIBE, acls.TRANSACTIONAL_ID, "app"))
    answer = as_(
        ALICE,
        allowed.describe_transactions(Recorder(described))(
            Pb.DescribeTransactionsRequest(transactional_ids=["app", "other"])
        ),
    )
    assert [(d.transactional_id, d.error) for d in answer.transactions] == [
        ("app", E.NONE),
        ("other", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ]
    listing = Pb.ListTransactionsResponse(
        transactions=[Pb.TransactionListing(transactional_id=t) for t in ("app", "other")]
    )
    listed = as_(ALICE, allowed.list_transactions(Recorder(lambda r: listing))(Pb.ListTransactionsRequest()))
    assert [t.transactional_id for t in listed.transactions] == ["app"]


def test_transactional_batches_need_write_on_the_requests_transactional_id() -> None:
    """Kafka's handleProduceRequest: checked only when a partition's first batch is
    transactional, and then the whole request is refused (53 for every partition)."""
    handler = Recorder(produce_answer)
    produce = guards(grant(acls.WRITE, acls.TOPIC, "orders")).produce(handler)
    cases = [
        ("tx", txn_batch(5, 0, b"v"), E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ("", txn_batch(5, 0, b"v"), E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ("tx", txn_batch(5, 0, b"v", transactional=False), E.NONE),  # idempotent batches only
    ]
    for tid, records, expected in cases:
        request = Pb.ProduceRequest(acks=-1, transactional_id=tid)
        request.topics.add(name="orders").partitions.add(partition=0, records=records)
        answer = as_(ALICE, produce(request))
        assert answer.status.error == expected and answer.topics[0].partitions[0].error == expected
    assert len(handler.seen) == 1
