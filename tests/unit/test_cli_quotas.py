"""``raftka quotas``: kafka-configs' entity options turned into entities, a round trip
through a controller that plans with the real quota handlers (``quota_ops``) on an
in-memory image, and the refusals: the command's own syntax before any request, bad keys
and values by the controller, naming the field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from raftka.cli.main import main
from raftka.metadata import quota_ops
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.image import MetadataImage
from raftka.v1 import controller_pb2_grpc
from tests.unit.test_cli_admin_commands import failure


class QuotaController(controller_pb2_grpc.ControllerServicer):
    """The active controller's quota requests on an image, each write replayed at once."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.requests = 0

    def AlterClientQuotas(self, request: Any, context: Any) -> Any:
        self.requests += 1
        plan = quota_ops.alter(self.image, request)
        delta = MetadataDelta(self.image)
        for record in plan.records:
            delta.replay(record)
        self.image = delta.apply(self.image.offset + len(plan.records))
        return plan.response

    def DescribeClientQuotas(self, request: Any, context: Any) -> Any:
        self.requests += 1
        return quota_ops.describe(self.image, request)


@pytest.fixture
def controller() -> Iterator[QuotaController]:
    fake = QuotaController()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    controller_pb2_grpc.add_ControllerServicer_to_server(fake, server)
    fake.address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"  # type: ignore[attr-defined]
    server.start()
    try:
        yield fake
    finally:
        server.stop(None)


def raftka(controller: QuotaController, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(["quotas", *argv, "--bootstrap-controller", controller.address, "--output", "json"]) == 0  # type: ignore[attr-defined]
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


def test_alter_and_describe_round_trip(
    controller: QuotaController, capsys: pytest.CaptureFixture[str]
) -> None:
    raftka(controller, capsys, "alter", "--entity-type", "users", "--entity-name", "alice",
           "--add-config", "producer_byte_rate=1048576,request_percentage=12.5")  # fmt: skip
    raftka(controller, capsys, "alter", "--entity-type", "users", "--entity-name", "alice",
           "--entity-type", "clients", "--entity-default", "--add-config", "consumer_byte_rate=2048")  # fmt: skip
    raftka(controller, capsys, "alter", "--entity-type", "clients", "--entity-name", "app",
           "--add-config", "producer_byte_rate=10")  # fmt: skip
    assert raftka(controller, capsys, "describe", "--entity-type", "users", "--entity-name", "alice") == [
        {"entity": {"client-id": None, "user": "alice"}, "values": {"consumer_byte_rate": 2048.0}},
        {
            "entity": {"user": "alice"},
            "values": {"producer_byte_rate": 1048576.0, "request_percentage": 12.5},
        },
    ]
    raftka(controller, capsys, "alter", "--entity-type", "users", "--entity-name", "alice",
           "--delete-config", "producer_byte_rate,request_percentage")  # fmt: skip
    assert raftka(controller, capsys, "describe") == [
        {"entity": {"client-id": None, "user": "alice"}, "values": {"consumer_byte_rate": 2048.0}},
        {"entity": {"client-id": "app"}, "values": {"producer_byte_rate": 10.0}},
    ]
    assert raftka(controller, capsys, "describe", "--entity-type", "clients", "--entity-default") == [
        {"entity": {"client-id": None, "user": "alice"}, "values": {"consumer_byte_rate": 2048.0}},
    ]


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ("producer_byte_rate=-1", "entries[0].ops[0].value: producer_byte_rate must be above 0"),
        ("consumer_byte_rate=1.5", "entries[0].ops[0].value: consumer_byte_rate is in bytes per second"),
        ("bogus_rate=1", "entries[0].ops[0].key: 'bogus_rate' is not one of"),
    ],
)
def test_bad_keys_and_values_are_refused_by_the_controller_naming_the_field(
    controller: QuotaController, capsys: pytest.CaptureFixture[str], config: str, problem: str
) -> None:
    line = failure(capsys, "quotas", "alter", "--entity-type", "users", "--entity-name", "alice",
                   "--add-config", config, "--bootstrap-controller", controller.address)  # type: ignore[attr-defined]  # fmt: skip
    assert line.startswith("INVALID_REQUEST") and problem in line
    assert controller.image.client_quotas == {}


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (("alter", "--add-config", "producer_byte_rate=1"), "--entity-type: name users, clients or both"),
        (("alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1"), "--entity-name NAME or"),
        (("alter", "--entity-type", "users", "--entity-name", "a"), "give --add-config"),
        (("alter", "--entity-type", "users", "--entity-name", "a", "--add-config", "producer_byte_rate=lots"),
         "producer_byte_rate: expected a number"),
        (("alter", "--entity-type", "users", "--entity-name", "a", "--entity-type", "users", "--entity-name", "b",
          "--add-config", "producer_byte_rate=1"), "each of users and clients at most once"),
    ],
)  # fmt: skip
def test_the_commands_own_syntax_is_refused_before_any_request(
    controller: QuotaController, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], problem: str
) -> None:
    line = failure(capsys, "quotas", *argv, "--bootstrap-controller", controller.address)  # type: ignore[attr-defined]
    assert problem in line
    assert controller.requests == 0


@pytest.mark.parametrize(
    "argv",
    [
        ("alter", "--entity-type", "topics"),
        ("alter", "--entity-name", "alice"),
        ("describe", "--entity-default"),
    ],
)
def test_misplaced_entity_options_are_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    failure(capsys, "quotas", *argv, status=2)


def test_the_tables_people_read(controller: QuotaController, capsys: pytest.CaptureFixture[str]) -> None:
    address = controller.address  # type: ignore[attr-defined]
    argv = [
        "quotas",
        "alter",
        "--entity-type",
        "clients",
        "--entity-default",
        "--add-config",
        "producer_byte_rate=1024",
    ]
    assert main([*argv, "--bootstrap-controller", address]) == 0
    assert capsys.readouterr().out == "Altered quotas of client-id=<default>: producer_byte_rate=1024.\n"
    assert main(["quotas", "describe", "--bootstrap-controller", address]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ENTITY", "QUOTAS"]
    assert lines[-1].split() == ["client-id=<default>", "producer_byte_rate=1024"]
