"""A listener under abuse (``raftka.wire.guard``): idle sockets from one client or many,
frames begun and never finished, partial frames that pin memory. Each case holds the
abuse in place and checks that a well-behaved client still gets its answer and what was
closed, and why."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import os
import socket
import ssl
import struct
import subprocess
import sys
from asyncio import sslproto
from pathlib import Path

from pytest import MonkeyPatch

from raftka.node import memory
from raftka.v1 import broker_pb2 as pb
from raftka.wire import answer_room, frames, guard
from raftka.wire.answer_room import current_answer_room
from raftka.wire.client import BrokerClient
from raftka.wire.guard import ConnectionLimits
from raftka.wire.server import TLS_READ_BYTES, FrameServer, small_tls_reads
from tests.unit.test_wire import metadata_named, request_frame, run, serving, until
from tests.unit.tls_support import make_certs

MIB = 1 << 20
Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def ask(port: int, topic: str, local_host: str = "127.0.0.1") -> list[str]:
    """One Metadata call on a new connection: the topic names answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(local_host, 0))
    try:
        writer.write(
            request_frame(frames.METADATA.key, 7, pb.MetadataRequest(topics=[topic]).SerializeToString())
        )
        (length,) = struct.unpack(">I", await reader.readexactly(4))
        frame = await reader.readexactly(length)
        return [t.name for t in pb.MetadataResponse.FromString(frame[4:]).topics]
    finally:
        writer.close()


async def idle_sockets(port: int, count: int, local_host: str) -> list[Stream]:
    return [
        await asyncio.open_connection("127.0.0.1", port, local_addr=(local_host, 0)) for _ in range(count)
    ]


async def closed_by_server(stream: Stream) -> bool:
    try:
        return await stream[0].read(1) == b""
    except ConnectionError:
        return True


def closed_now(stream: Stream) -> bool:
    """Whether the server has closed ``stream`` (as far as this side has seen yet)."""
    return stream[0].at_eof() or stream[0].exception() is not None


def port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


def test_one_client_cannot_take_every_connection_of_a_listener() -> None:
    """One address holding sockets up to the listener's bound closed every new connection
    (4,096 at the defaults); now it gets ``connections_per_ip_max`` and no more."""
    limits = ConnectionLimits(connections_max=16, connections_per_ip_max=4)

    async def scenario() -> None:
        async with serving({frames.METADATA.key: metadata_named}, limits=limits) as (server, address):
            hog = await idle_sockets(port_of(address), 16, "127.0.0.2")
            await until(lambda: server.guard.closed[guard.PER_IP] == 12, "12 of its sockets closed")
            assert await ask(port_of(address), "served") == ["served"]
            await until(lambda: sum(map(closed_now, hog[4:])) == 12, "the 12 closed, seen by the client")
            assert not any(map(closed_now, hog[:4]))
            await until(lambda: len(server.connections) == 4, "the hog's four left, the answered client gone")
            for _, writer in hog:
                writer.close()

    run(scenario)


def test_idle_sockets_from_many_addresses_give_way_to_a_new_client() -> None:
    """At the listener's bound, a new connection takes the place of the one idle longest."""
    limits = ConnectionLimits(connections_max=8, connections_per_ip_max=2)

    async def scenario() -> None:
        async with serving({frames.METADATA.key: metadata_named}, limits=limits) as (server, address):
            hogs = [s for n in range(2, 6) for s in await idle_sockets(port_of(address), 2, f"127.0.0.{n}")]
            await until(lambda: len(server.connections) == 8, "the listener full of idle sockets")
            answered: list[str] = []

            async def served() -> bool:  # refused while none has been idle long enough
                try:
                    answered.extend(await ask(port_of(address), "served"))
                except (ConnectionError, asyncio.IncompleteReadError):
                    return False
                return True

            deadline = asyncio.get_running_loop().time() + 10
            while not await served():
                assert asyncio.get_running_loop().time() < deadline, (
                    "no answer while idle sockets hold the listener"
                )
                await asyncio.sleep(0.05)
            assert answered == ["served"]
            assert server.guard.closed[guard.EVICTED] == 1
            await until(lambda: sum(map(closed_now, hogs)) == 1, "one idle socket closed, seen by its client")
            for _, writer in hogs:
                writer.close()

    run(scenario)


