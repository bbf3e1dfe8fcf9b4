"""SASL/SCRAM on ``raftka cluster up --tls``'s Kafka listeners (``kafka.sasl_mechanisms``:
Kafka's SASL_SSL; SASL without TLS is refused at start): ``raftka users add`` writes a
credential through the quorum, every broker replays it, confluent-kafka logs in with
SCRAM-SHA-512 and kafka-python with SCRAM-SHA-256 to produce and consume what ACLs allow
the login, a login with no ACL is refused deleting a topic and granting itself ACLs (issue
29, finding 2), a wrong password is refused, and ``raftka users delete`` takes a
mechanism's login away on every broker. Then, on a cluster with TLS and
SASL on the data listeners (``broker.data_sasl_mechanisms``), ``raftka produce`` and
``consume`` log in from ``--command-config`` while the brokers replicate over the same
listeners with their certificates (the records are read back only once followers have
fetched them: acks=all and the high watermark)."""

from __future__ import annotations

import json
import ssl
import subprocess
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer

from raftka.command import local
from tests.integration.metadata_cluster import RAFTKA, UP_TIMEOUT_S, MetadataCluster
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
        cluster.raftka("cluster", "up", "--tls", "--output", "json", timeout_s=UP_TIMEOUT_S)
        cluster.down()
        cluster.configure("broker", "kafka", sasl_mechanisms=f"{SHA512},{SHA256}")
        cluster.up()
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


def ca_file(cluster: MetadataCluster) -> str:
    return str(local.load(cluster.dir).certs_dir() / "ca.crt")


