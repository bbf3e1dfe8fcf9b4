"""topics, configs, brokers and offsets commands against a fake controller on loopback:
what each sends, the shapes it prints (table and JSON), and that every bad input ends
as one line with a non-zero exit, whether the CLI or the server catches it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from raftka.cli.main import main
from raftka.command import local
from raftka.v1 import controller_pb2, controller_pb2_grpc

E = controller_pb2.ErrorCode
TOPIC_ID = bytes(range(16))
TOPIC_ID_STR = "AAECAwQFBgcICQoLDA0ODw"


class FakeController(controller_pb2_grpc.ControllerServicer):
    """Knows one topic, ``orders`` (partition 1 offline), and records every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []

    def _seen(self, method: str, request: Any) -> None:
        self.requests.append((method, request))

    def CreateTopics(self, request: Any, context: Any) -> controller_pb2.CreateTopicsResponse:
        self._seen("CreateTopics", request)
        response = controller_pb2.CreateTopicsResponse(status=controller_pb2.Status())
        for t in request.topics:
            if t.name == "orders":
                response.topics.add(
                    name=t.name, error=E.TOPIC_ALREADY_EXISTS, message="Topic 'orders' already exists"
                )
            elif t.name == "bad/name":
                response.topics.add(
                    name=t.name, error=E.INVALID_TOPIC_EXCEPTION, message="name: '/' is not allowed"
                )
            else:
                response.topics.add(name=t.name, topic_id=TOPIC_ID)
        return response

    def DeleteTopics(self, request: Any, context: Any) -> controller_pb2.DeleteTopicsResponse:
        self._seen("DeleteTopics", request)
        response = controller_pb2.DeleteTopicsResponse(status=controller_pb2.Status())
        for name in request.names:
            if name == "orders":
                response.topics.add(name=name, topic_id=TOPIC_ID)
            else:
                response.topics.add(name=name, error=E.UNKNOWN_TOPIC_OR_PARTITION, message="no such topic")
        return response

    def CreatePartitions(self, request: Any, context: Any) -> controller_pb2.CreatePartitionsResponse:
        self._seen("CreatePartitions", request)
        response = controller_pb2.CreatePartitionsResponse(status=controller_pb2.Status())
        for t in request.topics:
            if t.count <= 2:
                response.topics.add(
                    name=t.name, error=E.INVALID_PARTITIONS, message="orders has 2 partitions"
                )
            else:
                response.topics.add(name=t.name, topic_id=TOPIC_ID)
        return response

    def ListTopics(self, request: Any, context: Any) -> controller_pb2.ListTopicsResponse:
        self._seen("ListTopics", request)
        response = controller_pb2.ListTopicsResponse(status=controller_pb2.Status())
        response.topics.add(name="orders", topic_id=TOPIC_ID, partitions=2)
        return response

    def DescribeTopics(self, request: Any, context: Any) -> controller_pb2.DescribeTopicsResponse:
        self._seen("DescribeTopics", request)
        response = controller_pb2.DescribeTopicsResponse(status=controller_pb2.Status())
        for name in request.names or ["orders"]:
            if name != "orders":
                response.topics.add(name=name, error=E.UNKNOWN_TOPIC_OR_PARTITION, message="no such topic")
                continue
            topic = response.topics.add(name="orders", topic_id=TOPIC_ID)
            topic.partitions.add(
                partition=0,
                leader=101,
                leader_epoch=2,
                partition_epoch=5,
                replicas=[101, 102],
                isr=[101, 102],
            )
            topic.partitions.add(
                partition=1,
                leader=-1,
                leader_epoch=3,
                partition_epoch=6,
                replicas=[102, 103],
                isr=[],
                elr=[103],
                adding_replicas=[103],
                removing_replicas=[102],
            )
        return response

    def ElectLeaders(self, request: Any, context: Any) -> controller_pb2.ElectLeadersResponse:
        self._seen("ElectLeaders", request)
        response = controller_pb2.ElectLeadersResponse(status=controller_pb2.Status())
        response.partitions.add(
            topic="orders", partition=1, error=E.PREFERRED_LEADER_NOT_AVAILABLE, message="102 is fenced"
        )
        response.partitions.add(topic="orders", partition=0)
        return response

    def DescribeConfigs(self, request: Any, context: Any) -> controller_pb2.DescribeConfigsResponse:
        self._seen("DescribeConfigs", request)
        response = controller_pb2.DescribeConfigsResponse(status=controller_pb2.Status())
        for name in request.topics:
            topic = response.topics.add(topic=name)
            topic.entries.add(name="cleanup.policy", value="delete", is_default=True)
            topic.entries.add(name="retention.ms", value="1000", is_default=False)
        for name in request.brokers:
            broker = response.brokers.add(broker=name)
            broker.entries.add(name="leader.replication.throttled.rate", value="1000", is_default=False)
        return response

    def AlterConfigs(self, request: Any, context: Any) -> controller_pb2.AlterConfigsResponse:
        self._seen("AlterConfigs", request)
        response = controller_pb2.AlterConfigsResponse(status=controller_pb2.Status())
        for t in request.topics:
            unknown = [op.name for op in t.ops if "." not in op.name]
            if unknown:
                response.topics.add(
                    name=t.topic, error=E.INVALID_CONFIG, message=f"{unknown[0]}: unknown config"
                )
            else:
                response.topics.add(name=t.topic, topic_id=TOPIC_ID)
        for b in request.brokers:
            response.brokers.add(broker=b.broker)
        return response

    def UnregisterBroker(self, request: Any, context: Any) -> controller_pb2.UnregisterBrokerResponse:
        self._seen("UnregisterBroker", request)
        status = controller_pb2.Status()
        if request.broker_id != 102:
            status = controller_pb2.Status(
                error=E.BROKER_ID_NOT_REGISTERED,
                message=f"broker_id: {request.broker_id} is not a registered broker",
            )
        return controller_pb2.UnregisterBrokerResponse(status=status)

    def DescribeCluster(self, request: Any, context: Any) -> controller_pb2.DescribeClusterResponse:
        self._seen("DescribeCluster", request)
        response = controller_pb2.DescribeClusterResponse(
            status=controller_pb2.Status(), cluster_id="c1", controller_id=2
        )
        for broker_id, rack, fenced, epoch in ((102, "", True, 40), (101, "r1", False, 12)):
            broker = response.brokers.add(broker_id=broker_id, rack=rack, fenced=fenced, epoch=epoch)
            broker.endpoints.add(name="GRPC", host="127.0.0.1", port=19000 + broker_id)
            broker.endpoints.add(name="DATA", host="127.0.0.1", port=9000 + broker_id)
        return response

    def AlterPartitionReassignments(
        self, request: Any, context: Any
    ) -> controller_pb2.AlterPartitionReassignmentsResponse:
        self._seen("AlterPartitionReassignments", request)
        response = controller_pb2.AlterPartitionReassignmentsResponse(status=controller_pb2.Status())
        for t in request.topics:
            for p in t.partitions:
                response.partitions.add(topic=t.name, partition=p.partition)
        return response

    def ListPartitionReassignments(
        self, request: Any, context: Any
    ) -> controller_pb2.ListPartitionReassignmentsResponse:
        self._seen("ListPartitionReassignments", request)
        return controller_pb2.ListPartitionReassignmentsResponse(status=controller_pb2.Status())

    def OffsetCommit(self, request: Any, context: Any) -> controller_pb2.OffsetCommitResponse:
        self._seen("OffsetCommit", request)
        response = controller_pb2.OffsetCommitResponse(status=controller_pb2.Status())
        for t in request.topics:
            for p in t.partitions:
                error = E.NONE if t.topic == "orders" and p.partition < 2 else E.UNKNOWN_TOPIC_OR_PARTITION
                response.partitions.add(
                    topic=t.topic,
                    partition=p.partition,
                    error=error,
                    message="" if error == E.NONE else "no such partition",
                )
        return response

    def OffsetFetch(self, request: Any, context: Any) -> controller_pb2.OffsetFetchResponse:
        self._seen("OffsetFetch", request)
        if not request.group:
            return controller_pb2.OffsetFetchResponse(
                status=controller_pb2.Status(error=E.INVALID_GROUP_ID, message="group: must not be empty")
            )
        response = controller_pb2.OffsetFetchResponse(status=controller_pb2.Status())
        response.offsets.add(topic="orders", partition=1, offset=-1)
        response.offsets.add(topic="orders", partition=0, offset=42, metadata="m")
        return response