def test_an_idle_connection_is_closed_and_a_busy_one_is_not() -> None:
    release = asyncio.Event()

    async def handle(request: pb.MetadataRequest) -> pb.MetadataResponse:
        if request.topics == ["wait"]:
            await release.wait()  # a long poll: in flight, so not idle
        return await metadata_named(request)

    limits = ConnectionLimits(idle_ms=300)

    async def scenario() -> None:
        async with serving({frames.METADATA.key: handle}, limits=limits) as (server, address):
            idle = await asyncio.open_connection("127.0.0.1", port_of(address))
            waiting = await asyncio.open_connection("127.0.0.1", port_of(address))
            waiting[1].write(
                request_frame(frames.METADATA.key, 1, pb.MetadataRequest(topics=["wait"]).SerializeToString())
            )
            assert await asyncio.wait_for(closed_by_server(idle), 10)
            assert server.guard.closed == {guard.IDLE: 1}
            release.set()
            (length,) = struct.unpack(">I", await waiting[0].readexactly(4))
            assert (
                pb.MetadataResponse.FromString((await waiting[0].readexactly(length))[4:]).topics[0].name
                == "wait"
            )
            waiting[1].close()

    run(scenario)


def test_a_frame_trickled_a_byte_at_a_time_is_closed_though_never_idle() -> None:
    limits = ConnectionLimits(partial_request_ms=500)

    async def scenario() -> None:
        async with serving({frames.METADATA.key: metadata_named}, limits=limits) as (server, address):
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(address))
            frame = request_frame(frames.METADATA.key, 1, b"\x0a\x01x" * 100)
            closed = asyncio.ensure_future(closed_by_server((reader, writer)))
            for byte in frame[:-1]:
                if closed.done():
                    break
                writer.write(bytes([byte]))
                await asyncio.sleep(0.02)
            assert await asyncio.wait_for(closed, 10)
            assert server.guard.closed == {guard.PARTIAL_REQUEST: 1}
            assert await ask(port_of(address), "served") == ["served"]
            writer.close()

    run(scenario)


def test_partial_frames_pin_no_more_than_the_listeners_buffered_bytes() -> None:
    """20 connections each sending a frame less its last byte pinned 20 frames."""
    limits = ConnectionLimits(buffered_bytes_max=4 * MIB)
    frame_bytes = MIB

    async def scenario() -> None:
        async with serving({frames.METADATA.key: metadata_named}, limits=limits) as (server, address):
            writers = []
            for _ in range(20):
                _, writer = await asyncio.open_connection("127.0.0.1", port_of(address))
                writer.write(struct.pack(">I", frame_bytes) + b"\x00" * (frame_bytes - 1))
                writers.append(writer)

            def buffered() -> int:
                return sum(c._decoder.buffered_bytes for c in server.connections)

            def settled() -> bool:  # every connection has been read whole, or closed
                sent = 4 + frame_bytes - 1
                return all(c._decoder.buffered_bytes == sent for c in server.connections) and (
                    len(server.connections) + server.guard.closed[guard.BUFFERED_BYTES] == 20
                )

            await until(settled, "every partial frame read or its connection closed", timeout_s=20)
            assert buffered() <= limits.buffered_bytes_max
            assert server.guard.closed[guard.BUFFERED_BYTES] >= 16
            assert await ask(port_of(address), "served") == ["served"]
            for writer in writers:
                writer.close()

    run(scenario)


SERVER_AT_A_LOW_LIMIT = """
import asyncio, resource, sys
import structlog
structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
from raftka.wire import frames
from raftka.wire.server import FrameServer
from tests.unit.test_wire import metadata_named

async def main() -> None:
    server = FrameServer({frames.METADATA.key: metadata_named})
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))
    print(await server.start("127.0.0.1", 0), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the test closes it
    print(dict(server.guard.closed), flush=True)

asyncio.run(main())
"""


