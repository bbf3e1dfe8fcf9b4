"""The partition side of transactions on the Kafka listener, in raw frames as Kafka's
clients send them: a transactional Produce (v3 on, with its transactional id), the
coordinator's WriteTxnMarkers (API 27, v0 and v1), and Fetch at read_committed (v4 on)
answered with the last stable offset and the aborted transactions to drop; ListOffsets'
latest at read_committed. Who may write markers: CLUSTER_ACTION on the Kafka listener, a
registered broker at its epoch on the data listener; anyone else writes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from raftka.broker.authorization import RequestAuthorizer
from raftka.broker.data_service import BrokerService
from raftka.broker.kafka.marker_apis import MarkerApis
from raftka.cli.main import main
from raftka.metadata import acls
from raftka.metadata.acls import Acl, Authorizer
from raftka.records.codec import read_records
from raftka.security.principal import CLIENT, Principal, current_host, current_principal
from raftka.v1 import broker_pb2 as Pb
from raftka.v1 import controller_pb2
from raftka.wire.client import BrokerClient
from tests.unit.broker_in_process import broker_in_process
from tests.unit.kafka_wire import BrokerThread, broker_thread, call
from tests.unit.test_transaction_markers import (
    TOPIC,
    interleaved_transactions,
    log_end,
    markers_request,
    txn_batch,
)

E = controller_pb2.ErrorCode
INVALID_TXN_STATE = 48
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
CLUSTER_AUTHORIZATION_FAILED = 31
ALICE = Principal("User:CN=alice,OU=client,O=raftka", CLIENT)
M = WriteTxnMarkersRequest.WritableTxnMarker


@pytest.fixture
def served(tmp_path: Path):
    with broker_thread(tmp_path, {TOPIC: 1}) as broker:
        yield broker


def produce(broker: BrokerThread, records: bytes, transactional_id: str | None = "tx") -> int:
    """The partition's Kafka error code (base offset checked elsewhere)."""
    P = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=transactional_id,
        acks=-1,
        timeout_ms=5_000,
        topic_data=[P(name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=records)])],
    )
    answer = call(broker.bootstrap, request, 9, ProduceResponse)
    return answer.responses[0].partition_responses[0].error_code


def write_marker(broker: BrokerThread, producer_id: int, committed: bool, version: int) -> int:
    request = WriteTxnMarkersRequest(
        markers=[
            M(
                producer_id=producer_id,
                producer_epoch=0,
                transaction_result=committed,
                topics=[M.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])],
                coordinator_epoch=0,
            )
        ]
    )
    answer = call(broker.bootstrap, request, version, WriteTxnMarkersResponse)
    (result,) = answer.markers
    assert result.producer_id == producer_id
    return result.topics[0].partitions[0].error_code


def fetch(broker: BrokerThread, version: int, isolation_level: int) -> FetchResponse.FetchableTopicResponse:
    F = FetchRequest.FetchTopic
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=[
            F(
                topic=TOPIC,
                partitions=[F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    return call(broker.bootstrap, request, version, FetchResponse).responses[0].partitions[0]


def latest(broker: BrokerThread, isolation_level: int) -> int:
    T = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[
            T(
                name=TOPIC,
                partitions=[T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)],
            )
        ],
    )
    return call(broker.bootstrap, request, 5, ListOffsetsResponse).topics[0].partitions[0].offset


def test_read_committed_fetches_stop_at_the_last_stable_offset_and_list_the_aborted(
    served: BrokerThread,
) -> None:
    assert produce(served, txn_batch(1, 0, b"a0", b"a1")) == 0  # aborted: 0-1
    assert produce(served, txn_batch(2, 0, b"c0")) == 0  # committed: 2
    assert produce(served, txn_batch(1, 2, b"plain", transactional=False)) == INVALID_TXN_STATE
    assert produce(served, txn_batch(3, 0, b"no id"), transactional_id=None) != 0, (
        "a transactional batch needs its id"
    )
    for version in (4, 11, 12):
        held = fetch(served, version, isolation_level=1)
        assert (held.high_watermark, held.last_stable_offset, held.records or b"") == (3, 0, b"")
    assert latest(served, isolation_level=1) == 0 and latest(served, isolation_level=0) == 3

    assert write_marker(served, 1, committed=False, version=0) == 0  # 3
    assert write_marker(served, 2, committed=True, version=1) == 0  # 4
    for version in (4, 11, 12):
        done = fetch(served, version, isolation_level=1)
        assert (done.high_watermark, done.last_stable_offset) == (5, 5)
        assert [(t.producer_id, t.first_offset) for t in done.aborted_transactions] == [(1, 0)]
        assert [r.value for r in read_records(done.records)] == [b"a0", b"a1", b"c0"], (
            "the consumer drops a0 a1"
        )
        uncommitted = fetch(served, version, isolation_level=0)
        assert uncommitted.last_stable_offset == 5 and not uncommitted.aborted_transactions
    assert latest(served, isolation_level=1) == 5


def run(coroutine) -> object:  # noqa: ANN001
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_markers_from_anyone_but_a_broker_write_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 1}) as broker:
            client = BrokerClient(broker.address)
            try:
                for request, code in [
                    (markers_request(1, False, broker_epoch=7), E.STALE_BROKER_EPOCH),
                    (_as_broker(markers_request(1, False), 555), E.BROKER_ID_NOT_REGISTERED),
                ]:
                    answer = await client.WriteTxnMarkers(request, timeout=10)
                    assert answer.status.error == code and not answer.markers
                assert log_end(broker) == 0
            finally:
                client.close()
            current_principal.set(ALICE)  # as a connection with ALICE's certificate
            current_host.set("10.0.0.5")
            refused = await broker.api.write_txn_markers(markers_request(1, False))
            assert refused.status.error == E.CLUSTER_AUTHORIZATION_FAILED and log_end(broker) == 0

            grants: dict = {}
            broker.api.authorizer = RequestAuthorizer(Authorizer((), lambda: grants))
            kafka_request = WriteTxnMarkersRequest(
                markers=[
                    M(
                        producer_id=1,
                        producer_epoch=0,
                        transaction_result=False,
                        topics=[M.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])],
                        coordinator_epoch=0,
                    )
                ]
            )
            markers = MarkerApis(broker.api)
            answer = await markers.write_txn_markers(kafka_request, 1)
            assert answer.markers[0].topics[0].partitions[0].error_code == CLUSTER_AUTHORIZATION_FAILED
            assert log_end(broker) == 0
            grant = Acl(
                acls.CLUSTER,
                acls.CLUSTER_NAME,
                acls.LITERAL,
                ALICE.name,
                "*",
                acls.CLUSTER_ACTION,
                acls.ALLOW,
            )
            grants[grant.id] = grant
            answer = await markers.write_txn_markers(kafka_request, 1)
            assert answer.markers[0].topics[0].partitions[0].error_code == 0 and log_end(broker) == 1

    run(scenario())


