"""The one place the suite gets a tool from outside Python: every command a test runs that
pip does not install (iptables, kcat, chromium, node, java, ...) is listed in ``TOOLS``,
installed with apt-get before the first test (``tests/conftest.py``, and ``make tools``),
and looked up through ``command``, so no test passes or fails by what an earlier run left on
the machine. A tool that cannot be installed (no apt-get, not root and no ``sudo -n``, no
network) stays missing: a test that needs it skips saying what to install, and fails under
``CI=true`` (``tests.missing_tool``).

``python -m tests.tools`` installs what is missing and prints what still is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from tests.missing_tool import missing

APT_TIMEOUT_S = 900  # chromium and a JDK are a few hundred MB from a slow mirror


@dataclass(frozen=True, slots=True)
class Tool:
    """``commands``: every one must be on PATH; each entry lists names any one of which
    will do (Debian's ``chromium`` is ``chromium-browser`` or Chrome elsewhere)."""

    commands: tuple[tuple[str, ...], ...]
    packages: tuple[str, ...]
    needed_by: str

    def missing_commands(self) -> list[str]:
        return [names[0] for names in self.commands if not any(shutil.which(name) for name in names)]


TOOLS: dict[str, Tool] = {
    "iproute2": Tool((("ip",), ("ss",)), ("iproute2",), "the network namespace tests"),
    "iptables": Tool((("iptables",),), ("iptables",), "the network fault tests (chaos partition-broker)"),
    "kcat": Tool((("kcat",),), ("kcat",), "the Kafka client tests (librdkafka's kcat)"),
    "chromium": Tool(
        (("chromium", "chromium-browser", "google-chrome"),),
        ("chromium",),
        "the tests that render the audit's report",
    ),
    "node": Tool((("node",),), ("nodejs",), "the KafkaJS tests"),
    "java": Tool((("java",),), ("openjdk-17-jre-headless",), "the Spark tests and the audit (Java 17)"),
}


def missing_tools() -> list[str]:
    return [name for name, tool in TOOLS.items() if tool.missing_commands()]


def _apt_get() -> list[str] | None:
    """``apt-get``, behind ``sudo -n`` unless root; None when neither can run it."""
    if shutil.which("apt-get") is None:
        return None
    if os.geteuid() == 0:
        return ["apt-get"]
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n", "apt-get"]
    return None


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def install_missing(say: Callable[[str], None] = _say) -> list[str]:
    """Install every missing tool with one apt-get (``apt-get update`` and again only if
    that fails); returns the tools still missing afterwards."""
    names = missing_tools()
    apt_get = _apt_get() if names else None
    if apt_get is not None:
        packages = sorted({package for name in names for package in TOOLS[name].packages})
        say(f"tests.tools: apt-get install {' '.join(packages)} (for {', '.join(names)})")
        env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
        install = [*apt_get, "install", "-y", "-qq", "--no-install-recommends", *packages]
        if subprocess.run(install, capture_output=True, env=env, timeout=APT_TIMEOUT_S).returncode != 0:
            subprocess.run([*apt_get, "update", "-qq"], capture_output=True, env=env, timeout=APT_TIMEOUT_S)
            subprocess.run(install, capture_output=True, env=env, timeout=APT_TIMEOUT_S)
    still = missing_tools()
    for name in still:
        say(f"tests.tools: {problem(name)}")
    return still


def problem(name: str) -> str | None:
    """What is missing of tool ``name`` and how to install it; None if it is all there."""
    tool = TOOLS[name]
    absent = tool.missing_commands()
    if not absent:
        return None
    return (
        f"{' and '.join(absent)} not installed, needed by {tool.needed_by}: the suite installs it with "
        f"apt-get as root (or with sudo -n); or apt-get install -y {' '.join(tool.packages)}"
    )


def require(*names: str) -> None:
    """Skip (fail under CI=true) unless every tool in ``names`` is there, naming what is not."""
    problems = [found for name in names if (found := problem(name)) is not None]
    if problems:
        missing("; ".join(problems))


def command(name: str) -> str:
    """The path of tool ``name``'s first command, whichever of its names is installed."""
    require(name)
    return next(found for each in TOOLS[name].commands[0] if (found := shutil.which(each)) is not None)


if __name__ == "__main__":
    install_missing()