def test_a_listener_at_its_descriptor_limit_stays_reachable() -> None:
    """With 1,024 descriptors, 1,064 idle connections made a broker unreachable (accept
    failed, and asyncio logged each failure with its traceback). A listener keeps the
    node's reserve free and lets a new client take an idle connection's place."""
    limit = 128
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER_AT_A_LOW_LIMIT.replace("FD_LIMIT", str(limit))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdin is not None and server.stderr is not None
        port = int(server.stdout.readline())

        async def scenario() -> list[str]:
            hogs = []
            for _ in range(limit + 72):
                with contextlib.suppress(
                    TimeoutError, ConnectionError
                ):  # refused, or left in the kernel's queue
                    hogs.append(await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 2))
            deadline = asyncio.get_running_loop().time() + 15
            while True:
                try:
                    return await asyncio.wait_for(ask(port, "served"), 2)
                except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
                    assert asyncio.get_running_loop().time() < deadline, (
                        "no answer: the listener is unreachable"
                    )
                    await asyncio.sleep(0.1)
                finally:
                    assert len(os.listdir(f"/proc/{server.pid}/fd")) < limit

        assert asyncio.run(scenario()) == ["served"]
        server.stdin.close()
        closed = ast.literal_eval(server.stdout.readline())
        assert closed.get(guard.DESCRIPTORS_LOW, 0) + closed.get(guard.EVICTED, 0) >= 72
        assert closed.get(guard.EVICTED, 0) >= 1
        assert server.wait(10) == 0
        assert "Too many open files" not in server.stderr.read()
    finally:
        server.kill()
        server.wait()


def test_sockets_that_never_finish_a_tls_handshake_count_and_are_closed(tmp_path: Path) -> None:
    """They were invisible to the bounds until their handshake ended, 60 s later."""
    certs = make_certs(tmp_path)
    limits = ConnectionLimits(connections_per_ip_max=4, partial_request_ms=500)

    async def scenario() -> None:
        server = FrameServer({frames.METADATA.key: metadata_named}, limits=limits)
        port = await server.start("127.0.0.1", 0, certs.broker.server_ssl)
        try:
            stalled = await idle_sockets(port, 8, "127.0.0.2")
            await until(lambda: sum(map(closed_now, stalled)) == 4, "the 4 over the address's bound closed")
            client = BrokerClient(f"127.0.0.1:{port}", tls=certs.admin.client_ssl)
            try:
                assert (await client.Metadata(pb.MetadataRequest(topics=["served"]), timeout=5)).topics[
                    0
                ].name == "served"
            finally:
                client.close()
            await until(lambda: all(map(closed_now, stalled)), "the rest closed at the handshake timeout")
            await until(lambda: not server.connections, "their places given back")
            assert server.guard.closed[guard.PER_IP] == 4
        finally:
            await server.close()

    run(scenario)


def test_answers_nobody_reads_pin_no_more_than_the_listeners_answer_bytes(monkeypatch: MonkeyPatch) -> None:
    """6 connections each sending 16 fetches and reading nothing pinned their own 2 MiB
    each (at the default bounds, 24 such took a broker from 104 MB to 1.66 GB). They share
    the listener's 3 MiB; a reading client is still answered; once the stuck clients have
    read nothing for the partial-request time while the pool is full, they are closed
    until it is not, and every byte they held is given back (to the system too)."""
    given_back: list[int] = []
    servers: list[FrameServer] = []
    monkeypatch.setattr(answer_room, "GIVE_BACK_BYTES", MIB)
    monkeypatch.setattr(memory, "give_back", lambda: given_back.append(servers[0].guard.answers.used))
    limits = ConnectionLimits(answer_bytes_max=3 * MIB, partial_request_ms=400)
    answered: list[int] = []

    async def fetch(request: pb.FetchRequest) -> pb.FetchResponse:
        """A fetch as the replica manager reads one: no more than its answer room."""
        room = current_answer_room.get()
        assert room is not None
        size = min(MIB // 2, room.available())
        room.hold(size)
        answered.append(size)
        await asyncio.sleep(0)
        records = pb.FetchPartitionResult(records=b"r" * size)
        return pb.FetchResponse(topics=[pb.FetchTopicResult(partitions=[records])])

    async def scenario() -> None:
        handlers = {frames.FETCH.key: fetch, frames.METADATA.key: metadata_named}
        async with serving(handlers, limits=limits, answer_bytes_max=2 * MIB) as (server, address):
            servers.append(server)
            stuck = []
            for _ in range(6):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(("127.0.0.1", port_of(address)))
                stuck.append(await asyncio.open_connection(sock=sock))
            await until(lambda: len(server.connections) == 6, "every stuck connection accepted")
            in_kernel = 0
            for connection in server.connections:
                sent_by = connection._transport.get_extra_info("socket")
                sent_by.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
                in_kernel += 2 * sent_by.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) + 2 * 4096
            body = pb.FetchRequest(max_bytes=MIB).SerializeToString()
            for _, writer in stuck:
                writer.write(b"".join(request_frame(frames.FETCH.key, i, body) for i in range(16)))
            await until(lambda: len(answered) == 6 * 16, "every stuck fetch answered")
            assert sum(answered) <= limits.answer_bytes_max + in_kernel, f"{sum(answered)} bytes answered"
            assert server.guard.answers.used <= limits.answer_bytes_max
            assert await ask(port_of(address), "served") == ["served"]  # the node keeps serving

            await until(lambda: server.guard.closed[guard.ANSWER_BYTES] > 0, "a stuck connection closed")
            assert server.guard.answers.used * 2 <= limits.answer_bytes_max
            for _, writer in stuck:
                writer.close()
            await until(lambda: not server.connections, "every stuck connection gone")
            assert server.guard.answers.used == 0
            await until(lambda: bool(given_back), "the freed answers' memory given back")

    run(scenario)