def _as_broker(request, broker_id: int):  # noqa: ANN001, ANN202
    request.broker_id = broker_id
    return request


@pytest.mark.parametrize(
    ("isolation_level", "expected"),
    [
        ("read_committed", [b"c0", b"p0", b"c1", b"p1"]),
        ("read_uncommitted", [b"a0", b"a1", b"c0", b"p0", b"a2", b"c1", b"p1"]),
    ],
)
def test_kafka_pythons_consumer_drops_aborted_records_read_committed(
    served: BrokerThread, isolation_level: str, expected: list[bytes]
) -> None:
    async def write() -> None:
        client = BrokerClient(served.broker.address)
        try:
            await interleaved_transactions(client)
        finally:
            client.close()

    served.run(write())
    consumer = KafkaConsumer(
        bootstrap_servers=served.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level=isolation_level,
    )
    tp = KafkaTopicPartition(TOPIC, 0)
    consumer.assign([tp])
    received: list[bytes] = []
    for _ in range(30):  # bounded: each poll waits up to a second for records
        for records in consumer.poll(timeout_ms=1_000).values():
            received += [r.value for r in records]
        if len(received) >= len(expected) and consumer.position(tp) == 9:
            break
    consumer.close()
    assert received == expected


@pytest.mark.parametrize(
    ("isolation_level", "expected"),
    [
        ("read_committed", ["c0", "p0", "c1", "p1"]),
        ("read_uncommitted", ["a0", "a1", "c0", "p0", "a2", "c1", "p1"]),
    ],
)
def test_raftka_consume_isolation_level(
    served: BrokerThread, isolation_level: str, expected: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    async def write() -> None:
        client = BrokerClient(served.broker.address)
        try:
            await interleaved_transactions(client)
        finally:
            client.close()

    served.run(write())
    address = served.broker.address
    common = ["--bootstrap-server", address, "--partition", "0", "--from-beginning", "--timeout-ms", "60000"]
    count = ["--max-messages", str(len(expected))]
    assert main(["consume", TOPIC, *common, *count, "--isolation-level", isolation_level]) == 0
    assert capsys.readouterr().out.splitlines() == expected


def test_a_produce_naming_a_transactional_id_needs_write_on_it_on_every_path(tmp_path: Path) -> None:
    """Issue 29 finding 3: WRITE on the topic alone let a client append to a transaction.
    Kafka refuses a Produce carrying transactional batches without WRITE on its
    transactional id (53 for every partition), before its topics; the Kafka listener, the data listener and gRPC all
    answer through ``BrokerApi.produce``, so each refuses it and nothing is appended."""
    anonymous = "User:ANONYMOUS"  # no TLS in the test: every connection is anonymous
    topic_only = Acl(acls.TOPIC, TOPIC, acls.LITERAL, anonymous, "*", acls.WRITE, acls.ALLOW)
    grants = {topic_only.id: topic_only}
    with broker_thread(tmp_path, {TOPIC: 1}, authorizer=Authorizer((), lambda: grants)) as broker:
        assert produce(broker, txn_batch(5, 0, b"injected")) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED

        async def ours() -> list[int]:
            request = Pb.ProduceRequest(acks=-1, timeout_ms=5_000, transactional_id="tx")
            request.topics.add(name=TOPIC).partitions.add(partition=0, records=txn_batch(5, 0, b"injected"))
            client = BrokerClient(broker.broker.address)
            try:
                by_wire = await client.Produce(request, timeout=10)
            finally:
                client.close()
            by_grpc = await BrokerService(broker.broker.api).Produce(request, None)  # type: ignore[arg-type]
            return [
                answer.topics[0].partitions[0].error
                for answer in (by_wire, by_grpc)
                if answer.status.error == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            ]

        assert broker.run(ours()) == [E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * 2
        assert log_end(broker.broker) == 0
        writer = Acl(acls.TRANSACTIONAL_ID, "tx", acls.LITERAL, anonymous, "*", acls.WRITE, acls.ALLOW)
        grants[writer.id] = writer
        assert produce(broker, txn_batch(5, 0, b"its own")) == 0
        assert log_end(broker.broker) == 1
