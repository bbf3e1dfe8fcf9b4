"""A TCP proxy that holds every byte ``--delay-ms`` before passing it on: the delay fault
of ``raftka chaos slow-broker``, for kernels without ``tc netem`` (this project's CI has
none, and loads no modules).

It runs inside a node's network namespace, where ``raftka.tools.chaos.netns.delay`` sends every
TCP connection to or from the node through it with iptables' ``REDIRECT`` (nat); the
proxy reads where each was going (``SO_ORIGINAL_DST``) and connects there itself, its
own connections marked (``SO_MARK``) so the rules let them by. Each direction of each
connection keeps its order and is delayed by the same amount, one way, as netem's delay
is: a request and its answer take twice the delay more. Connection setup is not
delayed. Each direction holds at most ``BUFFERED_MAX`` bytes in flight, and stops
reading past it (TCP pushes back), so a fast writer cannot fill the proxy's memory.

    python -m raftka.tools.chaos.delay_proxy --delay-ms 100 --mark 0x52
prints the port it listens on, then serves until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import struct
import sys
from collections import deque

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h
SO_MARK = 36
CHUNK_BYTES = 64 << 10
BUFFERED_MAX = 16 << 20  # per direction of a connection


class DelayedPipe:
    """Bytes from ``reader`` to ``writer``, each chunk passed on ``delay_s`` after it came."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
        self._reader = reader
        self._writer = writer
        self._delay_s = delay_s
        self._chunks: deque[tuple[float, bytes]] = deque()  # (when due, bytes); b"" for the end
        self._buffered = 0
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    async def run(self) -> None:
        reading = asyncio.ensure_future(self._read())
        try:
            await self._write()
        finally:
            reading.cancel()

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._room.wait()
            data = await self._reader.read(CHUNK_BYTES)
            self._chunks.append((loop.time() + self._delay_s, data))
            self._buffered += len(data)
            if self._buffered >= BUFFERED_MAX:
                self._room.clear()
            self._arrived.set()
            if not data:
                return

    async def _write(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._chunks:
                self._arrived.clear()
                await self._arrived.wait()
            due, data = self._chunks.popleft()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not data:
                with contextlib.suppress(OSError):
                    self._writer.write_eof()
                return
            self._writer.write(data)
            self._buffered -= len(data)
            if self._buffered < BUFFERED_MAX:
                self._room.set()
            await self._writer.drain()


def original_destination(sock: socket.socket) -> tuple[str, int]:
    """Where a redirected connection was going (IPv4)."""
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, address = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(address), port


async def relay(
    client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter, delay_s: float, mark: int
) -> None:
    try:
        host, port = original_destination(client_writer.get_extra_info("socket"))
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setsockopt(socket.SOL_SOCKET, SO_MARK, mark)
        upstream.setblocking(False)
        await asyncio.get_running_loop().sock_connect(upstream, (host, port))
        server_reader, server_writer = await asyncio.open_connection(sock=upstream)
    except OSError:
        client_writer.close()  # the destination refused: so does the proxy
        return
    try:
        await asyncio.gather(
            DelayedPipe(client_reader, server_writer, delay_s).run(),
            DelayedPipe(server_reader, client_writer, delay_s).run(),
        )
    except (OSError, asyncio.IncompleteReadError):
        pass  # a reset on either side ends the connection on both
    finally:
        for writer in (client_writer, server_writer):
            writer.close()


async def serve(delay_ms: float, mark: int) -> None:
    server = await asyncio.start_server(
        lambda r, w: relay(r, w, delay_ms / 1000, mark), "0.0.0.0", 0, reuse_address=True
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--mark", type=lambda v: int(v, 0), required=True)
    args = parser.parse_args(argv)
    if not 0 <= args.delay_ms <= 60_000:
        sys.exit(f"--delay-ms: expected 0 to 60000, got {args.delay_ms:g}")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.delay_ms, args.mark))


if __name__ == "__main__":
    main()
