"""``raftka health ADDRESS``: one gRPC health check, for Docker's HEALTHCHECK and exec probes.

Exit status 0 when the node answers SERVING, 1 otherwise (NOT_SERVING, unreachable, no
answer within the deadline), with one line that says which: a probe's output lands in
``docker inspect`` and ``kubectl describe pod``, where one clear line is what an
operator reads. A node with ``[tls]`` answers only over mutual TLS: the probe presents
the certificate ``--tls-*`` (or the local cluster) names, as every command does.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from raftka.command.errors import CliError
from raftka.command.tls_args import add_tls_options, client_tls
from raftka.node.config import parse_host_port
from raftka.security.tls import TlsFiles, aio_channel

EXIT_NOT_SERVING = 1


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "health", help="ask a node's gRPC health service; exit 0 only when it is SERVING"
    )
    parser.add_argument("address", metavar="ADDRESS", help="the node's gRPC listener, host:port")
    parser.add_argument(
        "--service",
        default="",
        help="a service's full name, e.g. raftka.v1.Controller (default: the node as a whole)",
    )
    parser.add_argument(
        "--timeout", type=float, default=3.0, help="seconds to wait for the answer (default 3)"
    )
    parser.add_argument(
        "--dir",
        type=Path,
        help="the local cluster whose client certificate to present (default: .raftka/local)",
    )
    add_tls_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    parse_host_port(args.address, "ADDRESS")
    if not 0 < args.timeout <= 3600:
        raise CliError(f"--timeout: must be in (0, 3600] seconds, got {args.timeout:g}")
    status, detail = asyncio.run(check(args.address, args.service, args.timeout, client_tls(args)))
    what = f"{args.address} {args.service}".rstrip()
    print(f"{what}: {status}{f' ({detail})' if detail else ''}")
    return 0 if status == "SERVING" else EXIT_NOT_SERVING


async def check(address: str, service: str, timeout_s: float, tls: TlsFiles | None = None) -> tuple[str, str]:
    """(status name, detail): SERVING, NOT_SERVING, or UNREACHABLE etc. with grpc's reason."""
    async with aio_channel(address, tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            answer = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.aio.AioRpcError as e:
            return e.code().name, e.details() or ""
    return health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status), ""
