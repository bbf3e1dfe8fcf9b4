"""SASL on the Kafka listener, against one real broker in this process: Kafka's state
machine byte by byte (nothing but ApiVersions and SaslHandshake before a login, a failed
login answered SASL_AUTHENTICATION_FAILED and closed, a captured exchange replayed on
another connection refused), the principal a login gives the requests after it, and
Kafka's own clients logging in: kafka-python with SCRAM-SHA-256, confluent-kafka with
SCRAM-SHA-512 managing users through AlterUserScramCredentials, and PLAIN over TLS."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.net.sasl.scram import ScramClient
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from raftka.broker.kafka.protocol import KafkaApi, KafkaDispatcher
from raftka.broker.kafka.sasl_apis import SaslApis, kafka_logins
from raftka.metadata.image import MetadataImage, frozen
from raftka.node.config import KafkaConfig
from raftka.security import scram
from raftka.security.plain_checks import PlainChecks
from raftka.security.principal import current_principal
from raftka.security.sasl_sessions import SaslSessions
from raftka.wire.server import Listener
from tests.unit.kafka_wire import BrokerThread, RawConnection, broker_thread, request_frame
from tests.unit.tls_support import make_certs

TOPIC = "events"
SHA256, SHA512 = scram.SCRAM_SHA_256, scram.SCRAM_SHA_512
SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM, UNSUPPORTED_VERSION = 58, 33, 35


def kafka_config(mechanisms: str) -> KafkaConfig:
    return KafkaConfig(
        auto_create_topics_enable=False, default_replication_factor=1, sasl_mechanisms=mechanisms
    )


def credentials(**passwords: str) -> dict[tuple[str, str], scram.ScramCredential]:
    made = {}
    for user, password in passwords.items():
        for mechanism in scram.MECHANISMS:
            salt = uuid.uuid4().bytes
            salted = scram.salted_password(mechanism, password, salt, scram.ITERATIONS_MIN)
            made[(user, mechanism)] = scram.credential(mechanism, salted, salt, scram.ITERATIONS_MIN)
    return made


def with_users(broker: BrokerThread, **passwords: str) -> None:
    """Users the broker has replayed, as if ``raftka users add`` had made them."""
    controller = broker.broker.controller
    controller.set_image(
        MetadataImage(
            offset=controller.image.offset + 1,
            scram_credentials=frozen({**controller.image.scram_credentials, **credentials(**passwords)}),
        )
    )
    broker.broker.set_topics({TOPIC: 1})


@pytest.fixture
def scram_broker(tmp_path: Path) -> Iterator[BrokerThread]:
    with broker_thread(
        tmp_path, {TOPIC: 1}, kafka_config=kafka_config("SCRAM-SHA-512,SCRAM-SHA-256")
    ) as broker:
        with_users(broker, alice="alice-secret")
        yield broker


# the exchange byte by byte --------------------------------------------------------------


def send(connection: RawConnection, request: object, version: int, cid: int) -> None:
    connection.send(request_frame(request, version, cid))  # type: ignore[arg-type]


def handshake(connection: RawConnection, mechanism: str = SHA512) -> SaslHandshakeResponse:
    send(connection, SaslHandshakeRequest(mechanism=mechanism), 1, 1)
    return SaslHandshakeResponse.decode(connection.read_frame(), version=1, header=True)


def authenticate(connection: RawConnection, token: bytes, cid: int) -> SaslAuthenticateResponse:
    send(connection, SaslAuthenticateRequest(auth_bytes=token), 2, cid)
    frame = connection.read_frame()
    assert frame is not None, "the broker closed the connection instead of answering"
    return SaslAuthenticateResponse.decode(frame, version=2, header=True)


def scram_login(
    connection: RawConnection, client: ScramClient
) -> tuple[bytes, bytes, SaslAuthenticateResponse]:
    """Handshake, client-first, client-final: the two messages sent, and the last answer."""
    assert handshake(connection).error_code == 0
    client_first = client.first_message()
    first = authenticate(connection, client_first, 2)
    assert first.error_code == 0
    client.process_server_first_message(first.auth_bytes)
    client_final = client.final_message()
    return client_first, client_final, authenticate(connection, client_final, 3)


def metadata_frame(cid: int) -> bytes:
    return request_frame(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12, cid)


def test_requests_before_a_login_close_the_connection(scram_broker: BrokerThread) -> None:
    with RawConnection(scram_broker.bootstrap) as connection:
        connection.send(metadata_frame(1))
        assert connection.read_frame() is None
    with RawConnection(scram_broker.bootstrap) as connection:  # tokens before the handshake
        send(connection, SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=x"), 2, 1)
        assert connection.read_frame() is None
    with RawConnection(scram_broker.bootstrap) as connection:  # ApiVersions is served, then the handshake
        send(connection, ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3, 1)
        assert connection.read_frame() is not None
        assert handshake(connection).error_code == 0


def test_a_login_then_serves_everything(scram_broker: BrokerThread) -> None:
    with RawConnection(scram_broker.bootstrap) as connection:
        client = ScramClient("alice", "alice-secret", SHA512)
        *_, answer = scram_login(connection, client)
        assert answer.error_code == 0 and answer.session_lifetime_ms == 0
        client.process_server_final_message(answer.auth_bytes)  # raises unless the server knew the key
        connection.send(metadata_frame(4))
        metadata = MetadataResponse.decode(connection.read_frame(), version=12, header=True)
    assert [t.name for t in metadata.topics] == [TOPIC]


def test_a_changed_or_deleted_credential_closes_the_connections_logged_in_with_it(
    scram_broker: BrokerThread,
) -> None:
    """A deleted user's open connection was still served. A connection whose login's
    credential the image replaces or deletes is closed; others are served on, and the new
    password logs in."""
    with_users(scram_broker, bob="bob-secret")

    def logged_in(user: str, password: str) -> RawConnection:
        connection = RawConnection(scram_broker.bootstrap)
        *_, answer = scram_login(connection, ScramClient(user, password, SHA512))
        assert answer.error_code == 0
        return connection

    def served(connection: RawConnection, cid: int) -> bool:
        try:
            connection.send(metadata_frame(cid))
            return connection.read_frame() is not None
        except ConnectionError:  # closed by the broker
            return False

    with logged_in("alice", "alice-secret") as alice, logged_in("bob", "bob-secret") as bob:
        assert served(alice, 4) and served(bob, 4)
        with_users(scram_broker, alice="changed")  # a new password: a new salt and keys
        assert not served(alice, 5)
        assert served(bob, 5)
        controller = scram_broker.broker.controller
        remaining = {k: v for k, v in controller.image.scram_credentials.items() if k[0] != "bob"}
        controller.set_image(
            MetadataImage(offset=controller.image.offset + 1, scram_credentials=frozen(remaining))
        )
        assert not served(bob, 6)
    with logged_in("alice", "changed") as alice:
        assert served(alice, 4)


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "alice-secret")])
def test_a_failed_login_is_answered_58_then_closed(
    scram_broker: BrokerThread, user: str, password: str
) -> None:
    with RawConnection(scram_broker.bootstrap) as connection:
        *_, answer = scram_login(connection, ScramClient(user, password, SHA512))
        assert answer.error_code == SASL_AUTHENTICATION_FAILED
        assert answer.error_message == scram.CLIENT_MESSAGE  # not which of user or password was wrong
        assert connection.read_frame() is None


def test_a_captured_exchange_replayed_on_another_connection_is_refused(scram_broker: BrokerThread) -> None:
    """An eavesdropper saw alice's client-first and client-final go by and sends them again."""
    client = ScramClient("alice", "alice-secret", SHA512)
    with RawConnection(scram_broker.bootstrap) as connection:
        client_first, captured, answer = scram_login(connection, client)
        assert answer.error_code == 0
    with RawConnection(scram_broker.bootstrap) as replay:
        assert handshake(replay).error_code == 0
        assert authenticate(replay, client_first, 2).error_code == 0  # a fresh server nonce
        assert authenticate(replay, captured, 3).error_code == SASL_AUTHENTICATION_FAILED
        assert replay.read_frame() is None


