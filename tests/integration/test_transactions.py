"""Kafka's transactions through Kafka's own clients against ``raftka cluster up``: the
clients are the specification.

- confluent-kafka (librdkafka): a transaction over several partitions of two topics with
  the consumed offsets sent into it, committed; then one aborted (its records written
  and flushed first, so the log holds them), then one more committed. A read_committed
  consumer reads every committed record once, in order, and never an aborted one;
  read_uncommitted reads them all; the group's offsets are the committed transaction's.
- KafkaJS: its transactional producer (``sendOffsets`` + commit, and an abort), then its
  own read_committed consumer in a group.
- raftka's own producer and consumer (its data protocol) with the same API: the same
  three transactions, read back read_committed by raftka's consumer and by librdkafka's.
- A zombie: a second producer with the same ``transactional.id`` fences the first; the
  first's commit fails as fenced and none of its records is visible to read_committed.

One cluster for the module; each test has its own topics and transactional ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.consumer import Consumer as RaftkaConsumer
from raftka.client.producer import Producer as RaftkaProducer
from raftka.client.types import ConsumerGroupMetadata, NewTopic
from raftka.client.types import TopicPartition as RaftkaPartition
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until
from tests.integration.transactions import (
    Record,
    committed_offsets,
    end_offsets,
    keys,
    read_back,
    run_kafkajs,
)

pytestmark = pytest.mark.integration
PARTITIONS = 3
TIMEOUT_S = 60.0
# how librdkafka reports a producer fenced by a newer epoch: its own _FENCED, or the broker's
FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetadataCluster]:
    cluster = MetadataCluster(tmp_path_factory.mktemp("transactions") / "cluster")
    try:
        cluster.up_configured(broker__broker={"group_initial_rebalance_delay_ms": 0})
        yield cluster
    finally:
        cluster.close()


def kafka_bootstrap(cluster: MetadataCluster) -> str:
    return ",".join(n.kafka_address for n in cluster.nodes("broker"))


def create_topics(cluster: MetadataCluster, *names: str) -> None:
    with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30)) as admin:
        for result in admin.create_topics(
            [NewTopic(name, PARTITIONS, 3, {"min.insync.replicas": "2"}) for name in names]
        ):
            result.check()


def every_partition(*topics: str) -> list[tuple[str, int]]:
    return [(t, p) for t in topics for p in range(PARTITIONS)]


def transactional(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    )
    producer.init_transactions(TIMEOUT_S)
    return producer


def tagged(topics: tuple[str, ...], tag: str, per_partition: int) -> list[tuple[str, int, bytes]]:
    """``per_partition`` keys for every partition of ``topics``, each naming where it goes."""
    return [
        (topic, partition, f"{tag}-{topic}-{partition}-{i}".encode())
        for topic, partition in every_partition(*topics)
        for i in range(per_partition)
    ]


def produce_to_each(producer: Producer, topics: tuple[str, ...], tag: str, per_partition: int) -> list[bytes]:
    """``per_partition`` records to every partition of ``topics``; returns their keys."""
    records = tagged(topics, tag, per_partition)
    for topic, partition, key in records:
        producer.produce(topic, key=key, value=key, partition=partition)
    return [key for _, _, key in records]


def plain_records(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, key=f"in-{i}".encode(), value=b"x", partition=i % PARTITIONS)
    assert producer.flush(TIMEOUT_S) == 0


def group_metadata(bootstrap: str, group: str):  # noqa: ANN201
    """The consumer group metadata send_offsets_to_transaction takes, from a consumer of
    ``group`` that never joins it (generation -1, as Kafka accepts for an empty group)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


def in_partition_order(records: list[Record], sent: list[bytes]) -> bool:
    """Each partition's records come in the order they were sent."""
    order = {key: i for i, key in enumerate(sent)}
    by_partition: dict[tuple[str, int], list[int]] = {}
    for r in records:
        by_partition.setdefault((r.topic, r.partition), []).append(order[r.key])
    return all(seq == sorted(seq) for seq in by_partition.values())


