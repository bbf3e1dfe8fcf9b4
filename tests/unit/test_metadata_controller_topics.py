"""QuorumController topics, configs and offsets, against a one-voter quorum.

Every refused request is checked to have appended nothing: the log end offset and the
committed image are unchanged.
"""

from __future__ import annotations

import string
from typing import Any

import pytest

from raftka.metadata.topic_configs import TOPIC_CONFIGS
from raftka.metadata.validation import TOPIC_NAME_MAX_CHARS
from raftka.v1 import controller_pb2 as pb
from tests.unit.metadata_controller_support import E, create, live_brokers, log_end, run, single

Topic = pb.CreatableTopic


async def refused_without_append(member: Any, call: Any) -> Any:
    before, image = log_end(member), member.image
    response = await call
    assert log_end(member) == before, "a refused request appended to the log"
    assert member.image == image
    return response


def test_create_topic_places_replicas_over_live_brokers() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        await live_brokers(c)
        result = await create(c, "orders", partitions=6, rf=2, **{"retention.ms": " +0100 "})
        assert result.error == E.NONE and len(result.topic_id) == 16
        topic = member.image.topic("orders")
        assert topic is not None and topic.topic_id == result.topic_id
        assert sorted(topic.partitions) == list(range(6))
        for state in topic.partitions.values():
            assert len(set(state.replicas)) == 2 and set(state.replicas) <= {101, 102, 103}
            assert state.isr == state.replicas and state.leader == state.replicas[0]
            assert (state.leader_epoch, state.partition_epoch) == (0, 0)
        leaders = [s.leader for s in topic.partitions.values()]
        assert max(leaders.count(b) for b in (101, 102, 103)) == 2  # spread evenly
        assert member.image.configs[(2, "orders")] == {"retention.ms": "100"}  # normalized
        listing = await c.list_topics(pb.ListTopicsRequest())
        assert [(t.name, t.partitions) for t in listing.topics] == [("orders", 6)]
        described = await c.describe_topics(pb.DescribeTopicsRequest(names=["orders", "nope"]))
        assert [p.partition for p in described.topics[0].partitions] == list(range(6))
        assert described.topics[1].error == E.UNKNOWN_TOPIC_OR_PARTITION
        await quorum.close()

    run(body)


def test_many_topics_in_one_request_are_one_batch_with_a_result_each() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        await live_brokers(c)
        await create(c, "taken", 1, 1)
        before = log_end(member)
        response = await c.create_topics(
            pb.CreateTopicsRequest(
                topics=[
                    Topic(name="a", num_partitions=2, replication_factor=1),
                    Topic(name="taken", num_partitions=1, replication_factor=1),
                    Topic(
                        name="b", num_partitions=1, replication_factor=3, configs={"cleanup.policy": "delete"}
                    ),
                    Topic(name="bad name", num_partitions=1, replication_factor=1),
                ]
            )
        )
        errors = [(t.name, t.error) for t in response.topics]
        assert errors == [
            ("a", E.NONE),
            ("taken", E.TOPIC_ALREADY_EXISTS),
            ("b", E.NONE),
            ("bad name", E.INVALID_TOPIC_EXCEPTION),
        ]
        # a: topic + 2 partitions, b: topic + 1 partition + 1 config, in one batch
        assert log_end(member) == before + 6
        assert set(member.image.topic_ids_by_name) == {"taken", "a", "b"}
        await quorum.close()

    run(body)


CREATE_ERRORS = [
    (Topic(name="", num_partitions=1, replication_factor=1), E.INVALID_TOPIC_EXCEPTION),
    (Topic(name="..", num_partitions=1, replication_factor=1), E.INVALID_TOPIC_EXCEPTION),
    (Topic(name="x" * 250, num_partitions=1, replication_factor=1), E.INVALID_TOPIC_EXCEPTION),
    (Topic(name="a/b", num_partitions=1, replication_factor=1), E.INVALID_TOPIC_EXCEPTION),
    (Topic(name="existing", num_partitions=1, replication_factor=1), E.TOPIC_ALREADY_EXISTS),
    (Topic(name="__cluster_metadata", num_partitions=1, replication_factor=1), E.INVALID_REQUEST),
    (Topic(name="__consumer_offsets", num_partitions=1, replication_factor=1), E.INVALID_REQUEST),
    (Topic(name="__transaction_state", num_partitions=1, replication_factor=1), E.INVALID_REQUEST),
    (
        Topic(name="my_topic", num_partitions=1, replication_factor=1),
        E.INVALID_TOPIC_EXCEPTION,
    ),  # vs my.topic
    (Topic(name="t", num_partitions=0, replication_factor=1), E.INVALID_PARTITIONS),
    (Topic(name="t", num_partitions=-3, replication_factor=1), E.INVALID_PARTITIONS),
    (Topic(name="t", num_partitions=101, replication_factor=1), E.INVALID_PARTITIONS),
    (Topic(name="t", num_partitions=1, replication_factor=0), E.INVALID_REPLICATION_FACTOR),
    (Topic(name="t", num_partitions=1, replication_factor=4), E.INVALID_REPLICATION_FACTOR),
    (Topic(name="t", num_partitions=1, replication_factor=1, configs={"nope": "1"}), E.INVALID_CONFIG),
    (
        Topic(name="t", num_partitions=1, replication_factor=1, configs={"retention.ms": "soon"}),
        E.INVALID_CONFIG,
    ),
    (
        Topic(name="t", num_partitions=1, replication_factor=2, configs={"min.insync.replicas": "3"}),
        E.INVALID_CONFIG,
    ),
]


