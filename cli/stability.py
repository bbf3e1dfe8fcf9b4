"""``raftka perf stability``: does the local cluster keep one leader, idle or under load?

Fast failover must not buy spurious elections. This watches every node's view of the
quorum every 100 ms for ``--duration`` seconds, optionally while writing journal
entries at ``--rate`` per second through the leader, and reports every change of
leader or epoch it saw. A healthy cluster reports none.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path
from typing import Any

import grpc

from raftka.cli import local, output
from raftka.cli.errors import CliError
from raftka.cli.tls_args import add_tls_options, client_tls
from raftka.rpc.stubs import Stubs
from raftka.security.tls import TlsFiles
from raftka.v1 import raft_pb2, raft_pb2_grpc

POLL_INTERVAL_S = 0.1
CALL_TIMEOUT_S = 1.0


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = kinds.add_parser("stability", help="watch the local cluster's leadership, idle or under load")
    parser.add_argument("--duration", type=float, default=600.0, help="seconds to watch (default 600)")
    parser.add_argument(
        "--rate", type=float, default=0.0, help="journal appends per second (default 0: idle)"
    )
    parser.add_argument("--record-bytes", type=int, default=100, help="bytes per appended entry")
    parser.add_argument("--dir", type=Path, help="cluster directory (default: .raftka/local)")
    output.add_output_option(parser)
    add_tls_options(parser)
    parser.set_defaults(func=run_stability)


def run_stability(args: argparse.Namespace) -> int:
    if args.duration <= 0 or args.rate < 0 or not 1 <= args.record_bytes <= 1 << 20:
        raise CliError("--duration must be positive, --rate not negative, --record-bytes 1 to 1048576")
    cluster = local.load(local.resolve_dir(args.dir))
    result = asyncio.run(
        watch(cluster.addresses(), args.duration, args.rate, args.record_bytes, client_tls(args))
    )
    if args.output == "json":
        print(output.to_json(result))
    else:
        for change in result["changes"]:
            print(f"{change['at_s']:8.1f} s  leader {change['leader_id']} epoch {change['epoch']}")
        verdict = (
            "stable" if result["leader_changes"] == 0 else f"{result['leader_changes']} leader change(s)"
        )
        print(
            f"{result['duration_s']:.0f} s, {verdict}; epochs {result['epochs']}; "
            f"{result['appends_ok']} appends acknowledged, {result['appends_failed']} failed"
        )
    return 0


async def watch(
    addresses: list[str], duration_s: float, rate: float, record_bytes: int, tls: TlsFiles | None = None
) -> dict[str, Any]:
    raft_stubs, journal_stubs = Stubs(raft_pb2_grpc.RaftStub, tls), Stubs(raft_pb2_grpc.JournalStub, tls)
    raft = {address: raft_stubs[address] for address in addresses}
    journal = {address: journal_stubs[address] for address in addresses}
    start = time.monotonic()
    changes: list[dict[str, Any]] = []
    appends = {"ok": 0, "failed": 0}
    leader: dict[str, Any] = {"address": None}
    try:
        observer = asyncio.create_task(_observe(raft, start, duration_s, changes, leader))
        writer = asyncio.create_task(_write(journal, start, duration_s, rate, record_bytes, appends, leader))
        await asyncio.gather(observer, writer)
    finally:
        await raft_stubs.close()
        await journal_stubs.close()
    return {
        "duration_s": round(time.monotonic() - start, 1),
        "leader_changes": max(0, len(changes) - 1),
        "epochs": sorted({c["epoch"] for c in changes}),
        "changes": changes,
        "appends_ok": appends["ok"],
        "appends_failed": appends["failed"],
    }


async def _observe(
    raft: dict[str, raft_pb2_grpc.RaftStub],
    start: float,
    duration_s: float,
    changes: list[dict[str, Any]],
    leader: dict[str, Any],
) -> None:
    """Record each (leader, epoch) a leader claims, the first time it is seen."""
    seen: tuple[int, int] | None = None
    while time.monotonic() - start < duration_s:
        views = await asyncio.gather(
            *(
                stub.DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=CALL_TIMEOUT_S)
                for stub in raft.values()
            ),
            return_exceptions=True,
        )
        for address, view in zip(raft, views, strict=True):
            if isinstance(view, BaseException) or view.error != raft_pb2.RAFT_ERROR_NONE:
                continue
            leader["address"] = address
            claim = (view.leader_id, view.leader_epoch)
            if claim != seen:
                seen = claim
                changes.append(
                    {"at_s": round(time.monotonic() - start, 1), "leader_id": claim[0], "epoch": claim[1]}
                )
        await asyncio.sleep(POLL_INTERVAL_S)


async def _write(
    journal: dict[str, raft_pb2_grpc.JournalStub],
    start: float,
    duration_s: float,
    rate: float,
    record_bytes: int,
    appends: dict[str, int],
    leader: dict[str, Any],
) -> None:
    """Open-loop appends at ``rate`` per second, each awaited in its own task (bounded)."""
    if rate <= 0:
        return
    in_flight: set[asyncio.Task[None]] = set()

    async def append(address: str) -> None:
        try:
            reply = await journal[address].Append(
                raft_pb2.JournalAppendRequest(entries=[os.urandom(record_bytes)]), timeout=CALL_TIMEOUT_S
            )
            appends["ok" if reply.error == raft_pb2.RAFT_ERROR_NONE else "failed"] += 1
        except grpc.aio.AioRpcError:
            appends["failed"] += 1

    sent = 0
    while (elapsed := time.monotonic() - start) < duration_s:
        due = int(elapsed * rate)
        while sent < due and len(in_flight) < 1024 and leader["address"] is not None:
            task = asyncio.create_task(append(leader["address"]))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            sent += 1
        await asyncio.sleep(0.005)
    if in_flight:
        await asyncio.wait(in_flight)
