"""``raftka perf quorum``: append throughput and latency of the quorum, load in the leader.

It starts its own 3-node quorum on loopback: two nodes as separate processes and one
inside this process, which is made the leader (the others get long election timeouts)
so the load generator calls ``RaftNode.append`` directly, with fsync on, and measures
what the quorum costs rather than what a client RPC costs. Closed loop: N appends in
flight, each a batch of one record of ``--record-bytes``; latency per append.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from raftka.command import local, output
from raftka.command.errors import CliError
from raftka.command.local import LOOPBACK, free_ports
from raftka.node.config import JournalConfig, LoggingConfig, NodeConfig, Voter, render_toml
from raftka.node.journal_server import Controller, start_controller
from raftka.node.logs import configure_logging
from raftka.raft.config import RaftConfig
from raftka.raft.storage import meta
from raftka.tools.perf import (
    perf_audit,
    perf_cleaner,
    perf_data,
    perf_fetch_sessions,
    perf_kafka,
    perf_metadata,
    perf_offset_commit,
    perf_quotas,
    perf_reassign,
    perf_rebalance,
    perf_rpc,
    perf_transactions,
    stability,
)

LEADER_ID = 1
FOLLOWER_ELECTION_TIMEOUT_MS = 1000  # followers wait; the in-process node wins the election
NEVER_SNAPSHOT = JournalConfig(
    snapshot_interval_records=1 << 40, snapshot_interval_bytes=1 << 60, snapshot_interval_ms=0
)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    perf = commands.add_parser("perf", help="measure the quorum's and the brokers' performance")
    kinds = perf.add_subparsers(dest="kind", required=True, metavar="KIND")
    quorum = kinds.add_parser(
        "quorum",
        help="append throughput/latency with the load in the leader's process "
        "(its own 3-node quorum on loopback, plaintext: no cluster is involved)",
    )
    add_load_options(quorum, "appends")
    quorum.add_argument("--record-bytes", type=int, default=100, help="bytes per record")
    quorum.add_argument("--dir", type=Path, help="where the nodes keep their data (default: a temp dir)")
    quorum.set_defaults(func=run_quorum)
    stability.register(kinds)
    perf_metadata.register(kinds)
    perf_rpc.register(kinds)
    perf_data.register(kinds)
    perf_kafka.register(kinds)
    perf_fetch_sessions.register(kinds)
    perf_quotas.register(kinds)
    perf_audit.register(kinds)
    perf_rebalance.register(kinds)
    perf_reassign.register(kinds)
    perf_transactions.register(kinds)
    perf_offset_commit.register(kinds)
    perf_cleaner.register(kinds)


def add_load_options(parser: argparse.ArgumentParser, unit: str) -> None:
    """The closed-loop options every ``perf`` kind but stability shares."""
    parser.add_argument("--concurrency", default="1,16,128", help=f"{unit} in flight, comma separated")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds measured per concurrency")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds run before measuring")
    output.add_output_option(parser)


def load_levels(args: argparse.Namespace) -> list[int]:
    """The concurrency levels of ``add_load_options``, once all three options are checked."""
    levels = parse_concurrency(args.concurrency)
    if args.duration <= 0 or args.warmup < 0:
        raise CliError("--duration must be positive and --warmup not negative")
    return levels


def print_results(results: list[dict[str, Any]], output_format: str) -> None:
    if output_format == "json":
        print(output.to_json(results))
    else:
        rows = [(r["concurrency"], f"{r['ops_per_s']:,.0f}", r["p50_ms"], r["p99_ms"]) for r in results]
        print(output.table(["IN FLIGHT", "OPS/S", "P50 MS", "P99 MS"], rows))


def run_quorum(args: argparse.Namespace) -> int:
    levels = load_levels(args)
    if not 1 <= args.record_bytes <= 1 << 20:
        raise CliError("--record-bytes: expected 1 to 1048576")
    configure_logging("warning", "console")  # the in-process node's logs: stderr, problems only
    results = asyncio.run(measure(levels, args.duration, args.warmup, args.record_bytes, args.dir))
    print_results(results, args.output)
    return 0


def parse_concurrency(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",")]
    except ValueError:
        raise CliError(f"--concurrency: expected numbers like 1,16,128, got {text!r}") from None
    if not levels or any(not 1 <= n <= 4096 for n in levels):
        raise CliError("--concurrency: each level must be between 1 and 4096")
    return levels


async def measure(
    levels: list[int], duration_s: float, warmup_s: float, record_bytes: int, data_dir: Path | None
) -> list[dict[str, Any]]:
    base = data_dir or Path(tempfile.mkdtemp(prefix="raftka-perf-"))
    followers: list[local.NodeRecord] = []
    controller: Controller | None = None
    try:
        configs = write_configs(base)
        followers = [start_follower(base, config) for config in configs[1:]]
        controller = await start_controller(configs[0])
        await wait_until_leader(controller, timeout_s=30)
        return [await closed_loop(controller, n, duration_s, warmup_s, record_bytes) for n in levels]
    finally:
        if controller is not None:
            await controller.node.shutdown(graceful=False)
        for node in followers:
            if node.pid is not None:
                os.kill(node.pid, signal.SIGKILL)
        if data_dir is None:
            shutil.rmtree(base, ignore_errors=True)


def write_configs(base: Path) -> list[NodeConfig]:
    voters = tuple(Voter(i, LOOPBACK, port) for i, port in enumerate(free_ports(3), start=1))
    cluster_id = meta.new_cluster_id()
    configs = []
    for voter in voters:
        timeout = (
            RaftConfig().election_timeout_ms if voter.node_id == LEADER_ID else FOLLOWER_ELECTION_TIMEOUT_MS
        )
        node_dir = base / f"node-{voter.node_id}"
        node_dir.mkdir(parents=True, exist_ok=True)
        config = NodeConfig(
            node_id=voter.node_id,
            data_dir=node_dir / "data",
            voters=voters,
            listener=voter.address,
            raft=dataclasses.replace(RaftConfig(), election_timeout_ms=timeout),
            journal=NEVER_SNAPSHOT,  # measure the quorum, not snapshots
            logging=LoggingConfig(level="warning"),
        )
        (node_dir / "server.toml").write_text(render_toml(config), encoding="utf-8")
        meta.format_storage(config.data_dir, cluster_id, voter.node_id, initial_cluster=True)
        configs.append(config)
    return configs


def start_follower(base: Path, config: NodeConfig) -> local.NodeRecord:
    node_dir = base / f"node-{config.node_id}"
    record = local.NodeRecord(
        id=config.node_id,
        role="controller",
        address=config.listener,
        data_dir=str(config.data_dir),
        config=str(node_dir / "server.toml"),
        log=str(node_dir / "server.log"),
    )
    local.start_node(record)
    return record


async def wait_until_leader(controller: Controller, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    core = controller.node.core
    while not (core.is_leader and core.exposed_high_watermark() >= 0):
        if time.monotonic() > deadline:
            raise CliError(f"the in-process node did not become leader within {timeout_s:g} s")
        await asyncio.sleep(0.01)


async def closed_loop(
    controller: Controller, concurrency: int, duration_s: float, warmup_s: float, record_bytes: int
) -> dict[str, Any]:
    node = controller.node
    latencies_ms: list[float] = []
    start = time.monotonic()
    measure_from = start + warmup_s
    stop_at = measure_from + duration_s
    payload = os.urandom(record_bytes)

    async def worker() -> None:
        while (now := time.monotonic()) < stop_at:
            await node.append([payload])
            if now >= measure_from:
                latencies_ms.append((time.monotonic() - now) * 1000)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    measured_s = time.monotonic() - measure_from
    latencies_ms.sort()
    return {
        "concurrency": concurrency,
        "ops_per_s": round(len(latencies_ms) / measured_s, 1),
        "p50_ms": round(statistics.median(latencies_ms), 2),
        "p99_ms": round(latencies_ms[int(len(latencies_ms) * 0.99) - 1], 2),
        "appends": len(latencies_ms),
    }
