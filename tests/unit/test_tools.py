"""The suite's outside tools come from one place (``tests.tools``): installed with apt-get
when missing, apt-get update only when the install fails, and no test looking a command
up or installing it on its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import tools

TESTS = Path(tools.__file__).parent
FAKE_TOOL = "raftka-fake-tool"


def fake_apt_get(bin_dir: Path, *, needs_update: bool) -> Path:
    """An ``apt-get`` that installs ``FAKE_TOOL`` into ``bin_dir`` (only after an ``update``
    if ``needs_update``), logging each call."""
    calls = bin_dir / "apt-get.calls"
    script = bin_dir / "apt-get"
    script.write_text(
        f"""#!/bin/sh
echo "$*" >> {calls}
case "$1" in
  update) : > {bin_dir}/updated ;;
  install)
    {"[ -e " + str(bin_dir) + "/updated ] || exit 100" if needs_update else ":"}
    printf '#!/bin/sh\\n' > {bin_dir / FAKE_TOOL}; /bin/chmod +x {bin_dir / FAKE_TOOL} ;;
esac
""",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return calls


@pytest.fixture
def fake_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Root, a PATH of ``tmp_path`` alone (the fakes use shell builtins), and one tool in ``TOOLS``."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(tools.os, "geteuid", lambda: 0)
    monkeypatch.setattr(tools, "TOOLS", {"fake": tools.Tool(((FAKE_TOOL,),), ("fake-pkg",), "this test")})
    return tmp_path


@pytest.mark.parametrize("needs_update", [False, True])
def test_a_missing_tool_is_installed_with_apt_get(fake_machine: Path, needs_update: bool) -> None:
    calls = fake_apt_get(fake_machine, needs_update=needs_update)
    said: list[str] = []
    assert tools.install_missing(said.append) == []
    assert tools.command("fake") == str(fake_machine / FAKE_TOOL)
    install = "install -y -qq --no-install-recommends fake-pkg"
    expected = [install, "update -qq", install] if needs_update else [install]
    assert calls.read_text(encoding="utf-8").splitlines() == expected
    assert said == ["tests.tools: apt-get install fake-pkg (for fake)"]


def test_a_tool_already_there_runs_no_apt_get(fake_machine: Path) -> None:
    calls = fake_apt_get(fake_machine, needs_update=False)
    (fake_machine / FAKE_TOOL).write_text("#!/bin/sh\n", encoding="utf-8")
    (fake_machine / FAKE_TOOL).chmod(0o755)
    assert tools.install_missing(lambda _: None) == []
    assert not calls.exists()


def test_a_tool_that_cannot_be_installed_is_named_with_its_package(
    fake_machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    assert tools.install_missing(said.append) == ["fake"]  # no apt-get on PATH
    assert said == [f"tests.tools: {tools.problem('fake')}"]
    assert "raftka-fake-tool not installed, needed by this test" in said[0]
    assert "apt-get install -y fake-pkg" in said[0]
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y fake-pkg"):
        tools.require("fake")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y fake-pkg"):
        tools.require("fake")


def test_no_test_looks_up_or_installs_an_outside_tool_on_its_own() -> None:
    """Every ``shutil.which`` and apt-get call of the test suite is in ``tests/tools.py``."""
    own_lookup = re.compile(r"shutil\.which\(|[\"']apt-get[\"']\s*,")
    offenders = [
        str(path.relative_to(TESTS))
        for path in sorted(TESTS.rglob("*.py"))
        if path not in (TESTS / "tools.py", Path(__file__))
        and own_lookup.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], f"use tests.tools (TOOLS, require, command) instead, in {offenders}"
