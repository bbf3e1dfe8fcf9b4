"""``raftka perf quotas`` on a tiny workload against a real broker's Kafka listener: both
runs of the well-behaved producer are measured and reported with their ratio, the greedy
producer gets through, and the quota it set is removed at the end. (The measurement
itself, 10x a quota on a quiet machine, is for people to run, not for this test.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raftka.cli.main import main
from tests.unit.kafka_wire import broker_thread

TOPIC = "perf-quotas"


def test_the_tool_runs_on_a_tiny_workload(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("confluent_kafka")
    with broker_thread(tmp_path, {TOPIC: 1}) as served:
        status = main([
            "perf", "quotas", "--bootstrap-server", served.bootstrap, "--topic", TOPIC,
            "--quota-bytes", "20000", "--greedy-factor", "10", "--steady-rate", "20", "--record-size", "100",
            "--duration", "1", "--output", "json",
        ])  # fmt: skip
        left = served.run(_quotas(served))
    out, _ = capsys.readouterr()
    assert status == 0
    report = json.loads(out[out.rfind("\n{\n") + 1 :])  # after the in-process broker's log lines
    for run in ("steady_solo", "steady_beside_greedy"):
        assert report[run]["records"] == 20 and report[run]["failed"] == 0
        assert report[run]["p99_ms"] > 0
    assert report["p99_ratio"] == pytest.approx(
        report["steady_beside_greedy"]["p99_ms"] / report["steady_solo"]["p99_ms"], abs=0.001
    )
    assert report["greedy_bytes_per_s"] > 0
    assert report["greedy_offered_bytes_per_s"] == 200_000
    assert left == {}, "the quota the run set is removed"


async def _quotas(served) -> dict:  # noqa: ANN001
    return dict(served.broker.api.image.client_quotas)
