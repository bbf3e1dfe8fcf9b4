"""perf metadata against fake controllers on loopback: it finds the active controller
through a standby's hint, creates its topic (or reuses it), keeps N one-record commits
in flight, times only the ones that succeeded, and prints one object per concurrency."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc
import pytest

from raftka.cli.main import main
from raftka.command.errors import CliError
from raftka.tools.perf import perf_metadata
from raftka.v1 import controller_pb2, controller_pb2_grpc

E = controller_pb2.ErrorCode
SERVICE_TIME_S = 0.002
PEAK = 16  # the highest concurrency the tests ask for
HOLD_MAX_S = 0.02


class FakeController(controller_pb2_grpc.ControllerServicer):
    """A standby (with a hint) or the active controller, which fails every ``fail_every``th commit."""

    def __init__(self, hint: str | None = None, fail_every: int = 0) -> None:
        self.hint = hint
        self.fail_every = fail_every
        self.lock = threading.Condition()
        self.created: set[str] = set()
        self.commits: list[controller_pb2.OffsetCommitRequest] = []
        self.in_flight = 0
        self.in_flight_max = 0

    def _status(self) -> controller_pb2.Status:
        if self.hint is None:
            return controller_pb2.Status()
        return controller_pb2.Status(error=E.NOT_CONTROLLER, controller_id=1, controller_address=self.hint)

    def DescribeCluster(self, request: Any, context: Any) -> controller_pb2.DescribeClusterResponse:
        return controller_pb2.DescribeClusterResponse(status=self._status())

    def CreateTopics(self, request: Any, context: Any) -> controller_pb2.CreateTopicsResponse:
        response = controller_pb2.CreateTopicsResponse(status=self._status())
        for topic in request.topics:
            error = E.TOPIC_ALREADY_EXISTS if topic.name in self.created else E.NONE
            self.created.add(topic.name)
            response.topics.add(name=topic.name, error=error)
        return response

    def OffsetCommit(self, request: Any, context: Any) -> controller_pb2.OffsetCommitResponse:
        with self.lock:
            self.commits.append(request)
            number = len(self.commits)
            self.in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self.in_flight)
            self.lock.notify_all()
            # Hold each commit until PEAK are in flight (briefly, at lower concurrency), so
            # the peak the tool reaches shows however the threads happen to be scheduled.
            self.lock.wait_for(lambda: self.in_flight >= PEAK, timeout=HOLD_MAX_S)
        time.sleep(SERVICE_TIME_S)
        with self.lock:
            self.in_flight -= 1
        if self.fail_every and number % self.fail_every == 0:
            return controller_pb2.OffsetCommitResponse(
                status=controller_pb2.Status(error=E.REQUEST_TIMED_OUT, message="slow")
            )
        response = controller_pb2.OffsetCommitResponse(status=self._status())
        response.partitions.add(topic=request.topics[0].topic, partition=0)
        return response


@contextmanager
def serving(controller: FakeController) -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=40))
    controller_pb2_grpc.add_ControllerServicer_to_server(controller, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


@pytest.fixture
def cluster() -> Iterator[tuple[FakeController, list[str]]]:
    """An active controller and a standby pointing to it; only the standby is bootstrap."""
    active = FakeController(fail_every=10)
    with serving(active) as active_address, serving(FakeController(hint=active_address)) as standby:
        yield active, [standby]


def test_keeps_n_one_record_commits_in_flight_at_the_active_controller(cluster) -> None:
    active, bootstrap = cluster
    results = asyncio.run(perf_metadata.measure(bootstrap, [1, 16], duration_s=0.5, warmup_s=0.1))
    assert [r["concurrency"] for r in results] == [1, 16]
    assert active.created == {perf_metadata.TOPIC}
    assert active.in_flight_max == 16
    request = active.commits[-1]
    assert len(request.topics) == 1 and len(request.topics[0].partitions) == 1
    assert len(request.topics[0].partitions[0].metadata) == 100
    for r in results:
        assert r["p50_ms"] >= SERVICE_TIME_S * 1000 and r["p99_ms"] >= r["p50_ms"]
        assert r["error_codes"] == {"REQUEST_TIMED_OUT": r["errors"]} and r["errors"] > 0
        assert r["ops_per_s"] > 0 and r["controller"] != bootstrap[0]


def test_prints_one_json_object_per_concurrency_and_reuses_the_topic(cluster, capsys) -> None:
    active, bootstrap = cluster
    active.created.add(perf_metadata.TOPIC)  # left by an earlier run
    args = ["perf", "metadata", "--bootstrap-controller", bootstrap[0], "--concurrency", "1,4"]
    assert main([*args, "--duration", "0.3", "--warmup", "0", "--output", "json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["concurrency"] for r in results] == [1, 4]
    assert {"ops_per_s", "p50_ms", "p99_ms"} <= set(results[0])


def test_no_active_controller_is_a_one_line_error(monkeypatch) -> None:
    monkeypatch.setattr(perf_metadata, "FIND_TIMEOUT_S", 0.3)
    with serving(FakeController(hint="")) as standby, pytest.raises(CliError) as error:
        asyncio.run(perf_metadata.measure([standby], [1], duration_s=0.1, warmup_s=0))
    assert str(error.value) == f"no active controller found within 0.3 s ({standby}: NOT_CONTROLLER)"


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--concurrency", "0"], "--concurrency"),
        (["--concurrency", "a,b"], "--concurrency"),
        (["--duration", "0"], "--duration"),
    ],
)
def test_bad_flags_fail_before_any_load(flags, problem, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["perf", "metadata", "--bootstrap-controller", "127.0.0.1:1", *flags])
    assert exit_info.value.code == 1
    assert problem in capsys.readouterr().err


def test_cpu_is_sampled_around_the_measured_window_only(cluster) -> None:
    active, bootstrap = cluster
    samples: list[dict[str, float]] = []

    def sampler() -> dict[str, float]:
        samples.append({"controller-1": 1.0 + len(samples), "broker-4": 0.5})
        return samples[-1]

    results = asyncio.run(perf_metadata.measure(bootstrap, [2], duration_s=0.3, warmup_s=0.1, cpu=sampler))
    assert len(samples) == 2, "one sample when measuring starts, one when it stops"
    ops = results[0]["ops"]
    assert results[0]["cpu_ms_per_op"] == {"controller-1": round(1e3 / ops, 3), "broker-4": 0.0}


def test_cpu_needs_the_local_cluster(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["perf", "metadata", "--bootstrap-controller", "127.0.0.1:1", "--cpu"])
    assert exit_info.value.code == 1
    assert "--cpu" in capsys.readouterr().err
