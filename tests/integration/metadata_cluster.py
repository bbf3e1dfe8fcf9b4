"""A full local cluster (controllers and brokers) made by ``raftka cluster up``, for the
metadata fault tests: the product's own command creates, formats and starts it, so the
tests run what an operator runs. This adds what the tests need on top: change a role's
config, find the active controller, SIGKILL a node and restart it, read the logs, and
compare a topic's replicas on disk.

Nodes are detached processes (``cluster up`` starts them in their own session); they are
found, checked and killed through ``cluster.json`` and their pids, like ``cluster down``
and ``chaos`` do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from raftka.broker.server import PARTITIONS_DIR
from raftka.cli import cluster as cluster_cmd
from raftka.command import local
from raftka.node.config import load_config, render_toml
from raftka.records.batch import iter_batches
from raftka.v1 import controller_pb2, controller_pb2_grpc
from tests.integration.polling import wait_until

RAFTKA = (sys.executable, "-m", "raftka.cli.main")
UP_TIMEOUT_S = 60.0
PROBE_TIMEOUT_S = 0.5
E = controller_pb2.ErrorCode


class MetadataCluster:
    def __init__(self, cluster_dir: Path) -> None:
        self.dir = cluster_dir

    # the cluster as a whole ----------------------------------------------------------------

    def up(self) -> dict[str, Any]:
        """``raftka cluster up``: create and start, or start the nodes that are down."""
        return json.loads(self.raftka("cluster", "up", "--output", "json", timeout_s=UP_TIMEOUT_S))

    def up_configured(
        self, *, brokers: int = cluster_cmd.DEFAULT_BROKERS, **settings: dict[str, Any]
    ) -> None:
        """Create the cluster as ``cluster up --brokers BROKERS`` does, set ``settings`` in
        it: ``role__section={key: value}`` (``controller__metadata={"snapshot_interval_records":
        10}``) in every such node, then ``cluster up``: each node starts once, configured
        (no start and stop first)."""
        cluster_cmd.create(self.dir, cluster_cmd.DEFAULT_CONTROLLERS, brokers=brokers)
        for target, values in settings.items():
            role, _, section = target.partition("__")
            self.configure(role, section, **values)
        self.up()

    def down(self) -> None:
        self.raftka("cluster", "down", "--timeout-s", "5", timeout_s=30)

    def close(self) -> None:
        """SIGKILL whatever still runs: the teardown must not depend on a healthy cluster."""
        if not local.exists(self.dir):
            return
        for node in local.load(self.dir).nodes:
            if local.is_alive(node) and node.pid is not None:
                os.kill(node.pid, signal.SIGKILL)

    def configure(self, role: str, section: str, **values: Any) -> None:
        """Set ``[section] key = value`` in every ``role`` node's config (while it is down),
        through the product's own parser and renderer, so an unknown key fails here."""
        for node in self.nodes(role):
            config = load_config(node.config)
            updated = dataclasses.replace(
                config, **{section: dataclasses.replace(getattr(config, section), **values)}
            )
            Path(node.config).write_text(render_toml(updated), encoding="utf-8")

    def raftka(self, *args: str, timeout_s: float) -> str:
        done = subprocess.run(
            [*RAFTKA, *args, "--dir", str(self.dir)], capture_output=True, text=True, timeout=timeout_s
        )
        assert done.returncode == 0, f"raftka {' '.join(args)} failed: {done.stderr.strip()}"
        return done.stdout

    # nodes -------------------------------------------------------------------------------

    def nodes(self, role: str | None = None) -> list[local.NodeRecord]:
        return [n for n in local.load(self.dir).nodes if role is None or n.role == role]

    def node(self, node_id: int) -> local.NodeRecord:
        return local.load(self.dir).node(node_id)

    def controller_addresses(self) -> list[str]:
        return [n.address for n in self.nodes("controller")]

    def kill(self, node_id: int) -> None:
        """SIGKILL, and wait until the process is gone (a zombie counts as gone)."""
        node = self.node(node_id)
        assert node.pid is not None and local.is_alive(node), f"node {node_id} is not running"
        os.kill(node.pid, signal.SIGKILL)
        wait_until(lambda: not local.is_alive(node), timeout_s=10, what=f"node {node_id} to exit")

    def wait_for_replicas_to_agree(
        self, topic: str, broker_ids: Sequence[int] | None = None, timeout_s: float = 60.0
    ) -> None:
        """Poll the running brokers' disks until every partition of ``topic`` holds the same
        bytes on each (of ``broker_ids``). Right after a fault they may not yet: a leader
        fenced as the fault heals (its connections dropped) keeps the tail it had not
        replicated, which only its next fetch from the new leader truncates, as in Kafka,
        where replicas agree only within the ISR and up to the high watermark. With no
        load left, they must converge; one that never does is the failure."""
        wait_until(
            lambda: self._replicas_identical(topic, broker_ids),
            timeout_s=timeout_s,
            what=f"every replica of {topic} to hold the same bytes",
            detail=lambda: f"{self._replica_sizes(topic, broker_ids)}\n{self.replica_events()}",
        )

    def _replica_logs(
        self, topic: str, broker_ids: Sequence[int] | None, *, on_every_broker: bool
    ) -> tuple[list[local.NodeRecord], dict[str, list[bytes]]]:
        """The brokers (of ``broker_ids``) and, per partition folder of ``topic`` that any
        of them holds (``on_every_broker``: that all of them hold), each one's log."""
        brokers = [b for b in self.nodes("broker") if broker_ids is None or b.id in broker_ids]
        held = [{p.name for p in _partitions(b) if _of(p.name, topic)} for b in brokers]
        folders = set.intersection(*held) if on_every_broker else set.union(*held)
        return brokers, {
            folder: [_log_bytes(Path(b.data_dir) / PARTITIONS_DIR / folder) for b in brokers]
            for folder in sorted(folders)
        }

    def _running_logs(self, topic: str, broker_ids: Sequence[int] | None) -> dict[str, list[bytes]] | None:
        """``_replica_logs`` read while the nodes run (segments are written with os.write,
        unbuffered: the disk is what each replica holds); None when a segment rolled or
        was deleted while read."""
        try:
            return self._replica_logs(topic, broker_ids, on_every_broker=False)[1]
        except FileNotFoundError:
            return None

    def _replicas_identical(self, topic: str, broker_ids: Sequence[int] | None) -> bool:
        logs = self._running_logs(topic, broker_ids)
        return bool(logs) and all(len(set(replicas)) == 1 for replicas in logs.values())

    def _replica_sizes(self, topic: str, broker_ids: Sequence[int] | None) -> dict[str, list[int]]:
        logs = self._running_logs(topic, broker_ids) or {}
        return {folder: [len(log) for log in replicas] for folder, replicas in logs.items()}

    def compare_replicas(
        self, topic: str, broker_ids: Sequence[int] | None = None
    ) -> tuple[int, dict[str, dict[int, str]]]:
        """How many partitions of ``topic`` have a log on every broker (of ``broker_ids``,
        if given), and those whose replicas disagree (neither log a prefix of the other):
        for each, every broker's log size and its batches from the first that differs
        (``_describe_from``), the detail a failure needs; the nodes must be stopped."""
        brokers, everywhere = self._replica_logs(topic, broker_ids, on_every_broker=True)
        divergent = {}
        for folder, logs in everywhere.items():
            shortest = min(len(log) for log in logs)
            if len({hashlib.sha256(log[:shortest]).digest() for log in logs}) > 1:
                first = next(i for i in range(shortest) if len({log[i] for log in logs}) > 1)
                divergent[folder] = {
                    b.id: _describe_from(log, first) for b, log in zip(brokers, logs, strict=True)
                }
        return len(everywhere), divergent

    def log_text(self, node_id: int) -> str:
        try:
            return Path(self.node(node_id).log).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def log_lines(self, *needles: str, limit: int = 120) -> str:
        """The last ``limit`` lines, of every node's log, that contain one of ``needles``,
        each after its node id: what a failed check of the replicas needs (truncations,
        fencing, ISR changes), in each node's order."""
        found = [
            f"{n.id}: {line}"
            for n in self.nodes()
            for line in self.log_text(n.id).splitlines()
            if any(needle in line for needle in needles)
        ]
        return "\n".join(found[-limit:])

    def replica_events(self) -> str:
        """Every node's lines about replicas leaving, joining or cutting their logs."""
        return self.log_lines(
            "truncat",
            "log starts anew",
            "shrinking isr",
            "expanding isr",
            "fencing",
            "controlled shutdown",
            "broker state changed",
        )

    def log_tails(self, lines: int = 40) -> str:
        """Every node's last lines: the detail a failed wait prints."""
        return "\n".join(
            f"--- node {n.id} ({n.role}) ---\n" + "\n".join(self.log_text(n.id).splitlines()[-lines:])
            for n in self.nodes()
        )