def brokers_accepting(cluster: MetadataCluster, mechanism: str, user: str, password: str) -> int:
    tls = ssl.create_default_context(cafile=ca_file(cluster))
    return sum(
        scram_login_error(b.kafka_address, mechanism, user, password, tls) == 0 for b in cluster.nodes("broker")
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
    # the authorizer judges the login's principal: alice may use her topics and groups
    cluster.raftka("acls", "add", "--allow-principal", "User:alice", "--operation", "All", "--topic",
                   "logged-in-", "--resource-pattern-type", "prefixed", timeout_s=TIMEOUT_S)  # fmt: skip
    cluster.raftka("acls", "add", "--allow-principal", "User:alice", "--operation", "Read", "--group",
                   "sasl-", "--resource-pattern-type", "prefixed", timeout_s=TIMEOUT_S)  # fmt: skip

    confluent = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": ca_file(cluster),
        "sasl.mechanisms": SHA512,
        "sasl.username": "alice",
        "sasl.password": PASSWORD,
    }
    producer = Producer(confluent)
    producer.produce(topic, b"from-confluent")
    assert producer.flush(TIMEOUT_S) == 0

    kafka_python = {
        "bootstrap_servers": bootstrap.split(","),
        "security_protocol": "SASL_SSL",
        "ssl_cafile": ca_file(cluster),
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
    assert_a_login_without_acls_is_refused(cluster, confluent, topic)

    assert _refusal({**confluent, "sasl.password": "wrong"}).code() == KafkaError._AUTHENTICATION

    users(cluster, "delete", "alice", "--mechanism", SHA256)
    wait_until(
        lambda: brokers_accepting(cluster, SHA256, "alice", PASSWORD) == 0,
        timeout_s=TIMEOUT_S,
        what="every broker to refuse alice's deleted SCRAM-SHA-256 login",
    )
    assert brokers_accepting(cluster, SHA512, "alice", PASSWORD) == brokers


def assert_a_login_without_acls_is_refused(cluster: MetadataCluster, confluent: dict[str, str], topic: str) -> None:
    """mallory logs in but holds no ACL: she can neither delete alice's topic nor grant
    herself everything on the cluster, and nothing changes."""
    users(cluster, "add", "mallory", "--mechanism", SHA512, "--password-stdin", stdin=PASSWORD)
    wait_until(
        lambda: brokers_accepting(cluster, SHA512, "mallory", PASSWORD) == len(cluster.nodes("broker")),
        timeout_s=TIMEOUT_S,
        what="every broker to take mallory's login",
    )
    mallory = AdminClient({**confluent, "sasl.username": "mallory"})
    deleted = mallory.delete_topics([topic], operation_timeout=10)[topic]
    with pytest.raises(KafkaException) as refused:
        deleted.result(timeout=TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused.value
    everything = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:mallory",
                            "*", AclOperation.ALL, AclPermissionType.ALLOW)  # fmt: skip
    granted = mallory.create_acls([everything])[everything]
    with pytest.raises(KafkaException) as refused:
        granted.result(timeout=TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, refused.value
    assert topic in cluster.raftka("topics", "list", timeout_s=TIMEOUT_S)
    assert "mallory" not in cluster.raftka("acls", "list", timeout_s=TIMEOUT_S)


def _refusal(config: dict[str, str]) -> KafkaError:
    """The first error a producer logging in with ``config`` reports; the producer is dropped
    on return (librdkafka would log in again and again while it lives)."""
    refused: list[KafkaError] = []
    producer = Producer({**config, "error_cb": refused.append})
    wait_until(lambda: producer.poll(0.1) >= 0 and len(refused) > 0, timeout_s=TIMEOUT_S, what="a refusal")
    return refused[0]


def _read_one(consumer: Consumer, into: list[bytes]) -> bool:
    message = consumer.poll(0.5)
    if message is not None and message.error() is None:
        into.append(message.value())
    return True


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    cluster = MetadataCluster(tmp_path_factory.mktemp("sasl-tls") / "cluster")
    try:
        cluster.raftka("cluster", "up", "--tls", "--output", "json", timeout_s=UP_TIMEOUT_S)
        cluster.down()
        cluster.configure("broker", "broker", data_sasl_mechanisms=SHA512)
        cluster.up()
        yield cluster
    finally:
        cluster.close()


def test_raftkas_own_clients_log_in_on_data_listeners_that_brokers_replicate_over(
    tls_cluster: MetadataCluster, tmp_path: Path
) -> None:
    users(tls_cluster, "add", "alice", "--mechanism", SHA512, "--password-stdin", stdin=PASSWORD)
    certs = local.load(tls_cluster.dir).certs_dir()
    config = tmp_path / "alice.toml"
    config.write_text(
        f'[tls]\nca = "{certs / "ca.crt"}"\ncert = "{certs / "admin.crt"}"\nkey = "{certs / "admin.key"}"\n'
        f'\n[sasl]\nmechanism = "{SHA512}"\nusername = "alice"\npassword = "{PASSWORD}"\n',
        encoding="utf-8",
    )
    tls_cluster.raftka(
        "topics",
        "create",
        "replicated",
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        timeout_s=TIMEOUT_S,
    )
    # a TLS cluster judges every API by ACLs: alice logs in as User:alice, who needs rights
    tls_cluster.raftka("acls", "add", "--allow-principal", "User:alice", "--operation", "Write",
                       "--operation", "Read", "--topic", "replicated", timeout_s=TIMEOUT_S)  # fmt: skip
    login = ["--command-config", str(config)]
    records = "".join(f"record-{i}\n" for i in range(10))

    def produced() -> bool:  # until every broker has replayed alice's credential
        done = subprocess.run(
            [*RAFTKA, "produce", "replicated", *login, "--timeout-s", "15", "--dir", str(tls_cluster.dir)],
            input=records,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        return done.returncode == 0

    wait_until(produced, timeout_s=TIMEOUT_S, what="raftka produce to log in and write with acks=all")
    read = tls_cluster.raftka(
        "consume", "replicated", *login, "--from-beginning", "--max-messages", "10", timeout_s=TIMEOUT_S
    )
    assert read.splitlines()[:10] == [f"record-{i}" for i in range(10)]
    without_login = subprocess.run(
        [*RAFTKA, "produce", "replicated", "--timeout-s", "5", "--dir", str(tls_cluster.dir)],
        input="x\n",
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert without_login.returncode != 0, "the admin certificate alone is not a login"
    assert "UNAVAILABLE" in without_login.stderr, without_login.stderr
