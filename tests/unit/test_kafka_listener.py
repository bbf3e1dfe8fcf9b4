"""The Kafka listener against one real broker in this process: its framing and handshake
byte by byte, what it does with requests no client should send, and Kafka's own clients
(kafka-python, aiokafka) producing, consuming in a group and committing through it."""

from __future__ import annotations

import asyncio
import inspect
import random
from pathlib import Path

import kafka.errors
import pytest
from kafka.partitioner import murmur2
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from raftka.broker.kafka.errors import KAFKA_ERRORS
from raftka.node.config import BrokerConfig
from raftka.records.codec import BatchBuilder, Compression
from raftka.v1 import broker_pb2, controller_pb2
from tests.unit.kafka_wire import BrokerThread, RawConnection, broker_thread, correlation_of, request_frame

TOPIC = "events"
PARTITIONS = 3
UNSUPPORTED_VERSION = 35


@pytest.fixture
def served(tmp_path: Path):
    with broker_thread(tmp_path, {TOPIC: PARTITIONS}) as broker:
        yield broker


def metadata_request(version: int = 12) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def one_record_batch(value: bytes) -> bytes:
    builder = BatchBuilder()
    builder.append(1_700_000_000_000, None, value)
    return bytes(builder.build())


def produce_request(
    acks: int, topic: str = TOPIC, value: bytes = b"v", records: bytes | None = None
) -> ProduceRequest:
    P = ProduceRequest.TopicProduceData
    records = one_record_batch(value) if records is None else records
    return ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=5_000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=records)])],
    )


# the error table ---------------------------------------------------------------------


def test_every_raftka_error_has_kafkas_number_as_kafka_python_names_it() -> None:
    kafka_numbers = {
        c.message: c.errno
        for _, c in inspect.getmembers(kafka.errors, inspect.isclass)
        if issubclass(c, kafka.errors.BrokerResponseError) and getattr(c, "errno", None) is not None
    }
    assert set(KAFKA_ERRORS) == set(controller_pb2.ErrorCode.values())
    for name, code in controller_pb2.ErrorCode.items():
        if name in kafka_numbers:
            assert KAFKA_ERRORS[code] == kafka_numbers[name], name
    assert len(set(KAFKA_ERRORS.values())) == len(KAFKA_ERRORS), "two raftka codes share a Kafka number"


# framing and the handshake -----------------------------------------------------------


def test_api_versions_lists_every_api_served(served: BrokerThread) -> None:
    with RawConnection(served.bootstrap) as connection:
        connection.send(
            request_frame(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3, 7)
        )
        answer = ApiVersionsResponse.decode(connection.read_frame(), version=3, header=True)
    assert answer.header.correlation_id == 7 and answer.error_code == 0
    served_versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert served_versions[ProduceRequest.API_KEY] == (0, 12)
    assert served_versions[FetchRequest.API_KEY] == (0, 17)
    assert served_versions[ApiVersionsRequest.API_KEY] == (0, 4)
    assert {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 19, 20, 22, 23, 32, 42} <= served_versions.keys()


def test_api_versions_newer_than_served_gets_version_0_with_the_versions_served(served: BrokerThread) -> None:
    frame = bytearray(request_frame(ApiVersionsRequest(), 3, 9))
    frame[6:8] = (99).to_bytes(2, "big")  # a version from the future: its body is not read
    with RawConnection(served.bootstrap) as connection:
        connection.send(bytes(frame))
        answer = ApiVersionsResponse.decode(connection.read_frame(), version=0, header=True)
    assert answer.header.correlation_id == 9
    assert answer.error_code == UNSUPPORTED_VERSION and len(answer.api_keys) > 10


def test_an_api_or_version_not_served_closes_its_connection_only(served: BrokerThread) -> None:
    unknown_api = bytearray(request_frame(metadata_request(), 12, 1))
    unknown_api[4:6] = (1000).to_bytes(2, "big")
    too_new = bytearray(request_frame(metadata_request(), 12, 2))
    too_new[6:8] = (13).to_bytes(2, "big")
    for refused in (unknown_api, too_new):
        with RawConnection(served.bootstrap) as connection:
            connection.send(bytes(refused) + request_frame(metadata_request(), 12, 3))
            assert connection.read_frame() is None  # Kafka closes it: no answer in a shape not asked for
    with RawConnection(served.bootstrap) as connection:
        connection.send(request_frame(metadata_request(), 12, 3))
        metadata = MetadataResponse.decode(connection.read_frame(), version=12, header=True)
    assert metadata.header.correlation_id == 3
    assert [(t.name, len(t.partitions), t.error_code) for t in metadata.topics] == [(TOPIC, PARTITIONS, 0)]
    assert [b.port for b in metadata.brokers] == [int(served.bootstrap.rpartition(":")[2])]


