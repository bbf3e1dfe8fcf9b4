"""The node's gRPC server under idle sockets, at a low open files limit (a subprocess): grpc
accepted until the process had no descriptor left, and kept a socket that never sent its
HTTP/2 preface for 120 s. With the node's server options it holds at most its bound and
closes such a socket after its handshake timeout."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.integration.polling import hold_for, wait_until

LIMIT = 96
CONNECTIONS_MAX = 40
IDLE = 100
SERVER = f"""
import asyncio, resource
import grpc
from grpc_health.v1 import health, health_pb2_grpc
from raftka.raft.transport.grpc_transport import server_options

async def main() -> None:
    server = grpc.aio.server(options=server_options({CONNECTIONS_MAX}))
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    resource.setrlimit(resource.RLIMIT_NOFILE, ({LIMIT}, {LIMIT}))
    print(port, flush=True)
    await server.wait_for_termination()

asyncio.run(main())
"""


def serving(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
        except grpc.RpcError:
            return False
    return answer.status == health_pb2.HealthCheckResponse.SERVING


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def test_idle_sockets_neither_exhaust_the_descriptors_nor_stay() -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdout=subprocess.PIPE, cwd=Path(__file__).parents[2], text=True
    )
    idle: list[socket.socket] = []
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        assert serving(port)
        for _ in range(IDLE):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        idle[0].setblocking(False)

        def below_the_limit() -> None:
            assert len(os.listdir(f"/proc/{server.pid}/fd")) < LIMIT

        hold_for(below_the_limit, duration_s=1)
        wait_until(
            lambda: closed_by_server(idle[0]), timeout_s=15, what="the idle socket closed by the server"
        )
        for sock in idle:
            sock.close()
        wait_until(lambda: serving(port), timeout_s=10, what="the server answering")
    finally:
        for sock in idle:
            sock.close()
        server.kill()
        server.wait()
