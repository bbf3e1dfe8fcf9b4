"""Kafka's IncrementalAlterConfigs (API 44) on the Kafka listener, forwarded to the controller
one resource at a time: a topic's configs and a broker's (or the broker default's) dynamic
configs set and deleted as ``kafka-configs --alter`` sends them; each resource answered on
its own, a bad one naming the field while the others apply."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

from raftka.metadata.image import BROKER, TOPIC
from tests.unit.kafka_wire import BrokerThread, broker_thread, call

NAME = "t"
SET, DELETE, APPEND = 0, 1, 2
RATE = "leader.replication.throttled.rate"
Q = IncrementalAlterConfigsRequest.AlterConfigsResource
Config = Q.AlterableConfig


@pytest.fixture
def served(tmp_path: Path) -> Iterator[BrokerThread]:
    with broker_thread(tmp_path, {NAME: 1}) as served:
        yield served


def alter(served: BrokerThread, *resources: Q, version: int = 1) -> list[tuple[int, str | None, int, str]]:
    request = IncrementalAlterConfigsRequest(resources=list(resources), validate_only=False)
    answer = call(served.bootstrap, request, version, IncrementalAlterConfigsResponse)
    return [(r.error_code, r.error_message, r.resource_type, r.resource_name) for r in answer.responses]


def configs(served: BrokerThread, resource_type: int, name: str) -> dict[str, str]:
    return dict(served.broker.controller.image.configs.get((resource_type, name), {}))


@pytest.mark.parametrize("version", [0, 1])
def test_topic_and_broker_configs_are_set_and_deleted(served: BrokerThread, version: int) -> None:
    answers = alter(
        served,
        Q(resource_type=TOPIC, resource_name=NAME, configs=[Config(name="retention.ms", config_operation=SET, value="1000")]),
        Q(resource_type=BROKER, resource_name="101", configs=[Config(name=RATE, config_operation=SET, value="1048576")]),
        Q(resource_type=BROKER, resource_name="", configs=[Config(name=RATE, config_operation=SET, value="5")]),
        version=version,
    )  # fmt: skip
    assert answers == [(0, None, TOPIC, NAME), (0, None, BROKER, "101"), (0, None, BROKER, "")]
    assert configs(served, TOPIC, NAME)["retention.ms"] == "1000"
    assert configs(served, BROKER, "101") == {RATE: "1048576"}
    assert configs(served, BROKER, "") == {RATE: "5"}
    deleted = alter(
        served, Q(resource_type=BROKER, resource_name="101", configs=[Config(name=RATE, config_operation=DELETE, value=None)])
    )  # fmt: skip
    assert deleted == [(0, None, BROKER, "101")]
    assert configs(served, BROKER, "101") == {}


def test_each_resource_is_answered_on_its_own_and_a_bad_one_names_the_field(served: BrokerThread) -> None:
    answers = alter(
        served,
        Q(resource_type=BROKER, resource_name="101", configs=[Config(name=RATE, config_operation=SET, value="-1")]),
        Q(resource_type=TOPIC, resource_name=NAME, configs=[Config(name="leader.replication.throttled.replicas", config_operation=APPEND, value="0:1")]),
        Q(resource_type=8, resource_name="101", configs=[]),
        Q(resource_type=TOPIC, resource_name="nowhere", configs=[Config(name="retention.ms", config_operation=SET, value="1")]),
        Q(resource_type=TOPIC, resource_name=NAME, configs=[Config(name="leader.replication.throttled.replicas", config_operation=SET, value="0:101")]),
    )  # fmt: skip
    codes = [(code, resource_type, name) for code, _, resource_type, name in answers]
    assert codes == [(40, BROKER, "101"), (42, TOPIC, NAME), (42, 8, "101"), (3, TOPIC, "nowhere"), (0, TOPIC, NAME)]
    messages = [message for _, message, _, _ in answers]
    assert f"invalid value '-1' for config {RATE}: must be at least 0" in messages[0]
    assert messages[1].startswith("resources[1].configs[0].config_operation: 2 on")
    assert messages[2].startswith("resources[2].resource_type: 8")
    assert configs(served, BROKER, "101") == {}, "nothing of the refused resources was written"
    assert configs(served, TOPIC, NAME)["leader.replication.throttled.replicas"] == "0:101"