def test_a_request_that_does_not_decode_closes_its_connection_only(served: BrokerThread) -> None:
    good = request_frame(metadata_request(), 12, 1)
    broken = good[:4] + good[4:14] + b"\xff" * 3  # the header's start, then bytes no schema reads
    broken = len(broken[4:]).to_bytes(4, "big") + broken[4:]
    with RawConnection(served.bootstrap) as bad, RawConnection(served.bootstrap) as other:
        bad.send(broken)
        assert bad.read_frame() is None
        other.send(good)
        assert correlation_of(other.read_frame()) == 1


def test_answers_come_back_in_request_order(served: BrokerThread) -> None:
    """A fetch that long-polls an empty partition is answered before the metadata request
    sent after it, though the metadata is ready at once: Kafka clients rely on the order."""
    F = FetchRequest.FetchTopic
    fetch = FetchRequest(
        replica_id=-1,
        max_wait_ms=300,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=[
            F(
                topic=TOPIC,
                partitions=[F.FetchPartition(partition=1, fetch_offset=0, partition_max_bytes=1 << 20)],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    with RawConnection(served.bootstrap) as connection:
        connection.send(request_frame(fetch, 12, 1) + request_frame(metadata_request(), 12, 2))
        first = connection.read_frame()
        assert correlation_of(first) == 1
        assert correlation_of(connection.read_frame()) == 2
    answer = FetchResponse.decode(first, version=12, header=True)
    partition = answer.responses[0].partitions[0]
    assert (partition.error_code, partition.high_watermark, partition.last_stable_offset) == (0, 0, 0)


def test_acks_0_produce_gets_no_answer_and_a_refused_one_closes_the_connection(served: BrokerThread) -> None:
    with RawConnection(served.bootstrap) as connection:
        connection.send(
            request_frame(produce_request(acks=0), 9, 1) + request_frame(metadata_request(), 12, 2)
        )
        assert correlation_of(connection.read_frame()) == 2
    assert served.broker.replicas.get(TOPIC, 0).log.log_end_offset == 1
    with RawConnection(served.bootstrap) as connection:
        connection.send(request_frame(produce_request(acks=0, topic="nowhere"), 9, 1))
        assert connection.read_frame() is None


def test_a_zstd_bomb_is_refused_as_invalid_record_and_the_connection_serves_on(tmp_path: Path) -> None:
    """4 MiB of zeros in a zstd batch of a few hundred bytes, against a bound of 1 MiB."""
    builder = BatchBuilder(Compression.ZSTD)
    builder.append(1_700_000_000_000, None, bytes(4 << 20))
    bomb = bytes(builder.build())
    assert len(bomb) < 4096
    bounded = BrokerConfig(uncompressed_batch_bytes_max=1 << 20)
    with (
        broker_thread(tmp_path, {TOPIC: 1}, broker_config=bounded) as served,
        RawConnection(served.bootstrap) as connection,
    ):
        connection.send(request_frame(produce_request(acks=1, records=bomb), 9, 1))
        connection.send(request_frame(produce_request(acks=1, value=b"after"), 9, 2))
        refused, accepted = (
            ProduceResponse.decode(connection.read_frame(), version=9, header=True) for _ in range(2)
        )
        partition = refused.responses[0].partition_responses[0]
        assert partition.error_code == KAFKA_ERRORS[controller_pb2.ErrorCode.INVALID_RECORD]
        assert "broker.uncompressed_batch_bytes_max" in partition.error_message
        assert accepted.responses[0].partition_responses[0].error_code == 0
        assert served.broker.replicas.get(TOPIC, 0).log.log_end_offset == 1, "only the second was written"


def test_random_bytes_after_a_real_header_never_stop_the_listener(served: BrokerThread) -> None:
    """Every API the listener serves, at every version, with garbage bodies: each gets an
    answer or a closed connection, and the listener answers a real client after all."""
    rng = random.Random(20261124)
    versions = ApiVersionsResponse.decode(_handshake(served), version=3, header=True).api_keys
    for key in versions:
        for version in range(key.min_version, key.max_version + 1):
            body = rng.randbytes(rng.randrange(0, 64))
            header = key.api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + (5).to_bytes(4, "big")
            header += b"\x00\x01t" + (b"\x00" if version >= 0 else b"")
            with RawConnection(served.bootstrap) as connection:
                connection.send(len(header + body).to_bytes(4, "big") + header + body)
                answer = connection.read_frame()
                assert answer is None or correlation_of(answer) == 5
    assert ApiVersionsResponse.decode(_handshake(served), version=3, header=True).error_code == 0


def _handshake(served: BrokerThread) -> bytes:
    with RawConnection(served.bootstrap) as connection:
        connection.send(
            request_frame(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3, 1)
        )
        return connection.read_frame()


# Kafka's clients ---------------------------------------------------------------------


def test_kafka_python_produces_keyed_records_where_java_would_and_reads_them_back(
    served: BrokerThread,
) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", linger_ms=5)
    sent = {}
    for i in range(60):
        key = f"key-{i}".encode()
        sent[key] = producer.send(TOPIC, key=key, value=f"value-{i}".encode())
    producer.flush(30)
    for key, future in sent.items():
        metadata = future.get(10)
        assert metadata.partition == (murmur2(key) & 0x7FFFFFFF) % PARTITIONS
    producer.close()

    consumer = KafkaConsumer(
        bootstrap_servers=served.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    received = {}
    while len(received) < len(sent):
        for records in consumer.poll(timeout_ms=2_000).values():
            for record in records:
                received[record.key] = record.value
    consumer.close()
    assert received == {key: key.replace(b"key", b"value") for key in sent}


POLL_ROUNDS_MAX = 500  # of two 200 ms polls: the group settles within a few rounds


def produce_keyed(bootstrap: str, count: int, start: int = 0) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    for i in range(start, start + count):
        producer.send(TOPIC, key=f"key-{i}".encode(), value=f"value-{i}".encode())
    producer.flush(30)
    producer.close()


def test_kafka_python_group_of_two_shares_the_partitions_commits_and_a_new_member_resumes(
    served: BrokerThread,
) -> None:
    from kafka import KafkaConsumer

    produce_keyed(served.bootstrap, 60)
    options = {
        "bootstrap_servers": served.bootstrap,
        "group_id": "readers",
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "session_timeout_ms": 6_000,
        "heartbeat_interval_ms": 200,
    }
    members = [KafkaConsumer(TOPIC, client_id=f"member-{i}", **options) for i in range(2)]
    seen: dict[bytes, list[int]] = {}

    def settled() -> bool:
        """Every record read, and each partition owned by exactly one member. Until then a
        member may still hold an assignment the group has moved on from (one whose session
        lapsed on a loaded machine learns so at its next heartbeat), as in Kafka."""
        first, second = (m.assignment() for m in members)
        everything = {(TOPIC, p) for p in range(PARTITIONS)}
        return (
            len(seen) == 60
            and bool(first)
            and bool(second)
            and not first & second
            and first | second == everything
        )

    for _ in range(POLL_ROUNDS_MAX):
        if settled():
            break
        for index, consumer in enumerate(members):
            for records in consumer.poll(timeout_ms=200).values():
                for record in records:
                    seen.setdefault(record.key, []).append(index)
    assert settled(), f"the group did not settle: {[m.assignment() for m in members]}, {len(seen)} keys read"
    first, second = (m.assignment() for m in members)
    for consumer in members:
        consumer.commit()
    committed = {tp.partition: members[0].committed(tp) for tp in first} | {
        tp.partition: members[1].committed(tp) for tp in second
    }
    for consumer in members:
        consumer.close()
    assert sum(committed.values()) == 60

    produce_keyed(served.bootstrap, 9, start=60)
    resumed = KafkaConsumer(TOPIC, client_id="member-2", **options)
    later: list[bytes] = []
    while len(later) < 9:
        for records in resumed.poll(timeout_ms=500).values():
            later.extend(r.key for r in records)
    resumed.close()
    assert sorted(later) == sorted(f"key-{i}".encode() for i in range(60, 69))


def test_aiokafka_produces_and_a_group_consumes_and_commits(served: BrokerThread) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    async def scenario() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=served.bootstrap, acks="all")
        await producer.start()
        for i in range(30):
            await producer.send(TOPIC, key=f"k{i}".encode(), value=b"x")
        await producer.flush()
        await producer.stop()
        consumer = AIOKafkaConsumer(
            TOPIC,
            bootstrap_servers=served.bootstrap,
            group_id="aio",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        keys = []
        while len(keys) < 30:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                keys.extend(r.key for r in records)
        await consumer.commit()
        committed = [await consumer.committed(TopicPartition(TOPIC, p)) for p in range(PARTITIONS)]
        await consumer.stop()
        assert sorted(keys) == sorted(f"k{i}".encode() for i in range(30))
        assert sum(committed) == 30

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_requests_naming_topics_by_the_zero_id_are_answered_unknown_topic_id(served: BrokerThread) -> None:
    """Kafka's "no id" (the zero UUID, which kafka-python decodes as None) in Fetch v13+,
    Metadata v10+ and DeleteTopics v6+ is an unknown id: answered UNKNOWN_TOPIC_ID, and the
    connection serves on (it was an AttributeError that closed the connection)."""
    from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse

    F = FetchRequest.FetchTopic
    fetch = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            F(
                topic_id=None,
                partitions=[F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024)],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    by_id = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=None, topic_id=None)],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    delete = DeleteTopicsRequest(
        topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=None)], timeout_ms=1000
    )
    UNKNOWN_TOPIC_ID = 100
    with RawConnection(served.bootstrap) as connection:
        connection.send(
            request_frame(fetch, 13, 1)
            + request_frame(by_id, 12, 2)
            + request_frame(delete, 6, 3)
            + request_frame(metadata_request(), 12, 4)
        )
        fetched = FetchResponse.decode(connection.read_frame(), version=13, header=True)
        described = MetadataResponse.decode(connection.read_frame(), version=12, header=True)
        deleted = DeleteTopicsResponse.decode(connection.read_frame(), version=6, header=True)
        after = MetadataResponse.decode(connection.read_frame(), version=12, header=True)
    assert fetched.responses[0].partitions[0].error_code == UNKNOWN_TOPIC_ID
    assert described.topics[0].error_code == UNKNOWN_TOPIC_ID
    assert deleted.responses[0].error_code == UNKNOWN_TOPIC_ID
    assert after.topics[0].name == TOPIC and after.topics[0].error_code == 0


