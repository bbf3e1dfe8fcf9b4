"""AsyncAdmin/Admin against fake controllers on loopback: how it finds the active
controller, what it retries and for how long, and what it hands back."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import grpc
import pytest

from raftka.client.admin import (
    OFFSET_FETCH_PARTITIONS_MAX,
    TOPICS_PER_REQUEST_MAX,
    Admin,
    AsyncAdmin,
    RetryPolicy,
)
from raftka.client.errors import AdminError
from raftka.client.types import NewTopic, OffsetCommit, PartitionInfo
from raftka.metadata import validation
from raftka.metadata.validation import ValidationError, check_request_bounds
from raftka.v1 import controller_pb2, controller_pb2_grpc

E = controller_pb2.ErrorCode
T = TypeVar("T")
FAST = RetryPolicy(request_timeout_s=1.0, total_timeout_s=3.0, backoff_initial_s=0.005, backoff_max_s=0.02)
TOPIC_ID = bytes(range(16))


def run(body: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(asyncio.wait_for(body(), 10))


class FakeController(controller_pb2_grpc.ControllerServicer):
    """Answers each call with the next scripted Status (then the last one forever)."""

    def __init__(self, *statuses: controller_pb2.Status) -> None:
        self.statuses = list(statuses) or [controller_pb2.Status()]
        self.calls: list[tuple[str, Any]] = []

    def _status(self, method: str, request: Any) -> controller_pb2.Status:
        self.calls.append((method, request))
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    async def ListTopics(self, request: Any, context: Any) -> controller_pb2.ListTopicsResponse:
        response = controller_pb2.ListTopicsResponse(status=self._status("ListTopics", request))
        response.topics.add(name="orders", topic_id=TOPIC_ID, partitions=3)
        return response

    async def CreateTopics(self, request: Any, context: Any) -> controller_pb2.CreateTopicsResponse:
        response = controller_pb2.CreateTopicsResponse(status=self._status("CreateTopics", request))
        for topic in request.topics:
            if topic.name == "taken":
                response.topics.add(name=topic.name, error=E.TOPIC_ALREADY_EXISTS, message="exists")
            else:
                response.topics.add(name=topic.name, topic_id=TOPIC_ID)
        return response

    async def DescribeTopics(self, request: Any, context: Any) -> controller_pb2.DescribeTopicsResponse:
        response = controller_pb2.DescribeTopicsResponse(status=self._status("DescribeTopics", request))
        topic = response.topics.add(name="orders", topic_id=TOPIC_ID)
        topic.partitions.add(
            partition=1, leader=-1, leader_epoch=4, partition_epoch=7, replicas=[102, 103], isr=[]
        )
        topic.partitions.add(
            partition=0, leader=101, leader_epoch=2, partition_epoch=3, replicas=[101, 102], isr=[101, 102]
        )
        return response

    async def OffsetCommit(self, request: Any, context: Any) -> controller_pb2.OffsetCommitResponse:
        response = controller_pb2.OffsetCommitResponse(status=self._status("OffsetCommit", request))
        for topic in request.topics:
            for p in topic.partitions:
                response.partitions.add(topic=topic.topic, partition=p.partition)
        return response


@asynccontextmanager
async def serving(*controllers: FakeController) -> AsyncIterator[list[str]]:
    servers = []
    addresses = []
    for controller in controllers:
        server = grpc.aio.server()
        controller_pb2_grpc.add_ControllerServicer_to_server(controller, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        addresses.append(f"127.0.0.1:{port}")
    try:
        yield addresses
    finally:
        for server in servers:
            await server.stop(None)


def not_controller(controller_id: int = -1, address: str = "") -> controller_pb2.Status:
    return controller_pb2.Status(
        error=E.NOT_CONTROLLER, message="standby", controller_id=controller_id, controller_address=address
    )


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_follows_the_not_controller_hint_and_then_goes_straight_there() -> None:
    async def body() -> None:
        active = FakeController()
        async with serving(active) as [active_address]:
            standby = FakeController(not_controller(2, active_address))
            async with serving(standby) as [standby_address], AsyncAdmin([standby_address], FAST) as admin:
                started = time.monotonic()
                topics = await admin.list_topics()
                assert time.monotonic() - started < 0.5  # a redirect is followed without backoff
                await admin.list_topics()
        assert [t.name for t in topics] == ["orders"]
        assert topics[0].topic_id == "AAECAwQFBgcICQoLDA0ODw"  # Kafka's base64url form
        assert len(standby.calls) == 1
        assert len(active.calls) == 2

    run(body)


def test_retries_retriable_errors_until_they_clear() -> None:
    async def body() -> None:
        flaky = FakeController(
            not_controller(),  # election under way: no controller known yet
            controller_pb2.Status(error=E.REQUEST_TIMED_OUT, message="commit took too long"),
            controller_pb2.Status(),
        )
        async with serving(flaky) as [address], AsyncAdmin([address], FAST) as admin:
            assert len(await admin.list_topics()) == 1
        assert len(flaky.calls) == 3

    run(body)


def test_unreachable_bootstrap_address_is_skipped() -> None:
    async def body() -> None:
        active = FakeController()
        async with serving(active) as [address], AsyncAdmin([closed_port(), address], FAST) as admin:
            assert len(await admin.list_topics()) == 1
        assert len(active.calls) == 1

    run(body)


def test_a_non_retriable_error_raises_at_once_with_code_and_message() -> None:
    async def body() -> None:
        bad = FakeController(
            controller_pb2.Status(error=E.INVALID_REQUEST, message="group: must not be empty")
        )
        async with serving(bad) as [address], AsyncAdmin([address], FAST) as admin:
            with pytest.raises(AdminError) as caught:
                await admin.commit_offsets("", [OffsetCommit("orders", 0, 5)])
        assert (caught.value.code, caught.value.message) == ("INVALID_REQUEST", "group: must not be empty")
        assert str(caught.value) == "INVALID_REQUEST: group: must not be empty"
        assert len(bad.calls) == 1

    run(body)


def test_retries_are_bounded_in_time() -> None:
    async def body() -> None:
        lost = FakeController(not_controller())
        policy = RetryPolicy(
            request_timeout_s=0.2, total_timeout_s=0.3, backoff_initial_s=0.01, backoff_max_s=0.02
        )
        async with serving(lost) as [address], AsyncAdmin([address], policy) as admin:
            started = time.monotonic()
            with pytest.raises(AdminError, match="NOT_CONTROLLER: .* knows none yet .*gave up on ListTopics"):
                await admin.list_topics()
            assert time.monotonic() - started < 1.0
        assert 2 <= len(lost.calls) <= 40

    run(body)


def test_retries_are_bounded_in_attempts_and_name_every_address_asked() -> None:
    async def body() -> None:
        dead = [closed_port(), closed_port()]
        policy = RetryPolicy(max_attempts=4, backoff_initial_s=0.001, backoff_max_s=0.002)
        async with AsyncAdmin(dead, policy) as admin:
            with pytest.raises(AdminError) as caught:
                await admin.list_topics()
        assert caught.value.code == "UNAVAILABLE"
        assert "after 4 attempts" in caught.value.message
        assert all(address in caught.value.message for address in dead)

    run(body)


def test_two_stale_hints_pointing_at_each_other_back_off_instead_of_spinning() -> None:
    async def body() -> None:
        a, b = FakeController(), FakeController()
        async with serving(a, b) as [address_a, address_b]:
            a.statuses = [not_controller(2, address_b)]
            b.statuses = [not_controller(1, address_a)]
            policy = RetryPolicy(total_timeout_s=0.3, backoff_initial_s=0.02, backoff_max_s=0.05)
            async with AsyncAdmin([address_a], policy) as admin:
                with pytest.raises(AdminError, match="NOT_CONTROLLER"):
                    await admin.list_topics()
        assert len(a.calls) + len(b.calls) < 30  # 0.3 s of 20-50 ms backoffs, not a hot loop

    run(body)


def test_per_item_errors_come_back_as_results() -> None:
    async def body() -> None:
        controller = FakeController()
        async with serving(controller) as [address], AsyncAdmin([address], FAST) as admin:
            results = await admin.create_topics(
                [NewTopic("fresh", 3, 2, {"retention.ms": "1000"}), NewTopic("taken", 1, 1)],
                validate_only=True,
            )
        fresh, taken = results
        assert fresh.error is None and fresh.topic_id == "AAECAwQFBgcICQoLDA0ODw"
        fresh.check()
        assert (taken.error, taken.message) == ("TOPIC_ALREADY_EXISTS", "exists")
        with pytest.raises(AdminError, match="TOPIC_ALREADY_EXISTS: taken: exists"):
            taken.check()
        request = controller.calls[0][1]
        assert request.validate_only
        assert dict(request.topics[0].configs) == {"retention.ms": "1000"}
        assert (request.topics[0].num_partitions, request.topics[0].replication_factor) == (3, 2)

    run(body)


def test_sync_facade_describes_topics_as_dataclasses() -> None:
    controller = FakeController()

    async def start() -> tuple[grpc.aio.Server, str]:
        server = grpc.aio.server()
        controller_pb2_grpc.add_ControllerServicer_to_server(controller, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, f"127.0.0.1:{port}"

    # The server runs on a loop in another thread, as a real controller would be elsewhere.
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        server, address = asyncio.run_coroutine_threadsafe(start(), loop).result(5)
        with Admin([address], FAST) as admin:
            [topic] = admin.describe_topics(["orders"])
        assert topic.error is None
        assert topic.partitions == (
            PartitionInfo(0, 101, 2, 3, (101, 102), (101, 102)),
            PartitionInfo(1, -1, 4, 7, (102, 103), ()),
        )
        assert topic.partitions[1].offline and not topic.partitions[0].offline
        asyncio.run_coroutine_threadsafe(server.stop(None), loop).result(5)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_bootstrap_must_name_an_address() -> None:
    with pytest.raises(ValueError, match="bootstrap"):
        AsyncAdmin([" "])


class BoundedController(controller_pb2_grpc.ControllerServicer):
    """Enforces the real controller's request bounds and echoes what each read names."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def _status(self, method: str, request: Any) -> controller_pb2.Status:
        self.calls.append((method, request))
        try:
            check_request_bounds(request, records_max=4096)
        except ValidationError as e:
            return controller_pb2.Status(error=e.code, message=e.message)
        return controller_pb2.Status()

    async def DescribeTopics(self, request: Any, context: Any) -> controller_pb2.DescribeTopicsResponse:
        response = controller_pb2.DescribeTopicsResponse(status=self._status("DescribeTopics", request))
        for name in request.names:
            response.topics.add(name=name, topic_id=TOPIC_ID)
        return response

    async def DescribeConfigs(self, request: Any, context: Any) -> controller_pb2.DescribeConfigsResponse:
        response = controller_pb2.DescribeConfigsResponse(status=self._status("DescribeConfigs", request))
        for name in request.topics:
            response.topics.add(topic=name)
        return response

    async def OffsetFetch(self, request: Any, context: Any) -> controller_pb2.OffsetFetchResponse:
        response = controller_pb2.OffsetFetchResponse(status=self._status("OffsetFetch", request))
        for topic in request.topics:
            for partition in topic.partitions:
                response.offsets.add(topic=topic.topic, partition=partition, offset=partition * 10)
        return response

    async def DeleteTopics(self, request: Any, context: Any) -> controller_pb2.DeleteTopicsResponse:
        return controller_pb2.DeleteTopicsResponse(status=self._status("DeleteTopics", request))


