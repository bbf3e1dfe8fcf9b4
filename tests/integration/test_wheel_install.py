"""The wheel a user installs, run outside the checkout.

``python -m build --wheel`` builds raftka from a clean copy of the checkout (so nothing
stale under build/ can slip in); the wheel must hold exactly the modules of the folders
``[tool.setuptools.package-dir]`` maps, and nothing at top level but ``raftka``. It is
installed into a fresh venv in a temporary folder, and from there, with the working
directory outside the checkout (which is then not on ``sys.path``), ``raftka --version``,
an import of the client and a local cluster (up, a topic, one record produced and read
back, down) must work.

Nothing is downloaded, so the test runs offline: the build uses this venv's setuptools
(``--no-isolation``, checked against ``[build-system] requires``), and the fresh venv
sees this venv's third-party packages through a folder of links to them, raftka's own
editable install left out; ``pip check`` then proves they satisfy the wheel's
requirements. Only the wheel can provide ``raftka`` there, which the test asserts too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.missing_tool import missing

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
DIST_INFO = f"raftka-{VERSION}.dist-info"
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", ".raftka"
)
STEP_TIMEOUT_S = 60


def require_build() -> None:
    if importlib.util.find_spec("build") is None:
        missing("the wheel test needs `build`: pip install -e '.[dev]' (make test does)")


def run(argv: list[str | Path], cwd: Path, stdin: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def build_wheel(tmp: Path) -> Path:
    source = tmp / "source"
    shutil.copytree(REPO, source, ignore=NOT_COPIED)
    run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp / "dist", source],
        cwd=tmp,
    )
    (wheel,) = (tmp / "dist").glob("raftka-*.whl")
    return wheel


def expected_modules() -> set[str]:
    """raftka/... paths of every module of the mapped folders."""
    return {
        "/".join([*package.split("."), *path.relative_to(REPO / folder).parts])
        for package, folder in PYPROJECT["tool"]["setuptools"]["package-dir"].items()
        for path in (REPO / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    }


def dependencies_view(tmp: Path) -> Path:
    """This venv's site-packages less raftka's editable install, as a folder of links."""
    view = tmp / "deps"
    view.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if entry.name.startswith(("raftka", "__editable__")) or entry.suffix == ".pth":
            continue
        (view / entry.name).symlink_to(entry)
    return view


def test_the_wheel_installs_alone_and_runs_a_cluster_outside_the_checkout(tmp_path: Path) -> None:
    require_build()
    wheel = build_wheel(tmp_path)

    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"raftka", DIST_INFO}
    modules = {name for name in names if name.endswith(".py")}
    assert modules == expected_modules(), (
        f"missing from the wheel: {sorted(expected_modules() - modules)}; "
        f"not in the checkout: {sorted(modules - expected_modules())}"
    )
    schemas = {
        f"raftka/broker/kafka/schemas/{p.name}" for p in (REPO / "broker/kafka/schemas").glob("*.json")
    }
    assert schemas and schemas <= set(names), "the Kafka schemas kafka-python lacks ship as package data"
    entry_points = zipfile.ZipFile(wheel).read(f"{DIST_INFO}/entry_points.txt").decode()
    assert "raftka = raftka.cli.main:main" in entry_points

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path)
    python, raftka = venv / "bin" / "python", venv / "bin" / "raftka"
    site = Path(
        run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).strip()
    )
    (site / "raftka-test-dependencies.pth").write_text(f"{dependencies_view(tmp_path)}\n")
    before = set(os.listdir(site))
    pip = [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check"]
    run([*pip, "install", "--no-deps", "--no-index", "--no-compile", wheel], cwd=tmp_path)
    assert set(os.listdir(site)) - before == {"raftka", DIST_INFO}, "one top-level package, and its metadata"
    run([*pip, "check"], cwd=tmp_path)

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert run([raftka, "--version"], outside).strip() == f"raftka {VERSION}"
    where = run(
        [
            python,
            "-c",
            "import importlib.util, raftka, raftka.client, raftka.raft.core\n"
            "from raftka.client import Admin, Producer, Consumer\n"
            "print(raftka.client.__file__)\n"
            "print([n for n in ('raft', 'broker', 'client', 'cli', 'metadata', 'node', 'proto') if importlib.util.find_spec(n)])",
        ],
        outside,
    ).splitlines()
    assert where[0].startswith(str(site)), f"raftka.client came from {where[0]}, not the wheel"
    assert where[1] == "[]", f"the folders' own names must not import: {where[1]}"

    cluster = ["--dir", outside / "cluster"]
    up = json.loads(
        run(
            [raftka, "cluster", "up", "--controllers", "1", "--brokers", "1", *cluster, "--output", "json"],
            outside,
        )
    )
    try:
        assert up["started"] == [1, 101]
        run(
            [
                raftka,
                "topics",
                "create",
                "orders",
                "--partitions",
                "1",
                "--replication-factor",
                "1",
                *cluster,
            ],
            outside,
        )
        run([raftka, "produce", "orders", *cluster], outside, stdin="from the wheel\n")
        read = run(
            [
                raftka,
                "consume",
                "orders",
                "--from-beginning",
                "--max-messages",
                "1",
                "--timeout-ms",
                "10000",
                *cluster,
            ],
            outside,
        )
        assert read.strip() == "from the wheel"
    finally:
        down = json.loads(run([raftka, "cluster", "down", *cluster, "--output", "json"], outside))
    assert [n["result"] for n in down["nodes"]] == ["stopped", "stopped"]