@pytest.mark.parametrize(
    ("topic", "code"), CREATE_ERRORS, ids=lambda x: str(x)[:40] if isinstance(x, Topic) else None
)
def test_bad_create_is_refused_and_appends_nothing(topic: Topic, code: int) -> None:
    async def body() -> None:
        quorum, member = await single(max_partitions_per_topic=100)
        c = member.controller
        await live_brokers(c)
        await create(c, "existing", 1, 1)
        await create(c, "my.topic", 1, 1)
        response = await refused_without_append(
            member, c.create_topics(pb.CreateTopicsRequest(topics=[topic]))
        )
        assert response.status.error == E.NONE
        assert response.topics[0].error == code, response.topics[0].message
        assert response.topics[0].message
        await quorum.close()

    run(body)


def test_duplicate_names_validate_only_and_oversized_requests_append_nothing() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        await live_brokers(c)
        twice = pb.CreateTopicsRequest(topics=[Topic(name="d", num_partitions=1, replication_factor=1)] * 2)
        response = await refused_without_append(member, c.create_topics(twice))
        assert [t.error for t in response.topics] == [E.INVALID_REQUEST, E.INVALID_REQUEST]
        dry = pb.CreateTopicsRequest(
            topics=[Topic(name="d", num_partitions=1, replication_factor=1)], validate_only=True
        )
        response = await refused_without_append(member, c.create_topics(dry))
        assert response.topics[0].error == E.NONE and member.image.topic("d") is None
        too_big = member.node.core.cfg.append_max_records  # one topic record + this many partitions
        huge = pb.CreateTopicsRequest(topics=[Topic(name="h", num_partitions=too_big, replication_factor=1)])
        response = await refused_without_append(member, c.create_topics(huge))
        assert response.topics[0].error == E.INVALID_PARTITIONS
        await quorum.close()

    run(body)


def test_delete_topics_removes_configs_and_offsets() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        await live_brokers(c)
        await create(c, "gone", 2, 1, **{"retention.ms": "5"})
        await c.commit_offsets(
            pb.OffsetCommitRequest(
                group="g",
                topics=[pb.OffsetCommitTopic(topic="gone", partitions=[pb.OffsetCommitPartition(offset=3)])],
            )
        )
        assert member.image.offsets
        response = await c.delete_topics(pb.DeleteTopicsRequest(names=["gone"]))
        assert response.topics[0].error == E.NONE
        image = member.image
        assert image.topic("gone") is None and not image.offsets and (2, "gone") not in image.configs
        for names, code in ((["gone"], E.UNKNOWN_TOPIC_OR_PARTITION), (["x", "x"], E.INVALID_REQUEST)):
            response = await refused_without_append(
                member, c.delete_topics(pb.DeleteTopicsRequest(names=names))
            )
            assert response.topics[0].error == code
        await quorum.close()

    run(body)


def test_every_legal_topic_name_length_is_created_and_deleted() -> None:
    """Kafka's names: 1 to 249 of [a-zA-Z0-9._-]; one of each length, in one request each way."""
    chars = (string.ascii_letters + string.digits + "._-") * 4
    names = [chars[:length] for length in range(1, TOPIC_NAME_MAX_CHARS + 1)] + ["...", "-", "_."]

    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        await live_brokers(c)
        created = await c.create_topics(
            pb.CreateTopicsRequest(
                topics=[Topic(name=n, num_partitions=1, replication_factor=1) for n in names]
            )
        )
        assert [(t.name, t.error) for t in created.topics] == [(n, E.NONE) for n in names]
        assert set(member.image.topic_ids_by_name) == set(names)
        deleted = await c.delete_topics(pb.DeleteTopicsRequest(names=names))
        assert [(t.name, t.error) for t in deleted.topics] == [(n, E.NONE) for n in names]
        assert not member.image.topics_by_id
        await quorum.close()

    run(body)