def test_the_client_splits_at_the_controllers_bounds() -> None:
    assert TOPICS_PER_REQUEST_MAX == validation.TOPICS_PER_REQUEST_MAX
    assert OFFSET_FETCH_PARTITIONS_MAX == validation.OFFSET_FETCH_PARTITIONS_MAX


def test_reads_over_a_bound_are_split_transparently() -> None:
    async def body() -> None:
        controller = BoundedController()
        names = [f"t{i}" for i in range(2 * TOPICS_PER_REQUEST_MAX + 1)]
        wanted = {"big": list(range(OFFSET_FETCH_PARTITIONS_MAX + 5)), **{name: [0] for name in names}}
        async with serving(controller) as [address], AsyncAdmin([address], FAST) as admin:
            described = await admin.describe_topics(names)
            configs = await admin.describe_configs(names)
            offsets = await admin.fetch_offsets("g", wanted)
        assert [t.name for t in described] == names and [c.topic for c in configs] == names
        assert [(o.topic, o.partition) for o in offsets] == [(t, p) for t, ids in wanted.items() for p in ids]
        assert all(o.offset == o.partition * 10 for o in offsets)
        requests = [method for method, _ in controller.calls]
        assert requests == ["DescribeTopics"] * 3 + ["DescribeConfigs"] * 3 + ["OffsetFetch"] * 4

    run(body)


def test_a_write_over_a_bound_is_not_split_and_raises_the_controllers_message() -> None:
    async def body() -> None:
        controller = BoundedController()
        names = [f"t{i}" for i in range(TOPICS_PER_REQUEST_MAX + 1)]
        async with serving(controller) as [address], AsyncAdmin([address], FAST) as admin:
            with pytest.raises(
                AdminError, match=r"INVALID_REQUEST: names: 1001 entries, at most 1000 per request"
            ):
                await admin.delete_topics(names)
        assert len(controller.calls) == 1

    run(body)
