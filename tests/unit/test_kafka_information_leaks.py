"""Issue 29 finding 4, the Kafka listener's part: what a caller may not describe is not told.
DescribeClientQuotas needs DESCRIBE_CONFIGS on the cluster; DescribeTransactions leaves
out the topics the caller may not DESCRIBE; Metadata (v10+) and DeleteTopics (v6) asked
by topic id answer a topic refused DESCRIBE without its name, as Kafka's KafkaApis does."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kafka.protocol.admin import DeleteTopicsRequest, DescribeClientQuotasRequest
from kafka.protocol.metadata import MetadataRequest

from raftka.broker.authorization import Guards, RequestAuthorizer
from raftka.broker.kafka.cluster_apis import ClusterApis
from raftka.broker.kafka.quota_apis import QuotaApis
from raftka.metadata import acls
from raftka.metadata.acls import Acl, Authorizer
from raftka.metadata.image import MetadataImage, PartitionState, TopicImage, frozen
from raftka.metadata.quotas import QuotaEntity
from raftka.node.config import NodeConfig
from raftka.security.principal import CLIENT, Principal, current_host, current_principal
from raftka.v1 import broker_pb2 as Pb
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
ALICE = Principal("User:CN=alice,OU=client,O=raftka", CLIENT)
TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 31
SECRET_ID = uuid.uuid5(uuid.NAMESPACE_OID, "secret")
OPEN_ID = uuid.uuid5(uuid.NAMESPACE_OID, "open")


def grant(operation: str, resource_type: str, name: str) -> Acl:
    return Acl(resource_type, name, acls.LITERAL, ALICE.name, "*", operation, acls.ALLOW)


def as_alice(call: Any) -> Any:
    async def body() -> Any:
        current_principal.set(ALICE)
        current_host.set("10.0.0.5")
        return await call

    return asyncio.run(body())


def api(*granted: Acl, **fields: Any) -> SimpleNamespace:
    authorizer = RequestAuthorizer(Authorizer((), lambda: {a.id: a for a in granted}))
    state = PartitionState(replicas=(1,), isr=(1,), leader=1, leader_epoch=0, partition_epoch=0)
    ids = {"secret": SECRET_ID.bytes, "open": OPEN_ID.bytes}
    image = MetadataImage(
        offset=3,
        topics_by_id=frozen({i: TopicImage(n, i, frozen({0: state})) for n, i in ids.items()}),
        topic_ids_by_name=frozen(ids),
        client_quotas=frozen({QuotaEntity("bob", None): frozen({"producer_byte_rate": 1024.0})}),
    )
    return SimpleNamespace(image=image, cluster_id="c", authorizer=authorizer, **fields)


def test_client_quotas_are_described_only_to_describe_configs_on_the_cluster() -> None:
    request = DescribeClientQuotasRequest(components=[], strict=False)
    refused = as_alice(QuotaApis(api()).describe_client_quotas(request, 1))  # type: ignore[arg-type]
    assert (refused.error_code, refused.entries) == (CLUSTER_AUTHORIZATION_FAILED, None)
    allowed = api(grant(acls.DESCRIBE_CONFIGS, acls.CLUSTER, acls.CLUSTER_NAME))
    answer = as_alice(QuotaApis(allowed).describe_client_quotas(request, 1))  # type: ignore[arg-type]
    assert answer.error_code == 0
    assert [[e.entity_name for e in entry.entity] for entry in answer.entries] == [["bob"]]


def test_a_transactions_description_leaves_out_the_topics_the_caller_may_not_describe() -> None:
    async def described(request: Pb.DescribeTransactionsRequest) -> Pb.DescribeTransactionsResponse:
        return Pb.DescribeTransactionsResponse(
            transactions=[
                Pb.TransactionDescription(
                    transactional_id=t,
                    state="Ongoing",
                    topics=[
                        Pb.TxnTopic(name="open", partitions=[0]),
                        Pb.TxnTopic(name="secret", partitions=[1]),
                    ],
                )
                for t in request.transactional_ids
            ]
        )

    guards = Guards(
        api(
            grant(acls.DESCRIBE, acls.TRANSACTIONAL_ID, "app"), grant(acls.READ, acls.TOPIC, "open")
        ).authorizer
    )
    answer = as_alice(
        guards.describe_transactions(described)(Pb.DescribeTransactionsRequest(transactional_ids=["app"]))
    )
    assert [(t.name, list(t.partitions)) for t in answer.transactions[0].topics] == [("open", [0])]


def config() -> NodeConfig:
    return NodeConfig(1, Path("."), (), "127.0.0.1:1", process_roles=("broker",))


def test_metadata_by_topic_id_does_not_name_a_topic_the_caller_may_not_describe() -> None:
    apis = ClusterApis(api(grant(acls.DESCRIBE, acls.TOPIC, "open")), config())  # type: ignore[arg-type]
    asked = [MetadataRequest.MetadataRequestTopic(name=None, topic_id=i) for i in (SECRET_ID, OPEN_ID)]
    answer = as_alice(apis.metadata(MetadataRequest(topics=asked, allow_auto_topic_creation=False), 12))
    assert [(t.name, t.topic_id, t.error_code) for t in answer.topics] == [
        (None, SECRET_ID, TOPIC_AUTHORIZATION_FAILED),
        ("open", OPEN_ID, 0),
    ]
    by_name = [MetadataRequest.MetadataRequestTopic(name="secret", topic_id=uuid.UUID(int=0))]
    answer = as_alice(apis.metadata(MetadataRequest(topics=by_name, allow_auto_topic_creation=False), 12))
    assert [(t.name, t.error_code) for t in answer.topics] == [("secret", TOPIC_AUTHORIZATION_FAILED)]


def test_delete_topics_by_topic_id_does_not_name_a_topic_the_caller_may_not_describe() -> None:
    async def forward(rpc: object, request: controller_pb2.DeleteTopicsRequest, _: type) -> object:
        raise AssertionError(f"nothing may be forwarded: {request}")

    apis = ClusterApis(api(grant(acls.DESCRIBE, acls.TOPIC, "open"), forward=forward), config())  # type: ignore[arg-type]
    T = DeleteTopicsRequest.DeleteTopicState
    request = DeleteTopicsRequest(
        topics=[T(name=None, topic_id=i) for i in (SECRET_ID, OPEN_ID)], timeout_ms=1000
    )
    answer = as_alice(apis.delete_topics(request, 6))
    assert [(r.name, r.topic_id, r.error_code) for r in answer.responses] == [
        (None, SECRET_ID, TOPIC_AUTHORIZATION_FAILED),
        ("open", OPEN_ID, TOPIC_AUTHORIZATION_FAILED),  # it may describe it, not delete it
    ]
    assert "secret" not in (answer.responses[0].error_message or "")
