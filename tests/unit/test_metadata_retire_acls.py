"""Who may read and change broker configs, and unregister a broker: Kafka's rules,
ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster (a topic's configs stay judged on the
topic), ALTER on the cluster."""

from __future__ import annotations

from raftka.metadata.acls import Acl, Authorizer
from raftka.security.principal import CLIENT, Principal
from raftka.v1 import controller_pb2 as C
from tests.unit.controller_rules_support import controller_policy

RATE = "leader.replication.throttled.rate"


def test_broker_configs_need_the_cluster_and_topic_configs_the_topic() -> None:
    alice = Principal("User:alice", CLIENT)
    topic_acl = Acl("TOPIC", "t", "LITERAL", "User:alice", "*", "ALTER_CONFIGS", "ALLOW")
    cluster_acl = Acl("CLUSTER", "kafka-cluster", "LITERAL", "User:bob", "*", "ALTER_CONFIGS", "ALLOW")
    policy = controller_policy(Authorizer([], lambda: {a.id: a for a in (topic_acl, cluster_acl)}))
    op = C.AlterConfigOp(name=RATE, value="1")
    broker_change = C.AlterConfigsRequest(brokers=[C.AlterBrokerConfigs(broker="1", ops=[op])])
    topic_change = C.AlterConfigsRequest(topics=[C.AlterTopicConfigs(topic="t", ops=[op])])

    assert policy("AlterConfigs", alice, None, topic_change) is None
    refused = policy("AlterConfigs", alice, None, broker_change)
    assert refused is not None and refused.code == C.CLUSTER_AUTHORIZATION_FAILED
    assert "User:alice may not ALTER_CONFIGS the cluster" in refused.message
    assert policy("AlterConfigs", Principal("User:bob", CLIENT), None, broker_change) is None
    described = policy("DescribeConfigs", alice, None, C.DescribeConfigsRequest(brokers=[""]))
    assert described is not None and described.code == C.CLUSTER_AUTHORIZATION_FAILED


def test_unregistering_a_broker_needs_alter_on_the_cluster() -> None:
    alter = Acl("CLUSTER", "kafka-cluster", "LITERAL", "User:ops", "*", "ALTER", "ALLOW")
    policy = controller_policy(Authorizer([], lambda: {alter.id: alter}))
    request = C.UnregisterBrokerRequest(broker_id=3)
    refused = policy("UnregisterBroker", Principal("User:alice", CLIENT), None, request)
    assert refused is not None and refused.code == C.CLUSTER_AUTHORIZATION_FAILED
    assert "User:alice may not ALTER the cluster" in refused.message
    assert policy("UnregisterBroker", Principal("User:ops", CLIENT), None, request) is None
