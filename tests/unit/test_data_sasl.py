"""SASL on the data listener (``broker.data_sasl_mechanisms``, with TLS), against one real
broker in this process: raftka's Producer and Consumer log in with ``sasl=`` and produce
and consume; a client that does not log in gets nothing; a wrong password is refused with
SASL_AUTHENTICATION_FAILED; PLAIN works over the listener's TLS; a broker's certificate
needs no login (followers replicate over this listener)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftka.cli.main import build_parser, main
from raftka.client import Consumer, Producer, TopicPartition
from raftka.command.errors import CliError
from raftka.command.tls_args import client_sasl
from raftka.node.config import BrokerConfig
from raftka.security.sasl import PLAIN, SaslCredentials
from raftka.v1 import broker_pb2
from raftka.wire.client import BrokerClient, WireError
from tests.unit.kafka_wire import BrokerThread, broker_thread
from tests.unit.test_kafka_sasl import TOPIC, with_users
from tests.unit.tls_support import Certs, make_certs

ALICE = SaslCredentials("alice", "alice-secret")


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return make_certs(tmp_path / "certs")


@pytest.fixture
def broker(tmp_path: Path, certs: Certs) -> Iterator[BrokerThread]:
    config = BrokerConfig(data_sasl_mechanisms="SCRAM-SHA-512,SCRAM-SHA-256,PLAIN")
    with broker_thread(tmp_path / "broker", {TOPIC: 1}, broker_config=config, tls=certs.broker) as served:
        with_users(served, alice="alice-secret")
        yield served


def metadata(broker: BrokerThread, tls: object, sasl: SaslCredentials | None) -> broker_pb2.MetadataResponse:
    async def ask() -> broker_pb2.MetadataResponse:
        client = BrokerClient(broker.broker.address, tls=tls, sasl=sasl)  # type: ignore[arg-type]
        try:
            return await client.Metadata(broker_pb2.MetadataRequest(), timeout=5)
        finally:
            client.close()

    return broker.run(ask())


def test_raftkas_clients_log_in_produce_and_consume(broker: BrokerThread, certs: Certs) -> None:
    producer = Producer(broker.broker.address, tls=certs.alice, sasl=ALICE)
    producer.send(TOPIC, b"hello").result(30)
    producer.close()
    consumer = Consumer(broker.broker.address, tls=certs.alice, sasl=ALICE, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(TOPIC, 0)])
    read: list[bytes | None] = []
    for _ in range(100):  # until the record comes back
        read += [r.value for r in consumer.poll(timeout_ms=200)]
        if read:
            break
    consumer.close()
    assert read == [b"hello"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", PLAIN])
def test_every_mechanism_offered_logs_in(broker: BrokerThread, certs: Certs, mechanism: str) -> None:
    answer = metadata(broker, certs.alice.client_ssl, SaslCredentials("alice", "alice-secret", mechanism))
    assert [t.name for t in answer.topics] == [TOPIC]


def test_a_client_certificate_without_a_login_gets_nothing(broker: BrokerThread, certs: Certs) -> None:
    with pytest.raises(WireError) as refused:
        metadata(broker, certs.alice.client_ssl, None)
    assert refused.value.code == "UNAVAILABLE"  # the broker closed the connection


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", PLAIN])
def test_a_wrong_password_is_refused(broker: BrokerThread, certs: Certs, mechanism: str) -> None:
    with pytest.raises(WireError) as refused:
        metadata(broker, certs.alice.client_ssl, SaslCredentials("alice", "wrong", mechanism))
    assert refused.value.code == "SASL_AUTHENTICATION_FAILED"


def test_a_brokers_certificate_needs_no_login(broker: BrokerThread, certs: Certs) -> None:
    answer = metadata(broker, certs.follower.client_ssl, None)
    assert [t.name for t in answer.topics] == [TOPIC]


def command_config(path: Path, certs: Certs, sasl: str) -> Path:
    path.write_text(
        f'[tls]\nca = "{certs.alice.ca}"\ncert = "{certs.alice.cert}"\nkey = "{certs.alice.key}"\n\n[sasl]\n{sasl}\n',
        encoding="utf-8",
    )
    return path


def test_raftka_produce_and_consume_log_in_with_the_command_configs_sasl_table(
    broker: BrokerThread,
    certs: Certs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    config = command_config(tmp_path / "alice.toml", certs, 'username = "alice"\npassword = "alice-secret"')
    common = ["--bootstrap-server", broker.broker.address, "--command-config", str(config)]
    monkeypatch.setattr("sys.stdin", io.StringIO("from-the-cli\n"))
    assert main(["produce", TOPIC, *common]) == 0
    assert main(["consume", TOPIC, *common, "--from-beginning", "--max-messages", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "from-the-cli"


@pytest.mark.parametrize(
    ("sasl", "problem"),
    [
        ('username = "alice"\npassword = "x"\nmechanism = "GSSAPI"', "'GSSAPI' is not one of"),
        ('username = "alice"\npasword = "x"', "pasword: unknown key"),
        ('username = "alice"', "sasl.password: missing"),
    ],
)
def test_a_bad_sasl_table_is_refused_naming_it(certs: Certs, tmp_path: Path, sasl: str, problem: str) -> None:
    config = command_config(tmp_path / "bad.toml", certs, sasl)
    args = build_parser().parse_args(["produce", TOPIC, "--command-config", str(config)])
    with pytest.raises(CliError, match=problem):
        client_sasl(args)