def test_confluent_kafka_commits_and_aborts_and_read_committed_sees_each_committed_record_once(
    cluster: MetadataCluster,
) -> None:
    bootstrap = kafka_bootstrap(cluster)
    topics, source, group = ("ck-orders", "ck-payments"), "ck-input", "ck-processor"
    create_topics(cluster, *topics, source)
    plain_records(bootstrap, source, 30)
    metadata = group_metadata(bootstrap, group)
    producer = transactional(bootstrap, "ck-app")

    producer.begin_transaction()
    first = produce_to_each(producer, topics, "committed", 4)
    offsets = [TopicPartition(source, p, 5 + p) for p in range(PARTITIONS)]
    producer.send_offsets_to_transaction(offsets, metadata, TIMEOUT_S)
    producer.commit_transaction(TIMEOUT_S)

    producer.begin_transaction()
    aborted = produce_to_each(producer, topics, "aborted", 3)
    assert producer.flush(TIMEOUT_S) == 0  # in the logs before the abort
    producer.send_offsets_to_transaction(
        [TopicPartition(source, p, 10) for p in range(PARTITIONS)], metadata, TIMEOUT_S
    )
    producer.abort_transaction(TIMEOUT_S)

    producer.begin_transaction()
    last = produce_to_each(producer, topics, "committed-again", 2)
    producer.commit_transaction(TIMEOUT_S)
    producer.flush(TIMEOUT_S)

    committed = first + last
    read = read_back(
        bootstrap, every_partition(*topics), "read_committed", lambda rs: len(rs) >= len(committed)
    )
    assert not set(keys(read)) & set(aborted), "read_committed returned aborted records"
    assert sorted(keys(read)) == sorted(committed), "each committed record exactly once"
    assert in_partition_order(read, committed)

    everything = read_back(
        bootstrap,
        every_partition(*topics),
        "read_uncommitted",
        lambda rs: len(rs) >= len(committed) + len(aborted),
    )
    assert sorted(keys(everything)) == sorted(committed + aborted), (
        "read_uncommitted reads aborted records too"
    )
    assert in_partition_order(everything, first + aborted + last)
    # Kafka's layout of each partition: 4 committed records and the commit marker (0-4),
    # 3 aborted records and the abort marker (5-8), 2 committed and their marker (9-11)
    for topic, partition in every_partition(*topics):
        offsets = [r.offset for r in read if (r.topic, r.partition) == (topic, partition)]
        assert offsets == [0, 1, 2, 3, 9, 10], (topic, partition, offsets)
    assert set(end_offsets(bootstrap, every_partition(*topics)).values()) == {12}

    assert committed_offsets(bootstrap, group, every_partition(source)) == {
        (source, p): 5 + p for p in range(PARTITIONS)
    }, "the group's offsets are the committed transaction's, not the aborted one's"


def test_kafkajs_sends_offsets_commits_aborts_and_reads_committed(cluster: MetadataCluster) -> None:
    bootstrap = kafka_bootstrap(cluster)
    topics, source, group = ("js-orders", "js-payments"), "js-input", "js-processor"
    create_topics(cluster, *topics, source)
    plain_records(bootstrap, source, 12)

    def messages(tag: str, per_partition: int) -> list[dict]:
        return [
            {"topic": t, "partition": p, "key": f"{tag}-{t}-{p}-{i}", "value": f"{tag}-{i}"}
            for t, p in every_partition(*topics)
            for i in range(per_partition)
        ]

    offsets = {
        "group": group,
        "topics": [
            {
                "topic": source,
                "partitions": [{"partition": p, "offset": str(3 + p)} for p in range(PARTITIONS)],
            }
        ],
    }
    first, aborted, last = messages("committed", 3), messages("aborted", 2), messages("committed-again", 2)
    plan = {
        "transactionalId": "kafkajs-app",
        "transactions": [
            {"action": "commit", "messages": first, "offsets": offsets},
            {"action": "abort", "messages": aborted},
            {"action": "commit", "messages": last},
        ],
        "read": {"topics": list(topics), "group": "js-reader", "expect": len(first) + len(last)},
    }
    answer = run_kafkajs(bootstrap, plan)

    wanted = sorted(m["key"] for m in first + last)
    assert sorted(r["key"] for r in answer["read"]) == wanted, "KafkaJS's read_committed consumer"
    read = read_back(bootstrap, every_partition(*topics), "read_committed", lambda rs: len(rs) >= len(wanted))
    assert sorted(r.key.decode() for r in read) == wanted, "librdkafka's read_committed consumer"
    assert committed_offsets(bootstrap, group, every_partition(source)) == {
        (source, p): 3 + p for p in range(PARTITIONS)
    }


