"""perf rpc starts a do-nothing controller in its own process, runs perf metadata's closed
loop against it, and reports one object per concurrency; the server does not outlive it."""

from __future__ import annotations

import json
import subprocess

import pytest

from raftka.cli.main import main


def test_reports_each_concurrency_against_a_do_nothing_controller(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[subprocess.Popen[str]] = []
    real_popen = subprocess.Popen

    def recording_popen(*args: object, **kwargs: object) -> subprocess.Popen[str]:
        process = real_popen(*args, **kwargs)  # type: ignore[call-overload]
        started.append(process)
        return process

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    code = main(
        ["perf", "rpc", "--concurrency", "1,4", "--duration", "0.3", "--warmup", "0", "--output", "json"]
    )
    assert code == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["concurrency"] for r in results] == [1, 4]
    for r in results:
        assert r["ops"] > 0 and r["errors"] == 0
        assert 0 < r["p50_ms"] <= r["p99_ms"]
    assert len(started) == 1 and started[0].poll() is not None, "the server process was left running"


def test_bad_flags_fail_before_starting_anything(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["perf", "rpc", "--duration", "0"])
    assert exit_info.value.code == 1
    assert "--duration" in capsys.readouterr().err
