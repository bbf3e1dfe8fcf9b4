"""Kafka's AlterPartitionReassignments (45) and ListPartitionReassignments (46) on the
Kafka listener, forwarded to the controller: a partition on brokers 101 and 102 moves
to 101 alone, back onto both (102 adding, listed as in progress), is cancelled, and a bad
target is refused for its partition alone with the field named."""

from __future__ import annotations

from pathlib import Path

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

from tests.unit.kafka_wire import BrokerThread, broker_thread, call

Topic = AlterPartitionReassignmentsRequest.ReassignableTopic
NO_REASSIGNMENT_IN_PROGRESS = 85
INVALID_REPLICA_ASSIGNMENT = 39


def alter(broker: BrokerThread, *targets: tuple[int, list[int] | None]) -> dict[int, tuple[int, str | None]]:
    request = AlterPartitionReassignmentsRequest(
        timeout_ms=5_000,
        topics=[
            Topic(
                name="t",
                partitions=[Topic.ReassignablePartition(partition_index=p, replicas=r) for p, r in targets],
            )
        ],
    )
    answer = call(broker.bootstrap, request, 0, AlterPartitionReassignmentsResponse)
    assert answer.error_code == 0
    return {
        p.partition_index: (p.error_code, p.error_message) for t in answer.responses for p in t.partitions
    }


def ongoing(broker: BrokerThread) -> dict[int, tuple[list[int], list[int], list[int]]]:
    request = ListPartitionReassignmentsRequest(timeout_ms=5_000, topics=None)
    answer = call(broker.bootstrap, request, 0, ListPartitionReassignmentsResponse)
    assert answer.error_code == 0
    return {
        p.partition_index: (p.replicas, p.adding_replicas, p.removing_replicas)
        for t in answer.topics
        for p in t.partitions
    }


def replicas(broker: BrokerThread, partition: int) -> tuple[int, ...]:
    return broker.broker.api.image.topic("t").partitions[partition].replicas  # type: ignore[union-attr]


def test_a_kafka_client_moves_lists_and_cancels_a_reassignment(tmp_path: Path) -> None:
    with broker_thread(tmp_path, {"t": 2}, followers=(102,)) as broker:
        assert alter(broker, (0, [101])) == {0: (0, None)}
        assert replicas(broker, 0) == (101,) and ongoing(broker) == {}
        assert alter(broker, (0, [101, 102])) == {0: (0, None)}
        assert ongoing(broker) == {0: ([101, 102], [102], [])}
        answers = alter(broker, (0, None), (1, [102, 102]))
        assert answers[0] == (0, None) and replicas(broker, 0) == (101,) and ongoing(broker) == {}
        code, message = answers[1]
        assert (
            code == INVALID_REPLICA_ASSIGNMENT
            and "replicas of t-1: broker 102 appears more than once" in (message or "")
        )
        assert replicas(broker, 1) == (101, 102)
        assert alter(broker, (0, None))[0][0] == NO_REASSIGNMENT_IN_PROGRESS


def test_kafka_pythons_admin_client_moves_and_lists_through_the_listener(tmp_path: Path) -> None:
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.errors import InvalidReplicationAssignmentError

    with broker_thread(tmp_path, {"t": 1}, followers=(102,)) as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
        try:
            tp = TopicPartition("t", 0)
            assert admin.alter_partition_reassignments({tp: [101, 103]}) == {
                tp: InvalidReplicationAssignmentError
            }
            errors = admin.alter_partition_reassignments({tp: [101]})
            assert errors == {tp: None} and replicas(broker, 0) == (101,)
            assert admin.alter_partition_reassignments({tp: [101, 102]}) == {tp: None}
            listed = admin.list_partition_reassignments()
            assert listed == {tp: {"replicas": [101, 102], "adding_replicas": [102], "removing_replicas": []}}
        finally:
            admin.close()