def test_create_partitions_only_increases() -> None:
    async def body() -> None:
        quorum, member = await single(max_partitions_per_topic=10)
        c = member.controller
        await live_brokers(c)
        await create(c, "t", 2, 2)
        response = await c.create_partitions(
            pb.CreatePartitionsRequest(topics=[pb.PartitionsIncrease(name="t", count=5)])
        )
        assert response.topics[0].error == E.NONE
        topic = member.image.topic("t")
        assert topic is not None and sorted(topic.partitions) == list(range(5))
        assert all(len(p.replicas) == 2 and p.isr == p.replicas for p in topic.partitions.values())
        for name, count, code in (
            ("t", 5, E.INVALID_PARTITIONS),
            ("t", 3, E.INVALID_PARTITIONS),
            ("t", 11, E.INVALID_PARTITIONS),
            ("nope", 3, E.UNKNOWN_TOPIC_OR_PARTITION),
        ):
            request = pb.CreatePartitionsRequest(topics=[pb.PartitionsIncrease(name=name, count=count)])
            response = await refused_without_append(member, c.create_partitions(request))
            assert response.topics[0].error == code, (name, count)
        dry = pb.CreatePartitionsRequest(
            topics=[pb.PartitionsIncrease(name="t", count=6)], validate_only=True
        )
        response = await refused_without_append(member, c.create_partitions(dry))
        assert response.topics[0].error == E.NONE
        await quorum.close()

    run(body)