# compacted topics ---------------------------------------------------------------------


def test_a_compacted_partition_refuses_records_without_a_key_and_the_others_are_written(
    tmp_path: Path,
) -> None:
    """Kafka's rule (``LogValidator.validateKey``), where every front end's produce meets:
    the keyless batch's partition alone gets INVALID_RECORD; markers, the leader's own
    control batches, are no records of a client and need no key."""
    compacted, plain = "table-changelog", "plain"
    keyed = BatchBuilder()
    keyed.append(1_700_000_000_000, b"k", b"v")
    with broker_thread(
        tmp_path, {compacted: 1, plain: 1}, configs={compacted: {"cleanup.policy": "compact"}}
    ) as served:
        P = ProduceRequest.TopicProduceData
        request = ProduceRequest(
            transactional_id=None,
            acks=1,
            timeout_ms=5_000,
            topic_data=[
                P(name=name, partition_data=[P.PartitionProduceData(index=0, records=one_record_batch(b"v"))])
                for name in (compacted, plain)
            ],
        )
        with RawConnection(served.bootstrap) as connection:
            connection.send(request_frame(request, 9, 1))
            answer = ProduceResponse.decode(connection.read_frame(), version=9, header=True)
            connection.send(
                request_frame(produce_request(acks=1, topic=compacted, records=bytes(keyed.build())), 9, 2)
            )
            accepted = ProduceResponse.decode(connection.read_frame(), version=9, header=True)
        results = {t.name: t.partition_responses[0] for t in answer.responses}
        assert results[compacted].error_code == KAFKA_ERRORS[controller_pb2.ErrorCode.INVALID_RECORD] == 87
        assert results[compacted].error_message == (
            f"{compacted}-0: batch 0: record 0 has no key, and a compacted topic (cleanup.policy compact) "
            "takes only records with a key"
        )
        assert (results[plain].error_code, results[plain].base_offset) == (0, 0)
        assert accepted.responses[0].partition_responses[0].error_code == 0
        log = served.broker.replicas.get(compacted, 0).log
        assert log.log_end_offset == 1, "the keyless batch wrote nothing, the keyed one was written"
        marker = broker_pb2.TxnMarker(producer_id=7, producer_epoch=0, committed=True)
        marker.topics.add(name=compacted, partitions=[0])
        written = served.run(
            served.broker.replicas.write_txn_markers(broker_pb2.WriteTxnMarkersRequest(markers=[marker]))
        )
        assert written.markers[0].topics[0].partitions[0].error == controller_pb2.ErrorCode.NONE
        assert log.log_end_offset == 2
