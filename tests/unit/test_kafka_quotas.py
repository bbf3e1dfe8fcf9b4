"""Client quotas on a real broker's Kafka listener: AlterClientQuotas and
DescribeClientQuotas as Kafka's tools send them, a greedy kafka-python producer held near
its producer_byte_rate (throttle_time_ms in its answers, its rate as the broker itself
measures it), a consumer over its consumer_byte_rate answered with no records, and
raftka's own producer on the data listener held by its user's quota."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kafka.protocol.consumer import FetchRequest, FetchResponse

from raftka.client.producer import Producer
from raftka.node.config import BrokerConfig
from tests.unit.kafka_wire import BrokerThread, RawConnection, broker_thread, call, request_frame

TOPIC = "metered"
WINDOWS = BrokerConfig(quota_window_num=3, quota_window_size_seconds=1)  # rates over 2 to 3 s
A = AlterClientQuotasRequest.EntryData


@pytest.fixture
def served(tmp_path: Path) -> Iterator[BrokerThread]:
    with broker_thread(tmp_path, {TOPIC: 1}, broker_config=WINDOWS) as served:
        yield served


def alter(served: BrokerThread, client_id: str | None, **values: float) -> AlterClientQuotasResponse:
    entry = A(
        entity=[A.EntityData(entity_type="client-id", entity_name=client_id)],
        ops=[A.OpData(key=key, value=value, remove=False) for key, value in values.items()],
    )
    request = AlterClientQuotasRequest(entries=[entry], validate_only=False)
    return call(served.bootstrap, request, 1, AlterClientQuotasResponse)


def budget(served: BrokerThread, quota_type: str, bucket: tuple[str, str]) -> tuple[Any, float]:
    """A copy of a budget as the broker counts it, and the broker's clock (s) when read."""

    async def read() -> tuple[Any, float]:
        manager = {"Produce": served.broker.api.quotas.produce, "Fetch": served.broker.api.quotas.fetch}[
            quota_type
        ]
        found = dict(manager.budgets()).get(bucket)
        return (None if found is None else dataclasses.replace(found)), manager._clock()

    return served.run(read())


def assert_held_near(quota: float, middle: tuple[Any, float], end: tuple[Any, float]) -> None:
    """From the middle of a run to its end, once its first burst is spent, the bytes the
    broker counted over the broker's clock are near the quota: throttled, not starved."""
    (at_middle, middle_s), (at_end, end_s) = middle, end
    recorded = at_end.recorded - at_middle.recorded
    rate = recorded / (end_s - middle_s)
    assert at_end.throttle_ms > 0
    assert 0.5 * quota <= rate <= 1.5 * quota, f"{recorded} B in {end_s - middle_s:.1f} s: {rate:.0f} B/s"


def test_quotas_altered_and_described_through_the_kafka_listener(served: BrokerThread) -> None:
    answer = alter(served, "app", producer_byte_rate=1024, request_percentage=25)
    assert [(e.error_code, e.error_message) for e in answer.entries] == [(0, None)]
    assert alter(served, None, consumer_byte_rate=4096).entries[0].error_code == 0
    D = DescribeClientQuotasRequest.ComponentData
    described = call(
        served.bootstrap,
        DescribeClientQuotasRequest(
            components=[D(entity_type="client-id", match_type=2, match=None)], strict=True
        ),
        1,
        DescribeClientQuotasResponse,
    )
    assert described.error_code == 0
    found = {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
        for entry in described.entries
    }
    assert found == {
        (("client-id", None),): {"consumer_byte_rate": 4096.0},
        (("client-id", "app"),): {"producer_byte_rate": 1024.0, "request_percentage": 25.0},
    }


def test_a_bad_quota_value_is_refused_naming_the_field_and_nothing_is_set(served: BrokerThread) -> None:
    (entry,) = alter(served, "app", producer_byte_rate=-1).entries
    assert entry.error_code == 42  # INVALID_REQUEST
    assert "entries[0].ops[0].value" in entry.error_message
    assert served.run(_quotas_of(served)) == {}