def test_cleanup_policy_changes_on_a_live_topic_and_compaction_lags_are_checked_together() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        await live_brokers(c)
        created = await c.create_topics(
            pb.CreateTopicsRequest(
                topics=[
                    Topic(
                        name="t",
                        num_partitions=1,
                        replication_factor=1,
                        configs={"cleanup.policy": "compact"},
                    ),
                    Topic(
                        name="lags",
                        num_partitions=1,
                        replication_factor=1,
                        configs={"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
                    ),
                ]
            )
        )
        assert [(t.error, t.message) for t in created.topics] == [
            (E.NONE, ""),
            (E.INVALID_CONFIG, "min.compaction.lag.ms 10 is larger than max.compaction.lag.ms 5"),
        ]
        assert member.image.configs[(2, "t")] == {"cleanup.policy": "compact"}
        both = pb.AlterConfigOp(name="cleanup.policy", value="delete,compact")
        alter = pb.AlterConfigsRequest(topics=[pb.AlterTopicConfigs(topic="t", ops=[both])])
        assert (await c.alter_configs(alter)).topics[0].error == E.NONE
        assert member.image.configs[(2, "t")] == {"cleanup.policy": "compact,delete"}
        lag = pb.AlterConfigOp(name="max.compaction.lag.ms", value="100")
        assert (
            await c.alter_configs(pb.AlterConfigsRequest(topics=[pb.AlterTopicConfigs(topic="t", ops=[lag])]))
        ).topics[0].error == E.NONE
        below = pb.AlterConfigOp(name="min.compaction.lag.ms", value="101")
        request = pb.AlterConfigsRequest(topics=[pb.AlterTopicConfigs(topic="t", ops=[below])])
        response = await refused_without_append(member, c.alter_configs(request))
        assert response.topics[0].error == E.INVALID_CONFIG
        assert (
            "min.compaction.lag.ms 101 is larger than max.compaction.lag.ms 100" in response.topics[0].message
        )
        await quorum.close()

    run(body)


def test_configs_describe_and_incremental_alter() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        await live_brokers(c)
        await create(c, "t", 1, 2)
        described = await c.describe_configs(pb.DescribeConfigsRequest(topics=["t"]))
        entries = {e.name: (e.value, e.is_default) for e in described.topics[0].entries}
        assert entries["retention.ms"] == ("604800000", True) and len(entries) == len(TOPIC_CONFIGS)
        alter = pb.AlterConfigsRequest(
            topics=[
                pb.AlterTopicConfigs(
                    topic="t",
                    ops=[
                        pb.AlterConfigOp(name="retention.ms", value="1000"),
                        pb.AlterConfigOp(name="min.insync.replicas", value="2"),
                    ],
                )
            ]
        )
        assert (await c.alter_configs(alter)).topics[0].error == E.NONE
        assert member.image.configs[(2, "t")] == {"retention.ms": "1000", "min.insync.replicas": "2"}
        before = log_end(member)
        assert (await c.alter_configs(alter)).topics[0].error == E.NONE
        assert log_end(member) == before, "an alter that changes nothing writes nothing"
        delete = pb.AlterConfigsRequest(
            topics=[
                pb.AlterTopicConfigs(
                    topic="t", ops=[pb.AlterConfigOp(name="retention.ms", op=pb.ALTER_CONFIG_DELETE)]
                )
            ]
        )
        assert (await c.alter_configs(delete)).topics[0].error == E.NONE
        assert member.image.configs[(2, "t")] == {"min.insync.replicas": "2"}
        for topic, op, code in (
            ("t", pb.AlterConfigOp(name="nope", value="1"), E.INVALID_CONFIG),
            ("t", pb.AlterConfigOp(name="nope", op=pb.ALTER_CONFIG_DELETE), E.INVALID_CONFIG),
            ("t", pb.AlterConfigOp(name="segment.bytes", value="12"), E.INVALID_CONFIG),
            ("t", pb.AlterConfigOp(name="min.insync.replicas", value="3"), E.INVALID_CONFIG),
            ("t", pb.AlterConfigOp(name="cleanup.policy", value="shred"), E.INVALID_CONFIG),
            ("t", pb.AlterConfigOp(name="max.compaction.lag.ms", value="0"), E.INVALID_CONFIG),
            ("t", pb.AlterConfigOp(name="retention.ms", value="1", op=7), E.INVALID_REQUEST),
            ("nope", pb.AlterConfigOp(name="retention.ms", value="1"), E.UNKNOWN_TOPIC_OR_PARTITION),
        ):
            request = pb.AlterConfigsRequest(topics=[pb.AlterTopicConfigs(topic=topic, ops=[op])])
            response = await refused_without_append(member, c.alter_configs(request))
            assert response.topics[0].error == code, (topic, op)
        twice = pb.AlterConfigsRequest(
            topics=[pb.AlterTopicConfigs(topic="t", ops=[alter.topics[0].ops[0]] * 2)]
        )
        assert (await refused_without_append(member, c.alter_configs(twice))).topics[
            0
        ].error == E.INVALID_REQUEST
        dry = pb.AlterConfigsRequest(topics=alter.topics, validate_only=True)
        assert (await refused_without_append(member, c.alter_configs(dry))).topics[0].error == E.NONE
        unknown = await c.describe_configs(pb.DescribeConfigsRequest(topics=["nope"]))
        assert unknown.topics[0].error == E.UNKNOWN_TOPIC_OR_PARTITION
        await quorum.close()

    run(body)


def test_broker_configs_per_broker_and_cluster_default_are_altered_incrementally() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        rate = "leader.replication.throttled.rate"
        alter = pb.AlterConfigsRequest(
            brokers=[
                pb.AlterBrokerConfigs(broker="101", ops=[pb.AlterConfigOp(name=rate, value=" 1000 ")]),
                pb.AlterBrokerConfigs(
                    broker="", ops=[pb.AlterConfigOp(name="follower.replication.throttled.rate", value="5")]
                ),
            ]
        )
        response = await c.alter_configs(alter)
        assert [(b.broker, b.error) for b in response.brokers] == [("101", E.NONE), ("", E.NONE)]
        assert member.image.configs[(4, "101")] == {rate: "1000"}
        assert member.image.configs[(4, "")] == {"follower.replication.throttled.rate": "5"}
        before = log_end(member)
        assert (await c.alter_configs(alter)).brokers[0].error == E.NONE
        assert log_end(member) == before, "an alter that changes nothing writes nothing"
        described = await c.describe_configs(pb.DescribeConfigsRequest(brokers=["101", "102"]))
        entries = [{e.name: (e.value, e.is_default) for e in b.entries} for b in described.brokers]
        assert entries[0][rate] == ("1000", False)
        assert entries[1][rate] == (str(2**63 - 1), True)
        for broker, op, code, says in (
            (
                "101",
                pb.AlterConfigOp(name="retention.ms", value="1"),
                E.INVALID_CONFIG,
                "unknown broker config",
            ),
            ("101", pb.AlterConfigOp(name=rate, value="-1"), E.INVALID_CONFIG, "must be at least 0"),
            (
                "one",
                pb.AlterConfigOp(name=rate, value="1"),
                E.INVALID_REQUEST,
                "broker: 'one' is not a broker id",
            ),
            (
                "0101",  # one name per broker: 101 it is
                pb.AlterConfigOp(name=rate, value="1"),
                E.INVALID_REQUEST,
                "broker: '0101' is not a broker id",
            ),
        ):
            request = pb.AlterConfigsRequest(brokers=[pb.AlterBrokerConfigs(broker=broker, ops=[op])])
            response = await refused_without_append(member, c.alter_configs(request))
            assert response.brokers[0].error == code and says in response.brokers[0].message, response
        delete = pb.AlterConfigsRequest(
            brokers=[
                pb.AlterBrokerConfigs(
                    broker="101", ops=[pb.AlterConfigOp(name=rate, op=pb.ALTER_CONFIG_DELETE)]
                )
            ]
        )
        assert (await c.alter_configs(delete)).brokers[0].error == E.NONE
        assert member.image.configs.get((4, "101"), {}) == {}
        await quorum.close()

    run(body)


def commit_request(group: str, *entries: tuple[str, int, int, str]) -> pb.OffsetCommitRequest:
    request = pb.OffsetCommitRequest(group=group)
    for topic, partition, offset, metadata in entries:
        request.topics.add(topic=topic).partitions.add(partition=partition, offset=offset, metadata=metadata)
    return request


def test_offsets_commit_and_fetch() -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        await live_brokers(c)
        await create(c, "t", 2, 1)
        before = log_end(member)
        response = await c.commit_offsets(
            commit_request("g", ("t", 0, 5, "m0"), ("t", 1, 7, ""), ("t", 2, 1, ""))
        )
        assert [p.error for p in response.partitions] == [E.NONE, E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION]
        assert log_end(member) == before + 2, "one record per committed partition, in one batch"
        fetched = await c.fetch_offsets(pb.OffsetFetchRequest(group="g"))
        assert [(o.topic, o.partition, o.offset, o.metadata) for o in fetched.offsets] == [
            ("t", 0, 5, "m0"),
            ("t", 1, 7, ""),
        ]
        wanted = pb.OffsetFetchRequest(
            group="g", topics=[pb.TopicPartitions(topic="t"), pb.TopicPartitions(topic="u", partitions=[0])]
        )
        fetched = await c.fetch_offsets(wanted)
        assert [(o.topic, o.offset, o.error) for o in fetched.offsets] == [
            ("t", 5, E.NONE),
            ("t", 7, E.NONE),
            ("u", -1, E.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        other = await c.fetch_offsets(
            pb.OffsetFetchRequest(group="h", topics=[pb.TopicPartitions(topic="t")])
        )
        assert [o.offset for o in other.offsets] == [-1, -1]
        await quorum.close()

    run(body)


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (commit_request("", ("t", 0, 1, "")), E.INVALID_GROUP_ID),
        (commit_request("g" * 250, ("t", 0, 1, "")), E.INVALID_GROUP_ID),
    ],
)
def test_bad_group_is_refused(request_: pb.OffsetCommitRequest, code: int) -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        await live_brokers(c)
        await create(c, "t", 1, 1)
        response = await refused_without_append(member, c.commit_offsets(request_))
        assert response.status.error == code
        fetched = await c.fetch_offsets(pb.OffsetFetchRequest(group=request_.group))
        assert fetched.status.error == code
        await quorum.close()

    run(body)


@pytest.mark.parametrize(
    ("entry", "code"),
    [
        (("nope", 0, 1, ""), E.UNKNOWN_TOPIC_OR_PARTITION),
        (("t", 1, 1, ""), E.UNKNOWN_TOPIC_OR_PARTITION),
        (("t", -1, 1, ""), E.UNKNOWN_TOPIC_OR_PARTITION),
        (("t", 0, -1, ""), E.INVALID_REQUEST),
        (("t", 0, 1, "x" * 4097), E.OFFSET_METADATA_TOO_LARGE),
    ],
)
def test_bad_offset_commit_appends_nothing(entry: tuple[str, int, int, str], code: int) -> None:
    async def body() -> None:
        quorum, member = await single()
        c = member.controller
        await live_brokers(c)
        await create(c, "t", 1, 1)
        response = await refused_without_append(member, c.commit_offsets(commit_request("g", entry)))
        assert response.partitions[0].error == code
        twice = commit_request("g", ("t", 0, 1, ""), ("t", 0, 2, ""))
        response = await refused_without_append(member, c.commit_offsets(twice))
        assert [p.error for p in response.partitions] == [E.INVALID_REQUEST] * 2
        await quorum.close()

    run(body)
