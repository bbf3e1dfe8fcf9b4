"""``raftka cluster up --tls`` end to end: every command finds the client certificate by
itself, an ordinary user's certificate (made with the cluster's CA) is refused admin
operations until an ACL allows them, clients the cluster does not trust get nothing,
no client certificate fetches as a follower, Kafka's own clients work over SSL, their
admin requests judged as themselves when a broker forwards them, and the probes,
benchmarks and fault injection (health, perf, chaos) work as well, with small counts."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as KafkaNewTopic
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from raftka.command import local
from raftka.security.certs import BROKER_UNIT, CLIENT_UNIT, Authority
from raftka.security.tls import TlsFiles, aio_channel
from raftka.v1 import broker_pb2, broker_pb2_grpc, controller_pb2
from raftka.wire.client import BrokerClient
from tests.integration.metadata_cluster import RAFTKA, UP_TIMEOUT_S, MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration
ALICE = "User:CN=alice,OU=client,O=raftka"
TIMEOUT_S = 60
ENTRYPOINT = Path(__file__).resolve().parents[2] / "deploy" / "raftka-node.sh"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    cluster = MetadataCluster(tmp_path_factory.mktemp("tls") / "cluster")
    try:
        up = json.loads(cluster.raftka("cluster", "up", "--tls", "--output", "json", timeout_s=UP_TIMEOUT_S))
        assert up["tls"] is True
        yield cluster
    finally:
        cluster.close()


def raftka(cluster: MetadataCluster, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RAFTKA, *args, "--dir", str(cluster.dir)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def ok(cluster: MetadataCluster, *args: str, stdin: str = "") -> str:
    done = raftka(cluster, *args, stdin=stdin)
    assert done.returncode == 0, f"raftka {' '.join(args)} failed: {done.stderr.strip()}"
    return done.stdout


def as_json(cluster: MetadataCluster, *args: str) -> object:
    return json.loads(ok(cluster, *args, "--output", "json"))


def alice(cluster: MetadataCluster) -> list[str]:
    """Flags presenting alice's certificate, signed by the cluster's own CA."""
    certs = local.load(cluster.dir).certs_dir()
    if not (certs / "alice.crt").exists():
        authority = Authority(
            x509.load_pem_x509_certificate((certs / "ca.crt").read_bytes()),
            load_pem_private_key((certs / "ca.key").read_bytes(), password=None),
        )
        issued = authority.issue("alice", CLIENT_UNIT)
        (certs / "alice.crt").write_bytes(issued.cert_pem)
        (certs / "alice.key").write_bytes(issued.key_pem)
    return [
        "--tls-ca",
        str(certs / "ca.crt"),
        "--tls-cert",
        str(certs / "alice.crt"),
        "--tls-key",
        str(certs / "alice.key"),
    ]


def kafka_ssl(cluster: MetadataCluster, name: str = "admin") -> dict[str, str]:
    certs = local.load(cluster.dir).certs_dir()
    return {
        "bootstrap.servers": ",".join(local.load(cluster.dir).kafka_addresses()),
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs / "ca.crt"),
        "ssl.certificate.location": str(certs / f"{name}.crt"),
        "ssl.key.location": str(certs / f"{name}.key"),
    }


def test_every_command_works_with_the_local_clusters_certificate(cluster: MetadataCluster) -> None:
    ok(cluster, "topics", "create", "orders", "--partitions", "2", "--replication-factor", "3")
    assert "orders" in [t["name"] for t in as_json(cluster, "topics", "list")]
    assert len(as_json(cluster, "topics", "describe", "orders")[0]["partitions"]) == 2
    ok(cluster, "configs", "alter", "--topic", "orders", "--set", "retention.ms=3600000")
    ok(cluster, "produce", "orders", stdin="one\ntwo\nthree\n")
    printed = ok(
        cluster, "consume", "orders", "--from-beginning", "--max-messages", "3", "--group", "readers"
    )
    assert sorted(printed.split()) == ["one", "three", "two"]
    assert "readers" in [g["group"] for g in as_json(cluster, "groups", "list")]
    ok(cluster, "groups", "describe", "readers")
    ok(
        cluster,
        "groups",
        "reset-offsets",
        "--group",
        "readers",
        "--topic",
        "orders",
        "--to-earliest",
        "--execute",
    )
    ok(cluster, "offsets", "list", "orders")
    ok(cluster, "quorum", "describe", "--status")
    assert len(as_json(cluster, "brokers", "list")) == 3
    ok(
        cluster,
        "offsets",
        "commit",
        "--group",
        "tools",
        "--topic",
        "orders",
        "--partition",
        "0",
        "--offset",
        "1",
    )
    assert as_json(cluster, "offsets", "fetch", "--group", "tools")["offsets"][0]["offset"] == 1
    ok(cluster, "topics", "alter", "orders", "--partitions", "3")
    ok(cluster, "topics", "elect-leaders", "orders")
    assert all(n["alive"] for n in as_json(cluster, "cluster", "status")["nodes"])
    ok(cluster, "groups", "delete", "readers")
    ok(cluster, "topics", "delete", "orders")
    assert "orders" not in [t["name"] for t in as_json(cluster, "topics", "list")]


def test_an_ordinary_user_is_refused_admin_operations_until_an_acl_allows_them(
    cluster: MetadataCluster,
) -> None:
    ok(cluster, "topics", "create", "payments", "--partitions", "1", "--replication-factor", "3")
    refused = raftka(cluster, "topics", "delete", "payments", *alice(cluster))
    assert refused.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in refused.stderr
    assert ALICE in refused.stderr
    assert "payments" in [t["name"] for t in as_json(cluster, "topics", "list")]
    assert "payments" not in [
        t["name"] for t in as_json(cluster, "topics", "list", *alice(cluster))
    ]  # a listing holds only the topics alice may DESCRIBE: none
    ok(cluster, "produce", "payments", stdin="paid\n")
    ok(cluster, "consume", "payments", "--from-beginning", "--max-messages", "1", "--group", "payers")
    reset = (
        "groups",
        "reset-offsets",
        "--group",
        "payers",
        "--topic",
        "payments",
        "--to-earliest",
        "--execute",
    )
    refused = raftka(cluster, *reset, *alice(cluster))  # through a broker: judged as alice
    assert refused.returncode == 1 and "GROUP_AUTHORIZATION_FAILED" in refused.stderr
    refused = raftka(cluster, "groups", "delete", "payers", *alice(cluster))
    assert refused.returncode == 1 and "GROUP_AUTHORIZATION_FAILED" in refused.stdout
    assert "payers" in [g["group"] for g in as_json(cluster, "groups", "list")]
    create = (
        "topics",
        "create",
        "alice-orders",
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        *alice(cluster),
    )
    assert "TOPIC_AUTHORIZATION_FAILED" in raftka(cluster, *create).stderr
    assert "CLUSTER_AUTHORIZATION_FAILED" in raftka(cluster, "acls", "list", *alice(cluster)).stderr

    grant = (
        "--allow-principal",
        ALICE,
        "--operation",
        "Create",
        "--topic",
        "alice-",
        "--resource-pattern-type",
        "prefixed",
    )
    ok(cluster, "acls", "add", *grant)
    listed = as_json(cluster, "acls", "list", "--principal", ALICE)
    assert [(a["operation"], a["resource_name"], a["pattern_type"]) for a in listed] == [
        ("CREATE", "alice-", "PREFIXED")
    ]
    ok(cluster, *create)
    assert (
        "TOPIC_AUTHORIZATION_FAILED"
        in raftka(cluster, "topics", "delete", "alice-orders", *alice(cluster)).stderr
    )

    removed = as_json(
        cluster,
        "acls",
        "remove",
        "--allow-principal",
        ALICE,
        "--topic",
        "alice-",
        "--resource-pattern-type",
        "prefixed",
    )
    assert len(removed) == 1 and as_json(cluster, "acls", "list") == []
    again = (
        "topics",
        "create",
        "alice-more",
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        *alice(cluster),
    )
    assert "TOPIC_AUTHORIZATION_FAILED" in raftka(cluster, *again).stderr


def test_a_client_without_the_clusters_certificate_gets_nothing(
    cluster: MetadataCluster, tmp_path: Path
) -> None:
    address = local.load(cluster.dir).addresses()[0]
    plaintext = subprocess.run(
        [
            *RAFTKA,
            "topics",
            "list",
            "--bootstrap-controller",
            address,
            "--timeout-s",
            "2",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert plaintext.returncode == 1 and "UNAVAILABLE" in plaintext.stderr
    other = tmp_path / "other"
    subprocess.run([*RAFTKA, "certs", "init", str(other)], check=True, capture_output=True, timeout=TIMEOUT_S)
    foreign = [
        "--tls-ca",
        str(other / "ca.crt"),
        "--tls-cert",
        str(other / "admin.crt"),
        "--tls-key",
        str(other / "admin.key"),
    ]
    refused = raftka(cluster, "topics", "list", "--timeout-s", "2", *foreign)
    assert refused.returncode == 1 and "UNAVAILABLE" in refused.stderr


def test_kafka_clients_use_ssl_and_their_admin_requests_are_judged_as_themselves(
    cluster: MetadataCluster,
) -> None:
    admin = AdminClient(kafka_ssl(cluster))
    admin.create_topics([KafkaNewTopic("kafka-tls", num_partitions=1, replication_factor=3)])[
        "kafka-tls"
    ].result(30)
    producer = Producer(kafka_ssl(cluster))
    for i in range(3):
        producer.produce("kafka-tls", value=f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(kafka_ssl(cluster) | {"group.id": "kafka-readers", "auto.offset.reset": "earliest"})
    consumer.subscribe(["kafka-tls"])
    values = []
    try:
        while len(values) < 3:
            message = consumer.poll(30)
            assert message is not None and message.error() is None, message and message.error()
            values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"v0", b"v1", b"v2"]

    ok(cluster, "topics", "list", *alice(cluster))  # makes alice's certificate
    as_alice = AdminClient(kafka_ssl(cluster, "alice"))
    with pytest.raises(KafkaException) as refused:
        as_alice.delete_topics(["kafka-tls"])["kafka-tls"].result(30)
    assert (
        refused.value.args[0].code() == 29
    )  # TOPIC_AUTHORIZATION_FAILED: judged as alice, not as the broker
    assert "kafka-tls" in [t["name"] for t in as_json(cluster, "topics", "list")]


def test_health_perf_and_chaos_present_the_clusters_certificate(cluster: MetadataCluster) -> None:
    nodes = local.load(cluster.dir)
    for node in (nodes.controllers()[0], nodes.brokers()[0]):
        assert ok(cluster, "health", node.address).strip() == f"{node.address}: SERVING"
    metadata = ok(cluster, "perf", "metadata", "--concurrency", "2", "--duration", "0.3", "--warmup", "0")
    assert "Active controller: 127.0.0.1:" in metadata
    assert "stable" in ok(cluster, "perf", "stability", "--duration", "1")

    records = ("--records", "200", "--topic", "perf-tls")
    produced = as_json(cluster, "perf", "kafka", *records, "--partitions", "2", "--record-size", "64")
    assert (produced["delivered"], produced["errors"]) == (200, 0)
    consumed = as_json(cluster, "perf", "kafka-consume", *records, "--timeout-s", "30")
    assert (consumed["records"], consumed["errors"]) == (200, 0)

    chaos = as_json(cluster, "chaos", "kill-leader", "--rounds", "1", "--until", "offset-commit")
    assert chaos["summary"]["rounds"] == 1 and chaos["rounds"][0]["commit_ms"] is not None
    broker = as_json(cluster, "chaos", "kill-broker", "--rate", "100", "--group-consumers", "1")
    assert broker["summary"]["lost"] == 0 and broker["summary"]["acknowledged"] > 0


def test_the_kubernetes_readiness_probe_asks_with_the_nodes_own_certificate(
    cluster: MetadataCluster, tmp_path: Path
) -> None:
    """``raftka-node health`` as deploy/k8s runs it: RAFTKA_TLS_DIR holds ``raftka certs init``'s
    files and the node presents its own certificate: SERVING. Without it, plaintext: refused."""
    nodes = local.load(cluster.dir)
    for node in (nodes.controllers()[0], nodes.brokers()[0]):
        host, port = node.address.rsplit(":", 1)
        env = {
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "RAFTKA_ROLE": node.role,
            "RAFTKA_NODE_ID": str(node.id),
            "RAFTKA_HOST": host,
            "RAFTKA_GRPC_PORT": port,
        }
        served = probe(tmp_path, {**env, "RAFTKA_TLS_DIR": str(nodes.certs_dir())})
        assert (served.returncode, served.stdout.strip()) == (0, f"{node.address}: SERVING"), served.stderr
        assert probe(tmp_path, env).returncode == 1, "a TLS node answers no plaintext probe"


def probe(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``raftka-node health`` in ``cwd``, where no local cluster offers a certificate."""
    return subprocess.run(
        ["sh", str(ENTRYPOINT), "health"], env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def test_a_client_certificate_cannot_fetch_as_a_follower(cluster: MetadataCluster) -> None:
    """Alice's certificate and the super user's, with a follower's real broker epoch, over the
    leader's data listener and its gRPC Broker service: refused, nothing read; the real
    followers, with their own certificates, go on replicating."""
    ok(cluster, "topics", "create", "replicated", "--partitions", "1", "--replication-factor", "3")
    ok(cluster, "produce", "replicated", stdin="first\n")
    partition = as_json(cluster, "topics", "describe", "replicated")[0]["partitions"][0]
    brokers = {b["id"]: b for b in as_json(cluster, "brokers", "list")}
    leader = brokers[partition["leader"]]
    follower = next(r for r in partition["replicas"] if r != partition["leader"])
    grpc_address = next(e.partition("://")[2] for e in leader["listeners"] if e.startswith("GRPC://"))
    request = broker_pb2.FetchRequest(
        replica_id=follower, replica_epoch=brokers[follower]["epoch"], max_bytes=1 << 20
    )
    request.topics.add(name="replicated").partitions.add(
        partition=0, fetch_offset=0, last_fetched_epoch=-1, partition_max_bytes=1 << 20
    )
    alice(cluster)  # makes alice's certificate
    certs = local.load(cluster.dir).certs_dir()

    async def fetch_as(name: str) -> list[broker_pb2.FetchResponse]:
        tls = TlsFiles(certs / "ca.crt", certs / f"{name}.crt", certs / f"{name}.key")
        client = BrokerClient(leader["address"], tls=tls.client_ssl)
        try:
            over_data = await client.Fetch(request, timeout=TIMEOUT_S)
        finally:
            client.close()
        async with aio_channel(grpc_address, tls) as channel:
            over_grpc = await broker_pb2_grpc.BrokerStub(channel).Fetch(request, timeout=TIMEOUT_S)
        return [over_data, over_grpc]

    for name in ("alice", "admin"):
        for answer in asyncio.run(fetch_as(name)):
            assert answer.status.error == controller_pb2.CLUSTER_AUTHORIZATION_FAILED, answer.status
            assert f"replica_id {follower}" in answer.status.message and not answer.topics

    ok(cluster, "produce", "replicated", stdin="second\n")  # acks=all: the followers still replicate
    printed = ok(cluster, "consume", "replicated", "--from-beginning", "--max-messages", "2")
    assert printed.split() == ["first", "second"]
    assert sorted(as_json(cluster, "topics", "describe", "replicated")[0]["partitions"][0]["isr"]) == sorted(
        partition["replicas"]
    )


def test_a_broker_serves_a_rotated_certificate_without_a_restart(cluster: MetadataCluster) -> None:
    """broker-101's key and certificate replaced in place, as an operator or a Kubernetes
    secret rotates them: new connections to each of its listeners get the new certificate
    within the reload interval, and the cluster serves on with it."""
    certs = local.load(cluster.dir).certs_dir()
    authority = Authority(
        x509.load_pem_x509_certificate((certs / "ca.crt").read_bytes()),
        load_pem_private_key((certs / "ca.key").read_bytes(), password=None),
    )
    broker = next(b for b in as_json(cluster, "brokers", "list") if b["id"] == 101)  # type: ignore[union-attr]
    addresses = [e.partition("://")[2] for e in broker["listeners"]]
    assert len(addresses) == 3, broker["listeners"]  # data, gRPC and Kafka
    admin = TlsFiles(certs / "ca.crt", certs / "admin.crt", certs / "admin.key").client_ssl
    before = {address: served_serial(address, admin) for address in addresses}

    issued = authority.issue("broker-101", BROKER_UNIT)
    for name, data in (("broker-101.key", issued.key_pem), ("broker-101.crt", issued.cert_pem)):
        (certs / f"{name}.new").write_bytes(data)
        os.replace(certs / f"{name}.new", certs / name)  # each file whole, as a secret's swap
    rotated = x509.load_pem_x509_certificate(issued.cert_pem).serial_number
    assert rotated not in before.values()
    for address in addresses:
        wait_until(
            lambda address=address: served_serial(address, admin) == rotated,
            timeout_s=TIMEOUT_S,
            what=f"broker 101 to serve its new certificate on {address}",
            detail=lambda address=address: served_serial(address, admin),
        )
    ok(cluster, "topics", "create", "after-rotation", "--partitions", "3", "--replication-factor", "3")
    ok(cluster, "produce", "after-rotation", stdin="a\nb\nc\n")
    printed = ok(cluster, "consume", "after-rotation", "--from-beginning", "--max-messages", "3")
    assert sorted(printed.split()) == ["a", "b", "c"]


def served_serial(address: str, context: ssl.SSLContext) -> int:
    """The serial number of the certificate a new TLS connection to ``address`` is shown."""
    host, _, port = address.rpartition(":")
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_every_nodes_metrics_are_served_over_https_to_a_certificate_of_the_cluster(
    cluster: MetadataCluster,
) -> None:
    """A --tls cluster served its metrics in plaintext to anyone."""
    made = local.load(cluster.dir)
    client = made.client_tls()
    assert client is not None
    for node in made.nodes:
        url = f"https://{node.metrics_address}/metrics"
        with urllib.request.urlopen(url, timeout=5, context=client.client_ssl) as answer:
            assert answer.status == 200
            assert b"kafka_server_raft_metrics_current_leader" in answer.read()
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            urllib.request.urlopen(f"http://{node.metrics_address}/metrics", timeout=5)
        without = ssl.create_default_context(cafile=str(client.ca))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError, http.client.HTTPException)):
            urllib.request.urlopen(url, timeout=5, context=without).read()
