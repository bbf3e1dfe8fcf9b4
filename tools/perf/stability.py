"""``raftka perf stability``: does the local cluster keep one leader, idle or under load?

Fast failover must not buy spurious elections. This watches every node's view of the
quorum every 100 ms for ``--duration`` seconds, optionally while committing offsets at
``--rate`` per second through the active controller (each one record in the metadata
log, as ``perf metadata`` writes), and reports every change of leader or epoch it saw
and how many epochs went by (a lost election moves the epoch too). A healthy cluster
reports none.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from pathlib import Path
from typing import Any

import grpc

from raftka.command import local, output
from raftka.command.errors import CliError
from raftka.command.tls_args import add_tls_options, client_tls
from raftka.rpc.stubs import Stubs
from raftka.security.tls import TlsFiles
from raftka.tools.perf import perf_metadata
from raftka.v1 import controller_pb2, controller_pb2_grpc, raft_pb2, raft_pb2_grpc

POLL_INTERVAL_S = 0.1
CALL_TIMEOUT_S = 1.0
GROUP = "raftka-perf-stability"
E = controller_pb2.ErrorCode


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = kinds.add_parser("stability", help="watch the local cluster's leadership, idle or under load")
    parser.add_argument("--duration", type=float, default=600.0, help="seconds to watch (default 600)")
    parser.add_argument(
        "--rate", type=float, default=0.0, help="offset commits per second (default 0: idle)"
    )
    parser.add_argument("--dir", type=Path, help="cluster directory (default: .raftka/local)")
    output.add_output_option(parser)
    add_tls_options(parser)
    parser.set_defaults(func=run_stability)


def run_stability(args: argparse.Namespace) -> int:
    if args.duration <= 0 or args.rate < 0:
        raise CliError("--duration must be positive, --rate not negative")
    cluster = local.load(local.resolve_dir(args.dir))
    result = asyncio.run(watch(cluster.addresses(), args.duration, args.rate, client_tls(args)))
    if args.output == "json":
        print(output.to_json(result))
    else:
        for change in result["changes"]:
            print(f"{change['at_s']:8.1f} s  leader {change['leader_id']} epoch {change['epoch']}")
        verdict = (
            "stable" if result["leader_changes"] == 0 else f"{result['leader_changes']} leader change(s)"
        )
        print(
            f"{result['duration_s']:.0f} s, {verdict}, {result['epochs_passed']} epoch(s) passed; "
            f"epochs {result['epochs']}; {result['appends_ok']} offset commits acknowledged, "
            f"{result['appends_failed']} failed"
        )
    return 0


async def watch(
    addresses: list[str], duration_s: float, rate: float, tls: TlsFiles | None = None
) -> dict[str, Any]:
    raft_stubs = Stubs(raft_pb2_grpc.RaftStub, tls)
    controller_stubs = Stubs(controller_pb2_grpc.ControllerStub, tls)
    raft = {address: raft_stubs[address] for address in addresses}
    changes: list[dict[str, Any]] = []
    appends = {"ok": 0, "failed": 0}
    leader: dict[str, Any] = {"address": None}
    try:
        if rate > 0:
            active = await perf_metadata.find_active(controller_stubs, addresses, perf_metadata.FIND_TIMEOUT_S)
            await perf_metadata.ensure_topic(controller_stubs[active])
        start = time.monotonic()
        observer = asyncio.create_task(_observe(raft, start, duration_s, changes, leader))
        writer = asyncio.create_task(_write(controller_stubs, start, duration_s, rate, appends, leader))
        await asyncio.gather(observer, writer)
    finally:
        await raft_stubs.close()
        await controller_stubs.close()
    epochs = sorted({c["epoch"] for c in changes})
    return {
        "duration_s": round(time.monotonic() - start, 1),
        "leader_changes": max(0, len(changes) - 1),
        "epochs_passed": epochs[-1] - epochs[0] if epochs else 0,
        "epochs": epochs,
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
    controllers: Stubs[controller_pb2_grpc.ControllerStub],
    start: float,
    duration_s: float,
    rate: float,
    appends: dict[str, int],
    leader: dict[str, Any],
) -> None:
    """Open-loop offset commits at ``rate`` per second to the raft leader (the active
    controller), each awaited in its own task (bounded)."""
    if rate <= 0:
        return
    in_flight: set[asyncio.Task[None]] = set()
    offsets = itertools.count(1)

    async def append(address: str) -> None:
        try:
            reply = await controllers[address].OffsetCommit(
                perf_metadata.commit_request(GROUP, next(offsets)), timeout=CALL_TIMEOUT_S
            )
            ok = reply.status.error == E.NONE and all(p.error == E.NONE for p in reply.partitions)
            appends["ok" if ok else "failed"] += 1
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
