"""The raftka command's contract: a user error is one line on stderr, `raftka: error: ...`,
exit 2 for usage and 1 for a failure, never a traceback; the storage and log commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from raftka.cli.main import main
from raftka.node.config import NodeConfig, Voter, render_toml
from raftka.raft.batch import Batch, BatchKind
from raftka.raft.control import NOOP_RECORD, encode_leader_change
from raftka.raft.effects import Write
from raftka.raft.storage.file import FileStorage
from raftka.raft.storage.meta import read_bootstrap_voters, read_meta

REPO = Path(__file__).resolve().parents[2]


def raftka(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run the command as an operator would, so the exit status and stderr are the real ones."""
    return subprocess.run(
        [sys.executable, "-m", "raftka.cli.main", *argv], capture_output=True, text=True, cwd=cwd, timeout=60
    )


def write_config(tmp_path: Path, node_id: int = 1) -> Path:
    voters = (Voter(1, "127.0.0.1", 19091), Voter(2, "127.0.0.1", 19092), Voter(3, "127.0.0.1", 19093))
    config = NodeConfig(
        node_id=node_id, data_dir=tmp_path / "data", voters=voters, listener="127.0.0.1:19091"
    )
    path = tmp_path / "server.toml"
    path.write_text(render_toml(config))
    return path


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        ((), "the following arguments are required: COMMAND"),
        (("nope",), "invalid choice: 'nope'"),
        (("server",), "the following arguments are required: --config"),
        (("quorum", "describe"), "one of the arguments --status --replication is required"),
        (("quorum", "describe", "--status", "--replication"), "not allowed with argument"),
        (("cluster", "status", "--output", "xml"), "invalid choice: 'xml'"),
        (("chaos", "kill-leader", "--signal", "TERM"), "invalid choice: 'TERM'"),
        (("cluster", "up", "--controllers", "three"), "invalid int value: 'three'"),
        (("storage", "format", "--config", "x"), "the following arguments are required: --cluster-id"),
    ],
)
def test_usage_error_is_one_line_with_status_2(
    argv: tuple[str, ...], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = error_line(argv, 2, capsys)
    assert problem in line
    assert "--help" in line


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (("server", "--config", "/nonexistent/server.toml"), "cannot read config"),
        (("quorum", "describe", "--status", "--dir", "/nonexistent"), "no local cluster in /nonexistent"),
        (("quorum", "describe", "--status", "--bootstrap-controller", "nohost"), "expected HOST:PORT"),
        (("cluster", "status", "--dir", "/nonexistent"), "raftka cluster up"),
        (("log", "dump", "/nonexistent"), "no such file or directory"),
        (("chaos", "kill-leader", "--rounds", "0"), "--rounds: expected 1 or more"),
    ],
)
def test_runtime_error_is_one_line_with_status_1(
    argv: tuple[str, ...], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert problem in error_line(argv, 1, capsys)


def error_line(argv: tuple[str, ...], status: int, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == status
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("raftka: error: ")
    return line


def test_a_real_process_prints_no_traceback(tmp_path: Path) -> None:
    usage = raftka("quorum", "describe")
    assert (usage.returncode, usage.stdout) == (2, "")
    assert usage.stderr.startswith("raftka: error: one of the arguments") and usage.stderr.count("\n") == 1
    failure = raftka("server", "--config", str(write_config(tmp_path)))  # storage not formatted
    assert failure.returncode == 1
    assert failure.stderr.startswith("raftka: error: storage at ") and failure.stderr.count("\n") == 1


def test_server_refuses_unformatted_storage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "is not formatted" in error_line(("server", "--config", str(write_config(tmp_path))), 1, capsys)


def test_bad_config_names_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path)
    path.write_text(path.read_text().replace("fetch_max_wait_ms = 250", "fetch_max_wait_ms = 5000"))
    line = error_line(("server", "--config", str(path)), 1, capsys)
    assert line == f"raftka: error: {path}: raft.fetch_max_wait_ms: must be below raft.fetch_timeout_ms"


def test_random_uuid_looks_like_kafkas(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["storage", "random-uuid"]) == 0
    cluster_id = capsys.readouterr().out.strip()
    assert len(cluster_id) == 22 and not cluster_id.startswith("-")


def test_format_then_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(write_config(tmp_path, node_id=1))
    assert main(["storage", "format", "--config", config, "--cluster-id", "c1", "--output", "json"]) == 0
    formatted = json.loads(capsys.readouterr().out)
    assert len(formatted.pop("directory_id")) == 22  # KIP-858: random per format
    assert formatted == {
        "data_dir": str(tmp_path / "data"),
        "cluster_id": "c1",
        "node_id": 1,
        "formatted": True,
    }
    assert main(["storage", "format", "--config", config, "--cluster-id", "c1"]) == 0
    assert "already formatted" in capsys.readouterr().out
    assert main(["storage", "info", "--config", config, "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["cluster_id"] == "c1"


def test_format_a_dynamic_quorum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """KIP-853: --standalone and --initial-controllers write the bootstrap voter set."""
    alone, three = tmp_path / "alone", tmp_path / "three"
    alone.mkdir()
    three.mkdir()
    config = str(write_config(alone, node_id=1))
    assert main(["storage", "format", "--config", config, "--cluster-id", "c1", "--standalone"]) == 0
    voters = read_bootstrap_voters(alone / "data")
    assert voters is not None and voters.ids == {1}
    assert voters.get(1).directory_id == read_meta(alone / "data").directory_id  # type: ignore[union-attr]
    config = str(write_config(three, node_id=2))
    initial = "1@h1:9093:AAAAAAAAAAAAAAAAAAAAAA,2@h2:9093:BBBBBBBBBBBBBBBBBBBBBB"
    assert (
        main(
            ["storage", "format", "--config", config, "--cluster-id", "c1", "--initial-controllers", initial]
        )
        == 0
    )
    assert read_meta(three / "data").directory_id == "BBBBBBBBBBBBBBBBBBBBBB"
    assert read_bootstrap_voters(three / "data").get(1).endpoints == ("h1:9093",)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("initial", "problem"),
    [
        ("1@h1:9093", "entry 1 '1@h1:9093' is not ID@HOST:PORT:DIRECTORY_ID"),
        ("1@h1:9093:D1,1@h2:9093:D2", "node id 1 appears twice"),
        ("1@h1:x:D1", "is not HOST:PORT"),
        ("2@h2:9093:D2", "this node (1) is not in the list"),
    ],
)
def test_bad_initial_controllers_name_the_flag_and_write_nothing(
    tmp_path: Path, initial: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(write_config(tmp_path, node_id=1))
    with pytest.raises(SystemExit):
        main(
            ["storage", "format", "--config", config, "--cluster-id", "c1", "--initial-controllers", initial]
        )
    err = capsys.readouterr().err
    assert "--initial-controllers" in err and problem in err
    assert not (tmp_path / "data").exists()


def test_reformatting_for_another_cluster_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(write_config(tmp_path))
    assert main(["storage", "format", "--config", config, "--cluster-id", "c1"]) == 0
    with pytest.raises(SystemExit) as exit_:
        main(["storage", "format", "--config", config, "--cluster-id", "c2"])
    assert exit_.value.code == 1
    assert "already formatted for cluster.id=c1" in capsys.readouterr().err
    assert main(["storage", "format", "--config", config, "--cluster-id", "c2", "--ignore-formatted"]) == 0


def test_bad_cluster_id_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["storage", "format", "--config", str(write_config(tmp_path)), "--cluster-id", "a b"])
    assert capsys.readouterr().err.startswith("raftka: error: --cluster-id: invalid cluster id")


def test_log_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    storage = FileStorage(tmp_path)
    storage.load()
    leader_change = Batch(
        0, 1, 1_000, BatchKind.LEADER_CHANGE, (encode_leader_change(2, frozenset({1, 2, 3}), 1),)
    )
    noop = Batch(1, 1, 1_500, BatchKind.NOOP, (NOOP_RECORD,))
    data = Batch(2, 1, 2_000, BatchKind.DATA, (b"a", b"b"))
    storage.write(Write(write_id=1, append=(leader_change, noop, data)))
    storage.close()
    capsys.readouterr()  # what the storage logged while writing

    assert main(["log", "dump", str(tmp_path), "--output", "json"]) == 0
    entries = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["base_offset"], e["kind"], e["record_count"]) for e in entries] == [
        (0, "LEADER_CHANGE", 1),
        (1, "NOOP", 1),
        (2, "DATA", 2),
    ]

    assert main(["log", "dump", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Dumping ") and lines[0].endswith(".log")
    assert lines[1].startswith(
        "baseOffset: 0 lastOffset: 0 count: 1 epoch: 1 kind: LEADER_CHANGE position: 0"
    )
    assert lines[1].endswith('| {"type":"LeaderChange","leader_id":2,"epoch":1,"voters":[1,2,3]}')
    assert "kind: DATA" in lines[3] and "|" not in lines[3]


def test_python_dash_m_and_help_work() -> None:
    result = raftka("--help")
    assert result.returncode == 0
    for command in ("cluster", "server", "storage", "quorum", "log", "chaos"):
        assert command in result.stdout