def test_a_login_sent_without_waiting_for_answers_is_taken_in_order(scram_broker: BrokerThread) -> None:
    """The handshake and the client-first in one write: while a connection logs in, its
    requests are handled one at a time, so the client-first finds the mechanism chosen."""
    client = ScramClient("alice", "alice-secret", SHA512)
    with RawConnection(scram_broker.bootstrap) as connection:
        connection.send(
            request_frame(SaslHandshakeRequest(mechanism=SHA512), 1, 1)
            + request_frame(SaslAuthenticateRequest(auth_bytes=client.first_message()), 2, 2)
        )
        assert SaslHandshakeResponse.decode(connection.read_frame(), version=1, header=True).error_code == 0
        first = SaslAuthenticateResponse.decode(connection.read_frame(), version=2, header=True)
        client.process_server_first_message(first.auth_bytes)
        assert authenticate(connection, client.final_message(), 3).error_code == 0


def bare_exchange(connection: RawConnection, token: bytes) -> bytes | None:
    """After SaslHandshake v0: a token as a bare frame, the answer as one (None: closed)."""
    connection.send(struct.pack(">i", len(token)) + token)
    return connection.read_frame()


@pytest.mark.parametrize(("password", "logged_in"), [("alice-secret", True), ("wrong", False)])
def test_after_handshake_v0_the_login_takes_bare_tokens_as_kafka_reads_them(
    scram_broker: BrokerThread, password: str, logged_in: bool
) -> None:
    """Older clients (Sarama's default before 1.26) log in with SaslHandshake v0: the tokens
    then travel without request headers; a refused login closes the connection."""
    with RawConnection(scram_broker.bootstrap) as connection:
        send(connection, SaslHandshakeRequest(mechanism=SHA512), 0, 1)
        answer = SaslHandshakeResponse.decode(connection.read_frame(), version=0, header=True)
        assert answer.error_code == 0
        client = ScramClient("alice", password, SHA512)
        server_first = bare_exchange(connection, client.first_message())
        assert server_first is not None
        client.process_server_first_message(server_first)
        server_final = bare_exchange(connection, client.final_message())
        if not logged_in:
            assert server_final is None
            return
        client.process_server_final_message(server_final)  # raises unless the server knew the key
        connection.send(metadata_frame(4))  # logged in: requests with headers again
        metadata = MetadataResponse.decode(connection.read_frame(), version=12, header=True)
    assert [t.name for t in metadata.topics] == [TOPIC]


