"""perf --cpu: CPU time read from /proc, and per-operation figures from two samples."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raftka.command.errors import CliError
from raftka.command.local import NodeRecord
from raftka.tools.perf import proc_cpu


def test_cpu_seconds_parses_a_command_name_with_spaces_and_parens(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    ticks = proc_cpu.CLOCK_TICKS_PER_S
    fields = ["S", *["0"] * 10, str(3 * ticks), str(ticks), *["0"] * 30]
    (tmp_path / "42" / "stat").write_text(f"42 (raftka (x) y) {' '.join(fields)}\n")
    assert proc_cpu.cpu_seconds(42, tmp_path) == 4.0


def test_cpu_seconds_of_this_process_grows_with_work() -> None:
    before = proc_cpu.cpu_seconds(os.getpid())
    deadline = before + 0.05
    while proc_cpu.cpu_seconds(os.getpid()) < deadline:
        sum(range(10_000))
    assert proc_cpu.cpu_seconds(os.getpid()) >= deadline


def test_a_process_that_is_gone_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="process 7"):
        proc_cpu.cpu_seconds(7, tmp_path)


def test_sample_refuses_nodes_that_are_not_running() -> None:
    node = NodeRecord(id=2, role="broker", address="", data_dir="", config="", log="", pid=None)
    with pytest.raises(CliError, match="broker-2"):
        proc_cpu.sample([node])


def test_per_operation_ms() -> None:
    before = {"controller-1": 1.0, "broker-4": 2.0}
    after = {"controller-1": 1.5, "broker-4": 2.1}
    assert proc_cpu.per_operation_ms(before, after, 100) == {"controller-1": 5.0, "broker-4": 1.0}
    assert proc_cpu.per_operation_ms(before, after, 0) == {}
