"""Kafka's UnregisterBroker (API 64, v0 as Kafka 3.9 serves it) on the Kafka listener,
forwarded to the controller: a follower unregistered leaves the ISR and the cluster; an
unknown id is refused with Kafka's BROKER_ID_NOT_REGISTERED, naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raftka.broker.kafka.schemas import UnregisterBrokerRequest, UnregisterBrokerResponse
from tests.unit.kafka_wire import BrokerThread, broker_thread, call

TOPIC = "t"
FOLLOWER = 102
BROKER_ID_NOT_REGISTERED = 102  # Kafka's error code


@pytest.fixture
def served(tmp_path: Path) -> Iterator[BrokerThread]:
    with broker_thread(tmp_path, {TOPIC: 2}, followers=(FOLLOWER,)) as served:
        yield served


def test_a_follower_unregistered_through_the_kafka_listener_leaves_every_isr_and_the_cluster(
    served: BrokerThread,
) -> None:
    answer = call(served.bootstrap, UnregisterBrokerRequest(broker_id=FOLLOWER), 0, UnregisterBrokerResponse)
    assert (answer.error_code, answer.error_message) == (0, None)
    image = served.broker.controller.image
    assert FOLLOWER not in image.brokers
    for state in image.topic(TOPIC).partitions.values():
        assert FOLLOWER in state.replicas and FOLLOWER not in state.isr and FOLLOWER not in state.elr


def test_an_unknown_broker_is_refused_naming_the_field(served: BrokerThread) -> None:
    before = served.broker.controller.image
    answer = call(served.bootstrap, UnregisterBrokerRequest(broker_id=7), 0, UnregisterBrokerResponse)
    assert (answer.error_code, answer.error_message) == (
        BROKER_ID_NOT_REGISTERED,
        "broker_id: 7 is not a registered broker",
    )
    assert served.broker.controller.image is before, "nothing written"