async def _quotas_of(served: BrokerThread) -> Any:
    return dict(served.broker.api.image.client_quotas)


def test_a_greedy_producer_is_throttled_and_held_near_its_quota(served: BrokerThread) -> None:
    """The producer sends as fast as it can for several windows; the broker throttles it
    (kafka-python records the throttle times it is told) and holds it near its quota."""
    quota = 50_000
    assert alter(served, "greedy", producer_byte_rate=quota).entries[0].error_code == 0
    producer = KafkaProducer(
        bootstrap_servers=served.bootstrap, client_id="greedy", acks=1, linger_ms=0, batch_size=16_384
    )
    try:
        sent = [producer.send(TOPIC, b"x" * 1_000) for _ in range(500)]  # 500 kB
        sent[249].get(60)
        middle = budget(served, "Produce", ("", "greedy"))
        producer.flush(60)
        end = budget(served, "Produce", ("", "greedy"))
        throttles = [
            value
            for group in producer.metrics().values()
            for name, value in group.items()
            if name == "throttle-time-max" and value == value  # NaN: no sample
        ]
    finally:
        producer.close()
    assert max(throttles, default=0) > 0, "no answer carried a throttle time"
    assert_held_near(quota, middle, end)


def fetch(served: BrokerThread, client_id: str, offset: int) -> FetchResponse:
    F = FetchRequest.FetchTopic
    request = FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="",
        topics=[F(topic=TOPIC, partitions=[F.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20)])],
    )  # fmt: skip
    with RawConnection(served.bootstrap) as connection:
        connection.send(request_frame(request, 11, 1, client_id=client_id))
        frame = connection.read_frame()
    assert frame is not None
    return FetchResponse.decode(frame, version=11, header=True)


def test_a_consumer_over_its_quota_gets_a_throttle_time_and_no_records(served: BrokerThread) -> None:
    """Each record is its own batch of about 1 kB; with 600 B/s over windows of 1 s the
    fetch asks at most 1200 bytes (one batch), and a second batch within the span is over
    the quota: that answer carries no records and says how long to wait."""
    producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks=1, linger_ms=0)
    try:
        for _ in range(3):
            producer.send(TOPIC, b"y" * 1_000)
            producer.flush(10)
    finally:
        producer.close()
    assert alter(served, "reader", consumer_byte_rate=600).entries[0].error_code == 0
    first = fetch(served, "reader", 0)
    assert first.throttle_time_ms == 0
    records = first.responses[0].partitions[0].records
    assert 1_000 < len(records) < 1_200, "the fetch asks what the quota allows: one batch"
    second = fetch(served, "reader", 1)
    assert second.throttle_time_ms > 0
    assert second.responses == []
    counted, _ = budget(served, "Fetch", ("", "reader"))
    assert counted.recorded == len(records), "a throttled fetch's bytes are taken back"


def test_a_raftka_producer_on_the_data_listener_is_held_by_its_users_quota(served: BrokerThread) -> None:
    """The data protocol names no client id: the quota of the connection's user applies
    (ANONYMOUS without TLS), and muting holds back a client that does not wait by itself."""
    quota = 50_000
    entry = A(entity=[A.EntityData(entity_type="user", entity_name="ANONYMOUS")],
              ops=[A.OpData(key="producer_byte_rate", value=quota, remove=False)])  # fmt: skip
    answer = call(served.bootstrap, AlterClientQuotasRequest(entries=[entry], validate_only=False), 1,
                  AlterClientQuotasResponse)  # fmt: skip
    assert answer.entries[0].error_code == 0
    producer = Producer(served.broker.address, linger_ms=0)
    try:
        sent = [producer.send(TOPIC, b"z" * 1_000) for _ in range(500)]  # 500 kB
        sent[249].result(60)
        middle = budget(served, "Produce", ("ANONYMOUS", ""))
        producer.flush()
        end = budget(served, "Produce", ("ANONYMOUS", ""))
    finally:
        producer.close()
    assert_held_near(quota, middle, end)
