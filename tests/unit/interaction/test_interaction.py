"""Runs every script under testdata/ and compares its output with the recorded one.

``RAFTKA_REWRITE=1 pytest tests/unit/interaction`` records the current output instead;
review the diff before committing it. Scripts under testdata/regressions/ replay bugs
that were fixed; ``test_regressions.py`` states the property each one broke.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.interaction.runner import Interaction, ScriptError, run_script

TESTDATA = Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.rglob("*.txt"))
REWRITE = os.environ.get("RAFTKA_REWRITE") == "1"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(TESTDATA).with_suffix("")))
def test_script(path: Path) -> None:
    expected = path.read_text()
    assert expected.startswith("# "), "a script opens with a paragraph saying what it proves"
    actual = run_script(expected)
    if REWRITE:
        path.write_text(actual)
        return
    assert actual == expected


def test_a_command_without_output_prints_ok() -> None:
    assert run_script("# x\n\nheal\n----\n") == "# x\n\nheal\n----\nok\n"


@pytest.mark.parametrize(
    "line",
    [
        "frobnicate 1",
        "status 9",
        "add-nodes 3 voters=(1,2)",
        "add-nodes 2 voters=(1,2) fetch_max_bytez=1",
        "deliver-msgs frm=1",
    ],
)
def test_script_mistakes_are_reported(line: str) -> None:
    with pytest.raises(ScriptError):
        Interaction().run(line)


@pytest.mark.parametrize(("text", "error"), [("# x\n\nnope\n----\n", "line 3"), ("# x\nheal\nok\n", "----")])
def test_script_errors_name_the_line(text: str, error: str) -> None:
    with pytest.raises(ScriptError, match=error):
        run_script(text)