def test_tls_handshakes_under_way_are_bounded_and_their_memory_given_back(
    tmp_path: Path, monkeypatch: MonkeyPatch
) -> None:
    """Idle sockets cost ~290 KB each in their TLS handshake (asyncio's 256 KiB read
    buffer), and waves of them took a broker from 87 MB to 1.2 GB, kept after they closed
    (cycles only the collector frees). At most ``handshakes_max`` are under way, the oldest
    giving way to a new one, each reading 32 KiB at a time; when they end, the collector
    runs and the memory goes back to the system."""
    certs = make_certs(tmp_path)
    limits = ConnectionLimits(handshakes_max=8, partial_request_ms=60_000)
    given_back: list[int] = []
    monkeypatch.setattr(guard, "GIVE_BACK_HANDSHAKES", 8)
    monkeypatch.setattr(guard.memory, "give_back", lambda: given_back.append(1))
    monkeypatch.setattr(guard, "SWEEP_INTERVAL_MAX_S", 0.05)

    async def scenario() -> None:
        server = FrameServer({frames.METADATA.key: metadata_named}, limits=limits)
        port = await server.start("127.0.0.1", 0, certs.broker.server_ssl)
        try:
            assert sslproto.SSLProtocol.max_size == TLS_READ_BYTES
            stalled = await idle_sockets(port, 40, "127.0.0.2")
            await until(lambda: sum(map(closed_now, stalled)) == 32, "all but 8 handshakes closed")
            assert server.guard.closed[guard.HANDSHAKES] == 32
            assert len(server.connections) == 8
            client = BrokerClient(f"127.0.0.1:{port}", tls=certs.admin.client_ssl)
            try:  # a client that handshakes takes the place of the oldest stalled one
                answer = await client.Metadata(pb.MetadataRequest(topics=["served"]), timeout=5)
                assert answer.topics[0].name == "served"
            finally:
                client.close()
            for _, writer in stalled:
                writer.close()
            await until(lambda: not server.connections, "every place given back")
            await until(lambda: bool(given_back), "the handshakes' memory given back")
        finally:
            await server.close()

    run(scenario)


def test_small_tls_reads_shrinks_the_buffer_asyncio_gives_each_tls_connection() -> None:
    """``small_tls_reads`` sets a class attribute of asyncio's private SSLProtocol; this pins
    that asyncio still sizes each connection's read buffer by it (a Python that stops would
    silently bring back ~290 KB per idle TLS socket)."""
    small_tls_reads()
    loop = asyncio.new_event_loop()
    try:
        protocol = sslproto.SSLProtocol(
            loop, asyncio.Protocol(), ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), None, server_side=True
        )
        assert len(protocol._ssl_buffer) == TLS_READ_BYTES  # noqa: SLF001 - the attribute pinned
    finally:
        loop.close()
