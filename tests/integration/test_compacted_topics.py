"""A compacted topic on ``raftka cluster up``, written and read by Kafka's own clients:
confluent-kafka produces many values of a few keys and tombstones (one record a batch,
so small segments roll between them), every replica's log cleaner cleans all but the
active segment (waited on by each broker's ``cleaner-offset-checkpoint``), and then
confluent-kafka's consumer and kcat reading from the beginning get exactly the latest
record of each key at its original offset."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from raftka.broker.log import checkpoint
from raftka.broker.log.cleaner.manager import CHECKPOINT_FILE
from raftka.broker.server import PARTITIONS_DIR
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration
TOPIC = "table-changelog"
KEYS = [b"k%d" % i for i in range(4)]
TOMBSTONED = {b"k1", b"k3"}
ROUNDS = 12
VALUE_BYTES = 600  # over half of segment.bytes: a segment rolls before each value

Record = tuple[int, bytes, bytes | None]  # offset, key, value (None: a tombstone)


def value(key: bytes, round_: int) -> bytes:
    return (b"%s=%d;" % (key, round_)).ljust(VALUE_BYTES, b".")


def produce(kafka: str) -> tuple[list[Record], int]:
    """Each key's latest record, and the offset of the last one written (alone in the
    active segment, the only part the cleaner leaves)."""
    producer = Producer({"bootstrap.servers": kafka, "enable.idempotence": True, "linger.ms": 0})
    latest: dict[bytes, Record] = {}

    def send(key: bytes, written: bytes | None) -> None:
        def delivered(error: KafkaError | None, message) -> None:  # noqa: ANN001
            assert error is None, error
            latest[key] = (message.offset(), key, written)

        producer.produce(TOPIC, written, key, partition=0, on_delivery=delivered)
        assert producer.flush(30) == 0  # one record a batch

    for round_ in range(ROUNDS):
        for key in KEYS:
            send(key, None if key in TOMBSTONED and round_ == ROUNDS - 1 else value(key, round_))
    send(b"z", value(b"z", 0))
    return sorted(latest.values()), latest[b"z"][0]


def cleaned_to(data_dir: str) -> int | None:
    """Where a broker's cleaner has cleaned the partition to, by its own checkpoint."""
    path = Path(data_dir) / PARTITIONS_DIR / CHECKPOINT_FILE
    entries = dict(checkpoint.read(path)) if path.exists() else {}
    return entries.get(f"{TOPIC}-0")


def confluent_reads(kafka: str) -> list[Record]:
    consumer = Consumer(
        {
            "bootstrap.servers": kafka,
            "group.id": "reader",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    got: list[Record] = []
    try:
        while True:
            message = consumer.poll(30)
            assert message is not None, f"no end of partition within 30 s; read {got}"
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                return got
            got.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()


def kcat_reads(kafka: str) -> list[Record]:
    done = subprocess.run(
        ["kcat", "-C", "-b", kafka, "-t", TOPIC, "-p", "0", "-o", "beginning", "-e", "-q",
         "-f", "%o\t%k\t%S\t%s\n"],
        capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    got: list[Record] = []
    for line in done.stdout.decode().splitlines():
        offset, key, length, written = line.split("\t")
        got.append((int(offset), key.encode(), None if length == "-1" else written.encode()))
    return got


def test_kafka_clients_read_a_compacted_topic_as_the_latest_record_of_each_key(tmp_path: Path) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up_configured(broker__log_cleaner={"backoff_ms": 100})
        brokers = cluster.nodes("broker")
        kafka = ",".join(b.kafka_address for b in brokers)
        configs = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"}
        admin = AdminClient({"bootstrap.servers": kafka})  # kept: a collected client cancels its calls
        admin.create_topics([NewTopic(TOPIC, 1, len(brokers), config=configs)])[TOPIC].result(30)
        expected, last = produce(kafka)

        wait_until(
            lambda: all(cleaned_to(b.data_dir) == last for b in brokers),
            timeout_s=120,
            what=f"every replica's cleaner to clean {TOPIC}-0 up to its active segment at {last}",
            detail=lambda: {b.id: cleaned_to(b.data_dir) for b in brokers},
        )
        assert confluent_reads(kafka) == expected
        assert kcat_reads(kafka) == expected
    finally:
        cluster.close()
