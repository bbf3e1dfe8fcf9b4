"""``raftka perf cleaner``: bad options refused naming the flag, the report's arithmetic,
and a smoke run on a tiny log (no measurement: the figures are not checked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raftka.cli.main import main
from raftka.tools.perf.perf_cleaner import mb_per_s, report


@pytest.mark.parametrize(
    ("extra", "status", "problem"),
    [
        (["--records", "0"], 2, "argument --records: expected 1 or more, got 0"),
        (["--keys", "-1"], 2, "argument --keys"),
        (["--dedupe-buffer-size", "0"], 2, "argument --dedupe-buffer-size"),
        (["--records", "10", "--keys", "11"], 1, "--keys: at most --records (10), got 11"),
    ],
)
def test_perf_cleaner_refuses_a_bad_option_naming_it(
    extra: list[str], status: int, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["perf", "cleaner", *extra])
    line = capsys.readouterr().err.strip()
    assert (exit_info.value.code, problem in line) == (status, True), line


def test_the_report_rates_the_dirty_bytes_and_compares_the_cleaner_with_the_baseline() -> None:
    result = report(1000, 10, 50_000_000, baseline_s=0.5, cleaner_s=2.0, peak_bytes=3 << 20, cleaned_to=1000)
    assert (result["baseline_mb_per_s"], result["cleaner_mb_per_s"]) == (100.0, 25.0)
    assert result["cleaner_over_baseline"] == 4.0
    assert result["cleaner_peak_memory_mib"] == 3.0
    assert mb_per_s(1, 0.0) == 0.0


def test_a_tiny_run_cleans_the_whole_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["perf", "cleaner", "--records", "300", "--keys", "7", "--dedupe-buffer-size", "4096"]
    assert main([*args, "--dir", str(tmp_path), "--output", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["records"], result["keys"], result["cleaned_to_offset"]) == (300, 7, 300)
    assert result["dirty_bytes"] > 0 and result["cleaner_peak_memory_mib"] > 0
    assert list(tmp_path.iterdir()) == []  # the temp folder is gone
