"""cluster.json round-trips, is found from subdirectories, and liveness is not fooled by
reused pids or zombies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from raftka.command import local
from raftka.command.errors import CliError


def node(tmp_path: Path, node_id: int = 1, pid: int | None = None) -> local.NodeRecord:
    node_dir = tmp_path / f"node-{node_id}"
    node_dir.mkdir(exist_ok=True)
    return local.NodeRecord(
        id=node_id,
        role="controller",
        address=f"127.0.0.1:{19090 + node_id}",
        data_dir=str(node_dir / "data"),
        config=str(node_dir / "server.toml"),
        log=str(node_dir / "server.log"),
        pid=pid,
    )


def sleeper(config: str) -> subprocess.Popen[bytes]:
    """A process whose command line names ``config``, as a node's does."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", config])


def wait_until(condition: Callable[[], bool], timeout_s: float = 5) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    cluster = local.LocalCluster(tmp_path, "abc", [node(tmp_path, 1, pid=42), node(tmp_path, 2)])
    local.save(cluster)
    assert local.exists(tmp_path)
    assert local.load(tmp_path) == cluster
    assert not list(tmp_path.glob("*.tmp"))


def test_load_without_cluster_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="raftka cluster up"):
        local.load(tmp_path)


def test_load_rejects_a_foreign_file(tmp_path: Path) -> None:
    (tmp_path / local.STATE_FILE).write_text('{"nodes": [{"id": 1}]}')
    with pytest.raises(CliError, match="not a raftka cluster file"):
        local.load(tmp_path)
    (tmp_path / local.STATE_FILE).write_text("{")
    with pytest.raises(CliError, match="cannot read"):
        local.load(tmp_path)


def test_node_lookup(tmp_path: Path) -> None:
    cluster = local.LocalCluster(tmp_path, "abc", [node(tmp_path, 1)])
    assert cluster.node(1).id == 1
    with pytest.raises(CliError, match="node 7"):
        cluster.node(7)


def test_resolve_dir_finds_the_cluster_from_a_subdirectory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster_dir = tmp_path / local.DEFAULT_DIR
    cluster_dir.mkdir(parents=True)
    (cluster_dir / local.STATE_FILE).write_text("{}")
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert local.resolve_dir(None) == cluster_dir
    assert local.resolve_dir(Path("elsewhere")) == Path("elsewhere")


def test_resolve_dir_defaults_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert local.resolve_dir(None) == local.DEFAULT_DIR


def test_is_alive_requires_our_config_on_the_command_line(tmp_path: Path) -> None:
    record = node(tmp_path)
    proc = sleeper(record.config)
    try:
        record.pid = proc.pid
        assert wait_until(lambda: local.is_alive(record))  # once it has exec'd
        other = node(tmp_path, 2, pid=proc.pid)  # same pid, different node: a reused pid
        assert not local.is_alive(other)
        os.kill(proc.pid, signal.SIGSTOP)
        assert local.is_alive(record)  # paused is still alive
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        assert wait_until(lambda: not local.is_alive(record))  # a zombie is not alive
    finally:
        proc.kill()
        proc.wait()
    assert not local.is_alive(record)
    assert not local.is_alive(node(tmp_path, 3, pid=None))


def test_start_node_detaches_and_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = node(tmp_path)
    script = "import os, sys; print('hello', os.getcwd()); print('oops', file=sys.stderr)"
    monkeypatch.setattr(local, "server_command", lambda config: [sys.executable, "-c", script, config])
    proc = local.start_node(record)
    assert proc.wait(timeout=10) == 0
    assert record.pid == proc.pid
    log = Path(record.log).read_text()
    assert f"hello {tmp_path / 'node-1'}" in log
    assert "oops" in log
    assert local.last_log_line(record) == "oops"


def test_started_node_has_its_own_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = node(tmp_path)
    monkeypatch.setattr(
        local, "server_command", lambda config: [sys.executable, "-c", "import time; time.sleep(60)", config]
    )
    proc = local.start_node(record)
    try:
        assert os.getsid(proc.pid) == proc.pid  # Ctrl-C in the operator's shell does not reach it
        assert wait_until(lambda: local.is_alive(record))  # once it has exec'd
    finally:
        proc.kill()
        proc.wait()


def test_server_command_runs_this_python() -> None:
    assert local.server_command("/x/server.toml") == [
        sys.executable,
        "-m",
        "raftka.cli.main",
        "server",
        "--config",
        "/x/server.toml",
    ]


def test_last_log_line_of_a_missing_log_is_empty(tmp_path: Path) -> None:
    assert local.last_log_line(node(tmp_path)) == ""


def test_a_node_in_a_network_namespace_runs_through_ip_netns_exec(tmp_path: Path) -> None:
    record = node(tmp_path)
    assert local.node_command(record) == local.server_command(record.config)
    record.netns = "rk1234-n1"
    assert local.node_command(record) == [
        "ip",
        "netns",
        "exec",
        "rk1234-n1",
        *local.server_command(record.config),
    ]