@pytest.fixture
def controller() -> Iterator[FakeController]:
    with fake_controller() as fake:
        yield fake


@contextlib.contextmanager
def fake_controller() -> Iterator[FakeController]:
    """The fake controller served on a loopback port (``fake.address``)."""
    fake = FakeController()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    controller_pb2_grpc.add_ControllerServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    fake.address = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
    try:
        yield fake
    finally:
        server.stop(None)


def cli(controller: FakeController, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run a command against the fake controller; its stdout."""
    assert main([*argv, "--bootstrap-controller", controller.address]) == 0  # type: ignore[attr-defined]
    out, err = capsys.readouterr()
    assert err == ""
    return out


def cli_json(controller: FakeController, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    return json.loads(cli(controller, capsys, *argv, "--output", "json"))


def failure(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 1) -> str:
    """Run a command that must fail: exit ``status``, nothing on stdout, one line on stderr."""
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == status
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("raftka: error: ")
    return line.removeprefix("raftka: error: ")


# topics -----------------------------------------------------------------------------------


def test_topics_create_sends_the_topic_and_prints_its_id(
    controller: FakeController, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ("topics", "create", "events", "--partitions", "3", "--replication-factor", "2")
    view = cli_json(
        controller, capsys, *argv, "--config", "retention.ms=1000", "--config", "cleanup.policy=delete"
    )
    assert view == {
        "name": "events",
        "topic_id": TOPIC_ID_STR,
        "partitions": 3,
        "replication_factor": 2,
        "configs": {"retention.ms": "1000", "cleanup.policy": "delete"},
        "validate_only": False,
    }
    method, request = controller.requests[-1]
    assert method == "CreateTopics" and not request.validate_only
    [topic] = request.topics
    assert (topic.name, topic.num_partitions, topic.replication_factor) == ("events", 3, 2)
    assert dict(topic.configs) == {"retention.ms": "1000", "cleanup.policy": "delete"}
    assert cli(controller, capsys, *argv) == f"Created topic events (id {TOPIC_ID_STR}).\n"
    assert "nothing was created" in cli(controller, capsys, *argv, "--validate-only")
    assert controller.requests[-1][1].validate_only


def test_topics_list_and_describe_shapes(
    controller: FakeController, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_json(controller, capsys, "topics", "list") == [
        {"name": "orders", "topic_id": TOPIC_ID_STR, "partitions": 2}
    ]
    assert cli(controller, capsys, "topics", "list").splitlines()[0].split() == [
        "NAME",
        "TOPIC_ID",
        "PARTITIONS",
    ]

    [orders] = cli_json(controller, capsys, "topics", "describe", "orders")
    assert controller.requests[-1][1].names == ["orders"]
    assert orders["name"] == "orders" and orders["topic_id"] == TOPIC_ID_STR
    assert orders["partitions"] == [
        {
            "log_start_offset": None,  # no brokers to ask: a controller-only fake
            "high_watermark": None,
            "partition": 0,
            "leader": 101,
            "leader_epoch": 2,
            "partition_epoch": 5,
            "replicas": [101, 102],
            "isr": [101, 102],
            "elr": [],
            "adding": [],
            "removing": [],
            "offline": False,
            "under_replicated": False,
        },
        {
            "log_start_offset": None,
            "high_watermark": None,
            "partition": 1,
            "leader": -1,
            "leader_epoch": 3,
            "partition_epoch": 6,
            "replicas": [102, 103],
            "isr": [],
            "elr": [103],
            "adding": [103],
            "removing": [102],
            "offline": True,
            "under_replicated": True,
        },
    ]
    table = cli(controller, capsys, "topics", "describe").splitlines()
    assert controller.requests[-1][1].names == []  # no name: every topic
    assert table[0] == f"Topic: orders  TopicId: {TOPIC_ID_STR}  PartitionCount: 2  ReplicationFactor: 2"
    assert table[1].split() == [
        "PARTITION",
        "LEADER",
        "LEADER_EPOCH",
        "REPLICAS",
        "ISR",
        "ELR",
        "REASSIGNING",
        "LOG_START",
        "HIGH_WATERMARK",
        "STATUS",
    ]
    assert table[2].split() == ["0", "101", "2", "101,102", "101,102", "-", "-", "-", "-", "ok"]
    assert table[3].split() == ["1", "none", "3", "102,103", "-", "103", "+103/-102", "-", "-", "offline"]


def test_topics_delete_and_alter(controller: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_json(controller, capsys, "topics", "delete", "orders") == {
        "name": "orders",
        "topic_id": TOPIC_ID_STR,
        "deleted": True,
    }
    assert cli(controller, capsys, "topics", "alter", "orders", "--partitions", "4") == (
        "Topic orders now has 4 partitions.\n"
    )
    method, request = controller.requests[-1]
    assert method == "CreatePartitions" and [(t.name, t.count) for t in request.topics] == [("orders", 4)]


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (
            ("topics", "create", "orders", "--partitions", "1", "--replication-factor", "1"),
            "TOPIC_ALREADY_EXISTS: orders: Topic 'orders' already exists",
        ),
        (
            ("topics", "create", "bad/name", "--partitions", "1", "--replication-factor", "1"),
            "INVALID_TOPIC_EXCEPTION: bad/name: name: '/' is not allowed",
        ),
        (("topics", "describe", "nope"), "UNKNOWN_TOPIC_OR_PARTITION: nope: no such topic"),
        (("topics", "delete", "nope"), "UNKNOWN_TOPIC_OR_PARTITION: nope: no such topic"),
        (
            ("topics", "alter", "orders", "--partitions", "2"),
            "INVALID_PARTITIONS: orders: orders has 2 partitions",
        ),
        (
            ("configs", "alter", "--topic", "orders", "--set", "bogus=1"),
            "INVALID_CONFIG: orders: bogus: unknown config",
        ),
        (
            ("offsets", "commit", "--group", "g", "--topic", "orders", "--partition", "7", "--offset", "1"),
            "UNKNOWN_TOPIC_OR_PARTITION: orders-7: no such partition",
        ),
        (("offsets", "fetch", "--group", ""), "INVALID_GROUP_ID: group: must not be empty"),
    ],
)
def test_server_errors_are_one_line_with_their_code(
    controller: FakeController, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], problem: str
) -> None:
    assert failure(capsys, *argv, "--bootstrap-controller", controller.address) == problem  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (
            (
                "topics",
                "create",
                "t",
                "--partitions",
                "1",
                "--replication-factor",
                "1",
                "--config",
                "retention.ms",
            ),
            "--config: expected KEY=VALUE, got 'retention.ms'",
        ),
        (
            ("topics", "create", "t", "--partitions", "1", "--replication-factor", "1", "--config", "=5"),
            "--config: expected KEY=VALUE, got '=5'",
        ),
        (
            (
                "topics",
                "create",
                "t",
                "--partitions",
                "1",
                "--replication-factor",
                "1",
                "--config",
                "a.b=1",
                "--config",
                "a.b=2",
            ),
            "--config: a.b is given more than once",
        ),
        (
            ("configs", "alter", "--topic", "t"),
            "configs alter: give at least one --set KEY=VALUE or --delete KEY",
        ),
        (
            ("configs", "alter", "--topic", "t", "--set", "a.b=1", "--delete", "a.b"),
            "a.b: given to both --set and --delete, or to --delete twice",
        ),
        (
            ("configs", "alter", "--topic", "t", "--delete", "a=b"),
            "--delete: expected a config name, got 'a=b'",
        ),
        (
            ("configs", "describe", "--broker", "b1"),
            "--broker: expected a broker id, got 'b1'",
        ),
        (
            ("topics", "list", "--bootstrap-controller", "nohost"),
            "--bootstrap-controller: expected HOST:PORT with a port in 1-65535, got 'nohost'",
        ),
        (
            ("topics", "list", "--timeout-s", "0", "--bootstrap-controller", "127.0.0.1:1"),
            "--timeout-s: expected a positive number, got 0",
        ),
    ],
)
def test_malformed_syntax_is_caught_before_any_request(
    controller: FakeController, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], problem: str
) -> None:
    assert failure(capsys, *argv) == problem
    assert controller.requests == []


@pytest.mark.parametrize(
    "argv",
    [
        ("topics", "create", "t", "--partitions", "x", "--replication-factor", "1"),
        ("topics", "create", "t", "--replication-factor", "1"),
        ("offsets", "commit", "--group", "g", "--topic", "t", "--partition", "0"),
        ("configs", "describe"),
        ("configs", "describe", "--topic", "t", "--broker", "1"),
        ("brokers", "list", "--output", "xml"),
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]) -> None:
    assert "--help" in failure(capsys, *argv, status=2)


def test_no_controller_answering_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    problem = failure(capsys, "topics", "list", "--bootstrap-controller", "127.0.0.1:1", "--timeout-s", "0.3")
    assert problem.startswith("UNAVAILABLE: 127.0.0.1:1: ")
    assert "gave up on ListTopics" in problem


def test_without_flags_the_local_cluster_is_used(
    controller: FakeController,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster_dir = tmp_path / ".raftka" / "local"
    cluster_dir.mkdir(parents=True)
    nodes = [
        local.NodeRecord(1, "controller", controller.address, "d", "c", "l"),  # type: ignore[attr-defined]
        local.NodeRecord(
            101, "broker", "127.0.0.1:1", "d", "c", "l", data_address="127.0.0.1:2"
        ),  # never asked: brokers serve no admin API
    ]
    local.save(local.LocalCluster(cluster_dir, "c1", nodes))
    monkeypatch.chdir(tmp_path)
    assert main(["topics", "list", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["name"] == "orders"


# configs, brokers, offsets -----------------------------------------------------------------


def test_configs_describe_and_alter(controller: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_json(controller, capsys, "configs", "describe", "--topic", "orders") == {
        "topic": "orders",
        "configs": [
            {"name": "cleanup.policy", "value": "delete", "is_default": True},
            {"name": "retention.ms", "value": "1000", "is_default": False},
        ],
    }
    table = cli(controller, capsys, "configs", "describe", "--topic", "orders").splitlines()
    assert table[1].split() == ["NAME", "VALUE", "DEFAULT"] and table[2].split() == [
        "cleanup.policy",
        "delete",
        "yes",
    ]

    view = cli_json(
        controller,
        capsys,
        "configs",
        "alter",
        "--topic",
        "orders",
        "--set",
        "retention.ms=5",
        "--delete",
        "segment.bytes",
    )
    assert view == {
        "topic": "orders",
        "set": {"retention.ms": "5"},
        "deleted": ["segment.bytes"],
        "validate_only": False,
    }
    [topic] = controller.requests[-1][1].topics
    assert [(op.name, op.value, op.op) for op in topic.ops] == [
        ("retention.ms", "5", controller_pb2.ALTER_CONFIG_SET),
        ("segment.bytes", "", controller_pb2.ALTER_CONFIG_DELETE),
    ]


def test_broker_configs_describe_and_alter_one_broker_or_the_defaults(
    controller: FakeController, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_json(controller, capsys, "configs", "describe", "--broker", "101") == {
        "broker": "101",
        "configs": [{"name": "leader.replication.throttled.rate", "value": "1000", "is_default": False}],
    }
    assert list(controller.requests[-1][1].brokers) == ["101"]
    rate = "follower.replication.throttled.rate"
    view = cli_json(controller, capsys, "configs", "alter", "--broker-defaults", "--set", f"{rate}=5")
    assert view == {"broker": "", "set": {rate: "5"}, "deleted": [], "validate_only": False}
    [broker] = controller.requests[-1][1].brokers
    assert (broker.broker, [(op.name, op.value) for op in broker.ops]) == ("", [(rate, "5")])
    line = cli(controller, capsys, "configs", "alter", "--broker", "102", "--delete", rate)
    assert line.strip() == f"Altered configs of broker 102: {rate} (default)."


def test_elect_leaders_reports_each_partition_and_fails_if_one_could_not_move(
    controller: FakeController, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["topics", "elect-leaders", "orders", "--partition", "0", "--partition", "1"]
    assert main([*argv, "--bootstrap-controller", controller.address, "--output", "json"]) == 1  # type: ignore[attr-defined]
    assert json.loads(capsys.readouterr().out) == [
        {"topic": "orders", "partition": 0, "error": None, "message": ""},
        {
            "topic": "orders",
            "partition": 1,
            "error": "PREFERRED_LEADER_NOT_AVAILABLE",
            "message": "102 is fenced",
        },
    ]
    (request,) = [r for name, r in controller.requests if name == "ElectLeaders"]  # type: ignore[attr-defined]
    assert [(t.topic, list(t.partitions)) for t in request.topics] == [("orders", [0, 1])]
    failure(capsys, "topics", "elect-leaders", "--partition", "3", status=1)


def test_brokers_list(controller: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_json(controller, capsys, "brokers", "list") == [
        {
            "id": 101,
            "address": "127.0.0.1:9101",
            "listeners": ["GRPC://127.0.0.1:19101", "DATA://127.0.0.1:9101"],
            "rack": "r1",
            "fenced": False,
            "epoch": 12,
            "in_controlled_shutdown": False,
        },
        {
            "id": 102,
            "address": "127.0.0.1:9102",
            "listeners": ["GRPC://127.0.0.1:19102", "DATA://127.0.0.1:9102"],
            "rack": "",
            "fenced": True,
            "epoch": 40,
            "in_controlled_shutdown": False,
        },
    ]
    table = cli(controller, capsys, "brokers", "list").splitlines()
    assert table[0].split() == ["ID", "ADDRESS", "RACK", "FENCED", "EPOCH", "SHUTTING_DOWN"]
    assert table[1].split() == ["101", "127.0.0.1:9101", "r1", "no", "12", "no"]
    assert table[2].split() == ["102", "127.0.0.1:9102", "-", "yes", "40", "no"]
    assert table[3] == "Active controller: 2"


def test_brokers_unregister(controller: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_json(controller, capsys, "brokers", "unregister", "102") == {
        "broker": 102,
        "unregistered": True,
    }
    assert controller.requests[-1] == (
        "UnregisterBroker",
        controller_pb2.UnregisterBrokerRequest(broker_id=102),
    )
    assert cli(controller, capsys, "brokers", "unregister", "102").strip() == "Unregistered broker 102."
    problem = failure(capsys, "brokers", "unregister", "7", "--bootstrap-controller", controller.address)  # type: ignore[attr-defined]
    assert problem == "BROKER_ID_NOT_REGISTERED: broker_id: 7 is not a registered broker"


def test_offsets_commit_and_fetch(controller: FakeController, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("offsets", "commit", "--group", "g1", "--topic", "orders", "--partition", "0", "--offset", "42")
    assert cli_json(controller, capsys, *argv, "--metadata", "m") == {
        "group": "g1",
        "topic": "orders",
        "partition": 0,
        "offset": 42,
        "metadata": "m",
    }
    request = controller.requests[-1][1]
    assert request.group == "g1"
    assert [
        (t.topic, [(p.partition, p.offset, p.metadata) for p in t.partitions]) for t in request.topics
    ] == [("orders", [(0, 42, "m")])]
    assert cli_json(controller, capsys, "offsets", "fetch", "--group", "g1", "--topic", "orders") == {
        "group": "g1",
        "offsets": [
            {"topic": "orders", "partition": 0, "offset": 42, "metadata": "m"},
            {"topic": "orders", "partition": 1, "offset": -1, "metadata": ""},
        ],
    }
    assert [(t.topic, list(t.partitions)) for t in controller.requests[-1][1].topics] == [("orders", [])]
    cli(controller, capsys, "offsets", "fetch", "--group", "g1")
    assert list(controller.requests[-1][1].topics) == []  # no --topic: everything the group committed