def test_a_mechanism_not_offered_is_refused_then_closed(scram_broker: BrokerThread) -> None:
    with RawConnection(scram_broker.bootstrap) as connection:
        answer = handshake(connection, "GSSAPI")
        assert answer.error_code == UNSUPPORTED_SASL_MECHANISM
        assert answer.mechanisms == [SHA512, SHA256]
        assert connection.read_frame() is None


def test_requests_after_a_login_run_as_the_user() -> None:
    """What every handler reads (``current_principal``) is User:<name> once logged in."""
    seen: list[str | None] = []

    async def who(request: MetadataRequest, version: int) -> MetadataResponse:
        principal = current_principal.get()
        seen.append(None if principal is None else principal.name)
        return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=-1, topics=[])

    api = SimpleNamespace(
        image=MetadataImage(scram_credentials=frozen(credentials(alice="pw"))),
        plain_checks=PlainChecks(),
        sasl_sessions=SaslSessions(),
    )
    logins = kafka_logins(api, (SHA256,))  # type: ignore[arg-type]
    dispatcher = KafkaDispatcher([KafkaApi(MetadataRequest, 12, 12, who), *SaslApis(api, logins).apis()])  # type: ignore[arg-type]
    listener = Listener(dispatcher, name="kafka", login=logins.new)

    async def run() -> None:
        port = await listener.start("127.0.0.1", 0)
        try:
            await asyncio.to_thread(log_in_and_ask, f"127.0.0.1:{port}")
        finally:
            await listener.close()

    def log_in_and_ask(address: str) -> None:
        with RawConnection(address) as connection:
            send(connection, SaslHandshakeRequest(mechanism=SHA256), 1, 1)
            connection.read_frame()
            client = ScramClient("alice", "pw", SHA256)
            client.process_server_first_message(
                authenticate(connection, client.first_message(), 2).auth_bytes
            )
            assert authenticate(connection, client.final_message(), 3).error_code == 0
            connection.send(metadata_frame(4))
            assert connection.read_frame() is not None

    asyncio.run(run())
    assert seen == ["User:alice"]


