"""SASL/SCRAM on ``raftka cluster up``'s Kafka listeners (``kafka.sasl_mechanisms``, no TLS:
Kafka's SASL_PLAINTEXT): ``raftka users add`` writes a credential through the quorum,
every broker replays it, confluent-kafka logs in with SCRAM-SHA-512 and kafka-python with
SCRAM-SHA-256 to produce and consume, a wrong password is refused, and ``raftka users
delete`` takes a mechanism's login away on every broker."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from kafka import KafkaConsumer, KafkaProducer

from tests.integration.metadata_cluster import RAFTKA, MetadataCluster
from tests.integration.polling import wait_until
from tests.unit.kafka_wire import scram_login_error

pytestmark = pytest.mark.integration
SHA256, SHA512 = "SCRAM-SHA-256", "SCRAM-SHA-512"
PASSWORD = "correct horse battery staple"
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    cluster = MetadataCluster(tmp_path_factory.mktemp("sasl") / "cluster")
    try:
        cluster.up_configured(broker__kafka={"sasl_mechanisms": f"{SHA512},{SHA256}"})
        yield cluster
    finally:
        cluster.close()


def users(cluster: MetadataCluster, *args: str, stdin: str = "") -> str:
    done = subprocess.run(
        [*RAFTKA, "users", *args, "--dir", str(cluster.dir)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, f"raftka users {' '.join(args)} failed: {done.stderr.strip()}"
    return done.stdout


def brokers_accepting(cluster: MetadataCluster, mechanism: str, user: str, password: str) -> int:
    return sum(
        scram_login_error(b.kafka_address, mechanism, user, password) == 0 for b in cluster.nodes("broker")
    )


def test_users_added_with_raftka_log_in_with_kafkas_clients(cluster: MetadataCluster) -> None:
    brokers = len(cluster.nodes("broker"))
    bootstrap = ",".join(b.kafka_address for b in cluster.nodes("broker"))
    users(cluster, "add", "alice", "--password-stdin", stdin=PASSWORD + "\n")
    listed = json.loads(users(cluster, "list", "--output", "json"))
    assert [(u["user"], u["mechanism"], u["iterations"]) for u in listed] == [
        ("alice", SHA256, 8192),
        ("alice", SHA512, 8192),
    ]
    for mechanism in (SHA256, SHA512):
        wait_until(
            lambda m=mechanism: brokers_accepting(cluster, m, "alice", PASSWORD) == brokers,
            timeout_s=TIMEOUT_S,
            what=f"every broker to take alice's {mechanism} login",
        )
    topic = f"logged-in-{uuid.uuid4().hex[:8]}"

    confluent = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": SHA512,
        "sasl.username": "alice",
        "sasl.password": PASSWORD,
    }
    producer = Producer(confluent)
    producer.produce(topic, b"from-confluent")
    assert producer.flush(TIMEOUT_S) == 0

    kafka_python = {
        "bootstrap_servers": bootstrap.split(","),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": SHA256,
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORD,
    }
    sent = KafkaProducer(**kafka_python)
    sent.send(topic, b"from-kafka-python").get(timeout=TIMEOUT_S)
    sent.close()

    reader = KafkaConsumer(topic, **kafka_python, group_id="sasl-readers", auto_offset_reset="earliest")
    seen: list[bytes] = []
    wait_until(
        lambda: (
            seen.extend(r.value for b in reader.poll(timeout_ms=500).values() for r in b) or len(seen) >= 2
        ),
        timeout_s=TIMEOUT_S,
        what="kafka-python to read both records",
    )
    reader.close()
    consumer = Consumer({**confluent, "group.id": "sasl-confluent", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read: list[bytes] = []
    wait_until(
        lambda: _read_one(consumer, read) and len(read) >= 2,
        timeout_s=TIMEOUT_S,
        what="confluent-kafka to read both records",
    )
    consumer.close()
    assert sorted(seen) == sorted(read) == [b"from-confluent", b"from-kafka-python"]

    refused: list[KafkaError] = []
    wrong = Producer({**confluent, "sasl.password": "wrong", "error_cb": refused.append})
    wait_until(lambda: wrong.poll(0.1) >= 0 and refused, timeout_s=TIMEOUT_S, what="a refusal")
    assert refused[0].code() == KafkaError._AUTHENTICATION

    users(cluster, "delete", "alice", "--mechanism", SHA256)
    wait_until(
        lambda: brokers_accepting(cluster, SHA256, "alice", PASSWORD) == 0,
        timeout_s=TIMEOUT_S,
        what="every broker to refuse alice's deleted SCRAM-SHA-256 login",
    )
    assert brokers_accepting(cluster, SHA512, "alice", PASSWORD) == brokers


def _read_one(consumer: Consumer, into: list[bytes]) -> bool:
    message = consumer.poll(0.5)
    if message is not None and message.error() is None:
        into.append(message.value())
    return True
