"""``raftka perf rpc``: the floor under ``perf metadata``, what gRPC alone costs.

It runs ``perf metadata``'s closed loop, same client, same requests, against a
Controller in a separate process that answers every OffsetCommit at once: no raft, no
fsync, no state. The figures are the most any Python grpc.aio server can do for that
load on this machine, which is what the controller's own figures should be read
against (and etcd's, whose client is this same Python grpc.aio code).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from typing import Any

import grpc

from raftka.command.errors import CliError
from raftka.tools.perf import perf, perf_metadata
from raftka.v1 import controller_pb2, controller_pb2_grpc

SERVER_START_TIMEOUT_S = 10.0


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = kinds.add_parser(
        "rpc",
        help="the gRPC floor: perf metadata's load against a controller that does nothing "
        "(its own, on loopback, plaintext: no cluster is involved)",
    )
    perf.add_load_options(parser, "requests")
    parser.set_defaults(func=run_rpc)


def run_rpc(args: argparse.Namespace) -> int:
    levels = perf.load_levels(args)
    server = subprocess.Popen(
        [sys.executable, "-m", "raftka.tools.perf.perf_rpc"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        address = _read_address(server)
        results = asyncio.run(_measure(address, levels, args.duration, args.warmup))
    finally:
        server.kill()
        server.wait()
    perf.print_results(results, args.output)
    return 0


def _read_address(server: subprocess.Popen[str]) -> str:
    assert server.stdout is not None
    line = server.stdout.readline().strip()
    if not line:
        error = server.stderr.read() if server.stderr is not None else ""
        raise CliError(f"the do-nothing controller did not start: {error.strip()[-500:]}")
    return line


async def _measure(
    address: str, levels: list[int], duration_s: float, warmup_s: float
) -> list[dict[str, Any]]:
    async with grpc.aio.insecure_channel(address) as channel:
        await asyncio.wait_for(channel.channel_ready(), SERVER_START_TIMEOUT_S)
        stub = controller_pb2_grpc.ControllerStub(channel)
        return [await perf_metadata.closed_loop(stub, n, duration_s, warmup_s) for n in levels]


class DoNothingController(controller_pb2_grpc.ControllerServicer):
    """Answers an OffsetCommit as the controller does, without doing any of it."""

    async def OffsetCommit(self, request: Any, context: Any) -> controller_pb2.OffsetCommitResponse:
        response = controller_pb2.OffsetCommitResponse()
        for topic in request.topics:
            for partition in topic.partitions:
                response.partitions.add(topic=topic.topic, partition=partition.partition)
        return response


async def _serve() -> None:
    server = grpc.aio.server()
    controller_pb2_grpc.add_ControllerServicer_to_server(DoNothingController(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(_serve())
