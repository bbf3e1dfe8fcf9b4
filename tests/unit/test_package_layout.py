"""raftka installs one top-level package: each folder of the checkout is mapped under
``raftka.`` (``[tool.setuptools.package-dir]``), and the folders' own names must never
be imported. From a checkout they still resolve (the repository is on ``sys.path``), so
a stray ``from raft.core import ...`` would load a second copy of the module here and
break only once installed; these tests catch it at once. The wheel itself is checked by
``tests/integration/test_wheel_install.py``."""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIR: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
    "package-dir"
]
# The folders' own names: raft, broker, ..., and proto (which holds raftka/v1).
FOLDER_NAMES = frozenset(folder.split("/")[0] for folder in PACKAGE_DIR.values())
SKIPPED = {
    ".git",
    ".venv",
    "build",
    "dist",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    ".raftka",
}
# A string naming one of our modules by its folder path: "-m", "cli.main"; monkeypatch
# targets; "cli.main:main".
MODULE_STRING = re.compile(rf"^(?:{'|'.join(sorted(FOLDER_NAMES))})(?:\.\w+)+(?::\w+)?$")


def python_files() -> list[Path]:
    return [
        path
        for path in sorted(REPO.rglob("*.py"))
        if not SKIPPED.intersection(path.relative_to(REPO).parts)
        and not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))
    ]


def names_a_module(dotted: str) -> bool:
    parts = dotted.split(":")[0].split(".")
    for end in range(len(parts), 1, -1):
        path = REPO.joinpath(*parts[:end])
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return True
    return False


def test_no_module_imports_a_folder_by_its_own_name() -> None:
    found = []
    for path in python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                modules = (
                    [node.value] if MODULE_STRING.match(node.value) and names_a_module(node.value) else []
                )
                if modules:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: the string {node.value!r}")
                continue
            else:
                continue
            found += [
                f"{path.relative_to(REPO)}:{node.lineno}: import {module}"
                for module in modules
                if module.split(".")[0] in FOLDER_NAMES
            ]
    assert not found, "import these as raftka.<folder>...:\n" + "\n".join(found)


def test_every_folder_with_python_files_under_a_mapped_folder_is_a_package() -> None:
    """setup.py ships the folders with an ``__init__.py``; a namespace package would be
    left out of the wheel while it still imports from the checkout."""
    missing = [
        str(folder.relative_to(REPO))
        for mapped in PACKAGE_DIR.values()
        for folder in sorted({p.parent for p in (REPO / mapped).rglob("*.py")})
        if "__pycache__" not in folder.parts and not (folder / "__init__.py").is_file()
    ]
    assert not missing, f"add an __init__.py to: {', '.join(missing)}"


def test_the_console_script_and_the_make_targets_use_the_package_name() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"raftka": "raftka.cli.main:main"}
    stale = [
        line
        for line in (REPO / "Makefile").read_text().splitlines()
        if (m := re.search(r"-m\s+([\w.]+)", line)) and m.group(1).split(".")[0] in FOLDER_NAMES
    ]
    assert not stale, stale


def test_each_mapped_package_imports_from_its_folder() -> None:
    """The dev venv's editable install (setuptools' finder, which follows package-dir)
    resolves raftka.raft to raft/, raftka to proto/raftka/, and so on."""
    for package, folder in PACKAGE_DIR.items():
        module = importlib.import_module(package)
        assert Path(module.__file__).parent == REPO / folder, f"{package} imports from {module.__file__}"


def test_nothing_imports_the_admin_cli() -> None:
    """DESIGN.md's layering: ``raftka.cli`` is the top, so every other mapped package (the
    tools, the command plumbing, the servers) imports nothing from it; what they share
    with it lives in ``raftka.command``."""
    cli_folder = REPO / PACKAGE_DIR["raftka.cli"]
    found = []
    for folder in {REPO / f for f in PACKAGE_DIR.values()} - {cli_folder}:
        for path in sorted(folder.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    modules = [node.module]
                else:
                    continue
                found += [
                    f"{path.relative_to(REPO)}:{node.lineno}: import {module}"
                    for module in modules
                    if module == "raftka.cli" or module.startswith("raftka.cli.")
                ]
    assert not found, "move what these need from raftka.cli to raftka.command:\n" + "\n".join(found)
