"""``make bench-kafka``'s parts that need no broker: the Tansu runner (with a stand-in
binary that only listens) is stopped however its block ends and reports a binary that
dies at start; the comparison's arguments and arithmetic."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from raftka.command.errors import CliError
from raftka.tools.perf import bench_kafka, tansu

# Listens where --listener-url says, as Tansu would, and ignores SIGTERM if told to.
STAND_IN = """\
import signal, socket, sys, time
url = sys.argv[sys.argv.index("--listener-url") + 1]
host, port = url.removeprefix("tcp://").rsplit(":", 1)
if "{mode}" == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if "{mode}" == "dies":
    sys.exit(3)
server = socket.create_server((host, int(port)))
while True:
    time.sleep(1)
"""


def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str = "listens") -> None:
    script = tmp_path / "tansu"
    script.write_text(f"#!{sys.executable}\n" + STAND_IN.replace("{mode}", mode))
    script.chmod(0o755)
    monkeypatch.setenv(tansu.BINARY_ENV, str(script))


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_tansu_runs_on_the_port_it_advertises_and_is_stopped_when_the_block_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in(tmp_path, monkeypatch)
    with (
        pytest.raises(RuntimeError, match="the load failed"),
        tansu.running_tansu(tmp_path / "tansu.log") as running,
    ):
        pid = running.pid
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert f"tcp://{running.address}".encode() in command
        assert command.count(f"tcp://{running.address}".encode()) == 2  # listener and advertised
        assert b"memory://tansu/" in command
        raise RuntimeError("the load failed")
    assert gone(pid)


def test_tansu_that_ignores_sigterm_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(tmp_path, monkeypatch, "stubborn")
    monkeypatch.setattr(tansu, "STOP_GRACE_S", 0.2)
    with tansu.running_tansu(tmp_path / "tansu.log") as running:
        pid = running.pid
    assert gone(pid)


def test_tansu_that_dies_at_start_is_reported_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in(tmp_path, monkeypatch, "dies")
    log = tmp_path / "tansu.log"
    with (
        pytest.raises(CliError, match=r"Tansu exited with status 3 at start; see .*tansu\.log"),
        tansu.running_tansu(log),
    ):
        pass


def test_a_tansu_binary_that_is_not_executable_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tansu.BINARY_ENV, str(tmp_path / "nothing"))
    with pytest.raises(CliError, match="RAFTKA_TANSU_BIN=.* is not an executable file"):
        tansu.tansu_binary()


def test_replication_factors_are_checked_naming_the_flag() -> None:
    assert bench_kafka.replication_factors("3,1") == [3, 1]
    for bad in ("", "3,x", "0"):
        with pytest.raises(CliError, match="--raftka-replication-factors"):
            bench_kafka.replication_factors(bad)


def test_each_run_is_the_perf_commands_own_parse_and_checks() -> None:
    options = bench_kafka.build_arguments().parse_args(
        ["--records", "500", "--acks", "1", "--linger-ms", "20"]
    )
    produce = bench_kafka.perf_args(
        options, "kafka", "t", ["--bootstrap-server", "127.0.0.1:9", "--replication-factor", "1"]
    )
    assert (produce.records, produce.acks, produce.linger_ms, produce.replication_factor) == (500, "1", 20, 1)
    assert produce.func.__name__ == "run_produce"
    consume = bench_kafka.perf_args(options, "kafka-consume", "t", ["--dir", "/tmp/x"])
    assert (consume.records, consume.dir, consume.func.__name__) == (500, Path("/tmp/x"), "run_consume")
    bad = bench_kafka.build_arguments().parse_args(["--linger-ms", "-1"])
    with pytest.raises(CliError, match="--linger-ms"):
        bench_kafka.perf_args(bad, "kafka", "t", ["--bootstrap-server", "127.0.0.1:9"])


def test_comparison_sums_the_servers_cpu_and_keeps_the_clients_apart() -> None:
    def result(records_per_s: int, cpu: dict[str, float]) -> dict[str, dict]:
        produce = {
            "records_per_s": records_per_s,
            "mb_per_s": 1.0,
            "p50_ms": 1,
            "p99_ms": 2,
            "p999_ms": 3,
            "max_ms": 4,
        }
        produce |= {"errors": 0, "cpu_s_per_million_records": cpu}
        consume = {"records_per_s": 7, "mb_per_s": 0.1, "records": 10, "cpu_s_per_million_records": cpu}
        return {"produce": produce, "consume": consume}

    rows = bench_kafka.comparison_rows(
        {
            "tansu": result(500_000, {"tansu": 0.5, "perf-client": 2.0}),
            "raftka": result(
                150_000, {"controller-1": 0.25, "broker-101": 3.0, "broker-102": 2.5, "perf-client": 2.1}
            ),
        }
    )
    by_name = {row[0]: row[1:] for row in rows}
    assert by_name["produce records/s"] == ["500,000", "150,000"]
    assert by_name["server CPU s / M records (produce)"] == [0.5, 5.75]
    assert by_name["client CPU s / M records (produce)"] == [2.0, 2.1]


def test_tansu_is_stopped_on_ctrl_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in(tmp_path, monkeypatch)
    with pytest.raises(KeyboardInterrupt), tansu.running_tansu(tmp_path / "tansu.log") as running:
        pid = running.pid
        raise KeyboardInterrupt
    assert gone(pid)


def test_the_comparisons_defaults_are_perf_kafkas() -> None:
    options = bench_kafka.build_arguments().parse_args([])
    assert (options.record_size, options.acks, options.partitioner) == (100, "all", "murmur2_random")
    assert (options.linger_ms, options.batch_size, options.partitions) == (5, 1_000_000, 6)
