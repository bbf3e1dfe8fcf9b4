"""Every list a client sends the QuorumController is bounded (``raftka.metadata.validation``).

A request over a bound is refused as a whole with INVALID_REQUEST naming the list and
the bound, before the controller plans it (or, for a read, commits its barrier): the
log and the image are unchanged, and the controller goes on serving. A request exactly
at a bound is served.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from raftka.metadata.controller import QuorumController
from raftka.metadata.validation import LISTENERS_MAX, OFFSET_FETCH_PARTITIONS_MAX, TOPICS_PER_REQUEST_MAX
from raftka.v1 import controller_pb2 as pb
from raftka.v1 import metadata_pb2
from tests.unit.metadata_controller_support import QUIET_RAFT, E, create, live_brokers, log_end, run, single

RECORDS_MAX = 64  # raft.append_max_records of the quorum under test: small, so requests stay small
TOPICS = TOPICS_PER_REQUEST_MAX + 1
RECORDS = RECORDS_MAX + 1


def topic_names(n: int) -> list[str]:
    return [f"t{i}" for i in range(n)]


def partitions_of_one_topic(n: int) -> list[pb.TopicPartitions]:
    return [pb.TopicPartitions(topic="t", partitions=list(range(n)))]


def endpoint(port: int) -> metadata_pb2.BrokerEndpoint:
    return metadata_pb2.BrokerEndpoint(name=f"L{port}", host="127.0.0.1", port=port)


# (controller method, request over one bound, the list named, the bound)
OVER_BOUNDS: list[tuple[str, Any, str, int]] = [
    (
        "create_topics",
        pb.CreateTopicsRequest(
            topics=[
                pb.CreatableTopic(name=n, num_partitions=1, replication_factor=1) for n in topic_names(TOPICS)
            ]
        ),
        "topics",
        TOPICS_PER_REQUEST_MAX,
    ),
    (
        "create_topics",
        pb.CreateTopicsRequest(
            topics=[
                pb.CreatableTopic(
                    name="t",
                    num_partitions=1,
                    replication_factor=1,
                    configs={str(i): "1" for i in range(RECORDS)},
                )
            ]
        ),
        "topics[].configs",
        RECORDS_MAX,
    ),
    ("delete_topics", pb.DeleteTopicsRequest(names=topic_names(TOPICS)), "names", TOPICS_PER_REQUEST_MAX),
    (
        "create_partitions",
        pb.CreatePartitionsRequest(
            topics=[pb.PartitionsIncrease(name=n, count=2) for n in topic_names(TOPICS)]
        ),
        "topics",
        TOPICS_PER_REQUEST_MAX,
    ),
    ("describe_topics", pb.DescribeTopicsRequest(names=topic_names(TOPICS)), "names", TOPICS_PER_REQUEST_MAX),
    (
        "describe_configs",
        pb.DescribeConfigsRequest(topics=topic_names(TOPICS)),
        "topics",
        TOPICS_PER_REQUEST_MAX,
    ),
    (
        "alter_configs",
        pb.AlterConfigsRequest(topics=[pb.AlterTopicConfigs(topic=n) for n in topic_names(TOPICS)]),
        "topics",
        TOPICS_PER_REQUEST_MAX,
    ),
    (
        "alter_configs",
        pb.AlterConfigsRequest(
            topics=[
                pb.AlterTopicConfigs(topic="t", ops=[pb.AlterConfigOp(name=str(i)) for i in range(RECORDS)])
            ]
        ),
        "topics[].ops",
        RECORDS_MAX,
    ),
    (
        "register_broker",
        pb.BrokerRegistrationRequest(
            broker_id=7,
            incarnation_id="i",
            listeners=[endpoint(9000 + i) for i in range(LISTENERS_MAX + 1)],
        ),
        "listeners",
        LISTENERS_MAX,
    ),
    (
        "alter_partition",
        pb.AlterPartitionRequest(
            broker_id=101, topics=[pb.AlterPartitionTopic(topic_id=bytes(16)) for _ in range(TOPICS)]
        ),
        "topics",
        TOPICS_PER_REQUEST_MAX,
    ),
    (
        "alter_partition",
        pb.AlterPartitionRequest(
            broker_id=101,
            topics=[
                pb.AlterPartitionTopic(
                    topic_id=bytes(16),
                    partitions=[pb.AlterPartitionData(partition=p) for p in range(RECORDS)],
                )
            ],
        ),
        "topics[].partitions",
        RECORDS_MAX,
    ),
    (
        "elect_leaders",
        pb.ElectLeadersRequest(topics=[pb.TopicPartitions(topic=n) for n in topic_names(TOPICS)]),
        "topics",
        TOPICS_PER_REQUEST_MAX,
    ),
    (
        "elect_leaders",
        pb.ElectLeadersRequest(topics=partitions_of_one_topic(RECORDS)),
        "topics[].partitions",
        RECORDS_MAX,
    ),
    (
        "commit_offsets",
        pb.OffsetCommitRequest(
            group="g", topics=[pb.OffsetCommitTopic(topic=n) for n in topic_names(TOPICS)]
        ),
        "topics",
        TOPICS_PER_REQUEST_MAX,
    ),
    (
        "commit_offsets",
        pb.OffsetCommitRequest(
            group="g",
            topics=[
                pb.OffsetCommitTopic(
                    topic="t", partitions=[pb.OffsetCommitPartition(partition=p) for p in range(RECORDS)]
                )
            ],
        ),
        "topics[].partitions",
        RECORDS_MAX,
    ),
    (
        "fetch_offsets",
        pb.OffsetFetchRequest(group="g", topics=[pb.TopicPartitions(topic=n) for n in topic_names(TOPICS)]),
        "topics",
        TOPICS_PER_REQUEST_MAX,
    ),
    (
        "fetch_offsets",
        pb.OffsetFetchRequest(group="g", topics=partitions_of_one_topic(OFFSET_FETCH_PARTITIONS_MAX + 1)),
        "topics[].partitions",
        OFFSET_FETCH_PARTITIONS_MAX,
    ),
]


def case_id(case: Any) -> str:
    method, _, field, _ = case
    return f"{method}-{field}"


@pytest.mark.parametrize("case", OVER_BOUNDS, ids=case_id)
def test_a_list_over_its_bound_is_refused_naming_it_and_nothing_is_written(case: Any) -> None:
    method, request, field, bound = case

    async def body() -> None:
        quorum, member = await single(raft=dataclasses.replace(QUIET_RAFT, append_max_records=RECORDS_MAX))
        c = member.controller
        await live_brokers(c)
        await create(c, "t", partitions=2, rf=1)
        before, image = log_end(member), member.image
        response = await getattr(c, method)(request)
        assert response.status.error == E.INVALID_REQUEST, response.status
        assert (
            response.status.message.startswith(f"{field}: ")
            and f"at most {bound} " in response.status.message
        )
        assert log_end(member) == before, "a refused request appended to the log"
        assert member.image == image
        await create(c, "served-after", partitions=1, rf=1)  # the controller keeps serving
        await quorum.close()

    run(body)


# (controller method, request exactly at a bound, what the served answer shows)
AT_BOUNDS: list[tuple[str, Any, Callable[[Any], bool]]] = [
    (
        "delete_topics",
        pb.DeleteTopicsRequest(names=topic_names(TOPICS_PER_REQUEST_MAX)),
        lambda r: len(r.topics) == TOPICS_PER_REQUEST_MAX,
    ),
    (
        "describe_topics",
        pb.DescribeTopicsRequest(names=topic_names(TOPICS_PER_REQUEST_MAX)),
        lambda r: len(r.topics) == TOPICS_PER_REQUEST_MAX,
    ),
    (
        "elect_leaders",
        pb.ElectLeadersRequest(topics=partitions_of_one_topic(RECORDS_MAX)),
        lambda r: len(r.partitions) == RECORDS_MAX,
    ),
    (
        "fetch_offsets",
        pb.OffsetFetchRequest(group="g", topics=partitions_of_one_topic(OFFSET_FETCH_PARTITIONS_MAX)),
        lambda r: len(r.offsets) == OFFSET_FETCH_PARTITIONS_MAX,
    ),
]


@pytest.mark.parametrize("case", AT_BOUNDS, ids=lambda case: case[0])
def test_a_list_at_its_bound_is_served(case: Any) -> None:
    method, request, answered = case

    async def body() -> None:
        quorum, member = await single(raft=dataclasses.replace(QUIET_RAFT, append_max_records=RECORDS_MAX))
        c: QuorumController = member.controller
        await live_brokers(c)
        await create(c, "t", partitions=2, rf=1)
        response = await getattr(c, method)(request)
        assert response.status.error == E.NONE, response.status
        assert answered(response)
        await quorum.close()

    run(body)


def test_an_isr_longer_than_the_replicas_is_refused_without_echoing_it() -> None:
    """new_isr is bounded by the partition's replicas (``raftka.metadata.validation``)."""

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        epochs = await live_brokers(c)
        topic_id = (await create(c, "t", partitions=1, rf=2)).topic_id
        state = member.image.topic("t").partitions[0]
        long_isr = [state.leader] * 100_000
        request = pb.AlterPartitionRequest(
            broker_id=state.leader,
            broker_epoch=epochs[state.leader],
            topics=[
                pb.AlterPartitionTopic(
                    topic_id=topic_id, partitions=[pb.AlterPartitionData(partition=0, new_isr=long_isr)]
                )
            ],
        )
        before, image = log_end(member), member.image
        response = await c.alter_partition(request)
        result = response.partitions[0]
        assert result.error == E.INVALID_REQUEST
        assert result.message == "new_isr: 100000 entries, the partition has 2 replicas"
        assert log_end(member) == before and member.image == image
        await quorum.close()

    run(body)