# Kafka's clients ---------------------------------------------------------------------------


def test_kafka_python_logs_in_with_scram_sha_256_produces_and_consumes(scram_broker: BrokerThread) -> None:
    login = {
        "bootstrap_servers": scram_broker.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": SHA256,
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-secret",
    }
    producer = KafkaProducer(**login)
    producer.send(TOPIC, b"hello").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(**login, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(TOPIC, 0)])
    read: list[bytes] = []
    for _ in range(100):  # until the record comes back
        read += [r.value for batch in consumer.poll(timeout_ms=200).values() for r in batch]
        if read:
            break
    consumer.close()
    assert read == [b"hello"]


def confluent(bootstrap: str, mechanism: str, user: str, password: str, **more: str) -> dict[str, str]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        **more,
    }


def produce_and_read(config: dict[str, str], value: bytes) -> list[bytes]:
    """One record produced, then every record of the topic read back."""
    producer = Producer(config)
    producer.produce(TOPIC, value)
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4()}", "auto.offset.reset": "earliest"})
    consumer.assign([ConfluentPartition(TOPIC, 0, 0)])
    read: list[bytes] = []
    with contextlib.closing(consumer):
        for _ in range(100):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                read.append(message.value())
                if message.value() == value:
                    break
    return read


def test_confluent_kafka_logs_in_with_scram_sha_512_and_adds_a_user(scram_broker: BrokerThread) -> None:
    alice = confluent(scram_broker.bootstrap, SHA512, "alice", "alice-secret")
    assert produce_and_read(alice, b"from-alice") == [b"from-alice"]
    admin = AdminClient(alice)
    bob = UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bob-secret"
    )
    for future in admin.alter_user_scram_credentials([bob]).values():
        future.result(30)
    described = admin.describe_user_scram_credentials(["bob"])["bob"].result(30)
    [info] = described.scram_credential_infos
    assert (info.mechanism, info.iterations) == (ScramMechanism.SCRAM_SHA_512, 4096)
    scram_broker.broker.follow_controller()  # the broker replays bob's credential
    as_bob = confluent(scram_broker.bootstrap, SHA512, "bob", "bob-secret")
    assert produce_and_read(as_bob, b"from-bob") == [b"from-alice", b"from-bob"]


def test_plain_over_tls_checks_the_scram_password(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    config = kafka_config("PLAIN,SCRAM-SHA-512")
    with broker_thread(tmp_path / "broker", {TOPIC: 1}, kafka_config=config, tls=certs.broker) as broker:
        with_users(broker, alice="alice-secret")
        tls = {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs.broker.ca),
        }  # no client certificate
        alice = {**confluent(broker.bootstrap, "PLAIN", "alice", "alice-secret"), **tls}
        assert produce_and_read(alice, b"plain") == [b"plain"]
        errors: list[ConfluentError] = []
        wrong = Producer({**alice, "sasl.password": "wrong", "error_cb": errors.append})
        for _ in range(100):  # until librdkafka reports the refusal
            if errors:
                break
            wrong.poll(0.1)
        assert errors and errors[0].code() == ConfluentError._AUTHENTICATION, errors