def test_raftkas_producer_and_consumer_commit_abort_and_read_committed(cluster: MetadataCluster) -> None:
    data = [n.data_address for n in cluster.nodes("broker")]
    topics, source, group = ("rk-orders", "rk-payments"), "rk-input", "rk-processor"
    create_topics(cluster, *topics, source)

    def send_each(producer: RaftkaProducer, tag: str, per_partition: int) -> list[bytes]:
        records = tagged(topics, tag, per_partition)
        for topic, partition, key in records:
            producer.send(topic, key, key=key, partition=partition)
        return [key for _, _, key in records]

    producer = RaftkaProducer(data, transactional_id="raftka-app")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        first = send_each(producer, "committed", 3)
        offsets = {RaftkaPartition(source, p): 4 + p for p in range(PARTITIONS)}
        producer.send_offsets_to_transaction(offsets, ConsumerGroupMetadata(group))
        producer.commit_transaction()
        producer.begin_transaction()
        aborted = send_each(producer, "aborted", 2)
        producer.flush()  # in the logs before the abort
        producer.abort_transaction()
        producer.begin_transaction()
        last = send_each(producer, "committed-again", 2)
        producer.commit_transaction()
    finally:
        producer.close()

    committed = first + last
    consumer = RaftkaConsumer(data, isolation_level="read_committed", auto_offset_reset="earliest")
    read: list[bytes] = []
    try:
        consumer.assign([RaftkaPartition(t, p) for t, p in every_partition(*topics)])
        # each partition's last committed records come after its aborted ones
        wait_until(lambda: read.extend(r.key for r in consumer.poll(200)) or len(read) >= len(committed),
                   timeout_s=TIMEOUT_S, what="raftka's consumer to read every committed record",
                   detail=lambda: len(read))  # fmt: skip
    finally:
        consumer.close()
    assert sorted(read) == sorted(committed), "raftka's read_committed consumer: each committed record once"
    bootstrap = kafka_bootstrap(cluster)
    seen = read_back(
        bootstrap, every_partition(*topics), "read_committed", lambda rs: len(rs) >= len(committed)
    )
    assert sorted(keys(seen)) == sorted(committed), "librdkafka's read_committed consumer agrees"
    assert not set(read) & set(aborted)
    assert committed_offsets(bootstrap, group, every_partition(source)) == {
        (source, p): 4 + p for p in range(PARTITIONS)
    }


def test_a_zombie_producer_is_fenced_and_none_of_its_records_is_visible(cluster: MetadataCluster) -> None:
    bootstrap = kafka_bootstrap(cluster)
    topic = "zombie-out"
    create_topics(cluster, topic)
    zombie = transactional(bootstrap, "zombie-app")
    zombie.begin_transaction()
    before = produce_to_each(zombie, (topic,), "zombie-before", 2)
    assert zombie.flush(TIMEOUT_S) == 0  # written, in a transaction still open

    successor = transactional(bootstrap, "zombie-app")  # a new epoch: the open transaction is aborted
    successor.begin_transaction()
    kept = produce_to_each(successor, (topic,), "successor", 2)

    after = [key for _, _, key in tagged((topic,), "zombie-after", 1)]
    with pytest.raises(KafkaException) as failed:  # librdkafka may learn it at produce or at commit
        produce_to_each(zombie, (topic,), "zombie-after", 1)
        zombie.commit_transaction(TIMEOUT_S)
    error = failed.value.args[0]
    if not error.fatal():  # a Produce refused INVALID_PRODUCER_EPOCH (Kafka's answer) is abortable
        assert error.txn_requires_abort(), error
        with pytest.raises(KafkaException) as fenced:  # the coordinator then says PRODUCER_FENCED
            zombie.abort_transaction(TIMEOUT_S)
        error = fenced.value.args[0]
    assert error.fatal() and error.code() in FENCED, error

    successor.commit_transaction(TIMEOUT_S)
    read = read_back(bootstrap, every_partition(topic), "read_committed", lambda rs: len(rs) >= len(kept))
    assert sorted(keys(read)) == sorted(kept), "only the successor's records, once each"
    assert not set(keys(read)) & set(before + after)
    everything = read_back(
        bootstrap, every_partition(topic), "read_uncommitted", lambda rs: len(rs) >= len(before + kept)
    )
    assert not set(keys(everything)) & set(after), "a fenced producer's later records are refused, not stored"


def test_perf_transactions_runs_and_reports_both_isolation_levels(cluster: MetadataCluster) -> None:
    """A tiny run of ``raftka perf transactions`` on the module's cluster: every
    transaction committed or aborted as planned, and the read_committed consumer read
    exactly the committed records."""
    out = cluster.raftka(
        "perf", "transactions", "--transactions", "6", "--abort-every", "3", "--partitions", "4",
        "--replication-factor", "3", "--output", "json", timeout_s=180,
    )  # fmt: skip
    report = json.loads(out)
    per = report["records_per_partition"] * report["partitions"]
    assert set(report["producers"]) == {"confluent-kafka", "raftka"}, "both producers on the local cluster"
    for produced in report["producers"].values():
        assert (produced["committed"], produced["aborted"]) == (4, 2)
        assert produced["transactions_per_s"] > 0
    assert report["warmup_transactions"] == 1  # per producer, committed too, before the clock starts
    assert report["read_committed"]["records"] == 2 * 5 * per
    assert report["read_uncommitted"]["records"] == 2 * 7 * per
    assert "read_committed_cost_ratio" in report  # None when a tiny read took no CPU tick