def partition_folders(broker: local.NodeRecord, topic: str) -> list[str]:
    """The folders of ``topic``'s partitions on ``broker``'s disk."""
    return sorted(p.name for p in _partitions(broker) if _of(p.name, topic))


def _partitions(broker: local.NodeRecord) -> list[Path]:
    root = Path(broker.data_dir) / PARTITIONS_DIR
    return [p for p in root.iterdir() if p.is_dir()] if root.is_dir() else []


def _of(folder: str, topic: str) -> bool:
    name, _, partition = folder.rpartition("-")
    return name == topic and partition.isdigit()


def _describe_from(log: bytes, position: int, batches: int = 4) -> str:
    """The log's size and its batches (offsets, leader epoch, producer and sequence) from
    the one holding byte ``position``."""
    shown = [
        f"[{h.base_offset}-{h.last_offset} epoch {h.partition_leader_epoch} "
        f"pid {h.producer_id}/{h.producer_epoch} seq {h.base_sequence}]"
        for pos, h in iter_batches(log)
        if pos + h.size > position
    ][:batches]
    return f"{len(log)} bytes; from byte {position}: {' '.join(shown)}"


def _log_bytes(folder: Path) -> bytes:
    """The partition's batches in offset order: segment boundaries may differ between replicas."""
    return b"".join(p.read_bytes() for p in sorted(folder.glob("*.log")))


class Controllers:
    """grpc.aio stubs to every controller, and the active one found by asking."""

    def __init__(self, addresses: Sequence[str]) -> None:
        self._channels = {a: grpc.aio.insecure_channel(a) for a in addresses}
        self.stubs = {a: controller_pb2_grpc.ControllerStub(c) for a, c in self._channels.items()}

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()

    async def active(self, timeout_s: float) -> str:
        """The address of the controller that answers DescribeCluster itself; polls."""
        deadline = time.monotonic() + timeout_s
        seen: dict[str, str] = {}
        while True:
            for address, stub in self.stubs.items():
                try:
                    response = await stub.DescribeCluster(
                        controller_pb2.DescribeClusterRequest(), timeout=PROBE_TIMEOUT_S
                    )
                except grpc.aio.AioRpcError as e:
                    seen[address] = e.code().name
                    continue
                if response.status.error == E.NONE:
                    return address
                seen[address] = E.Name(response.status.error)
            if time.monotonic() > deadline:
                raise AssertionError(f"no active controller within {timeout_s:g} s: {seen}")
            await asyncio.sleep(0.02)
