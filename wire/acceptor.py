"""Listening sockets whose connections are judged one at a time, as they are accepted.

asyncio's own accept loop takes up to its backlog of connections in one turn, and the
protocol judges each two turns later (a task wraps the socket, then the transport calls
``connection_made``). Under a flood of connects, turns of accepts came faster than they
were judged: at a limit of 128 descriptors the accept itself failed ("Too many open
files"), which asyncio logged with a traceback for every one. Here a socket is judged
the moment it is accepted (``judge``: keep it or close it), before the next accept, so
the descriptors in use never pass what the judge allows. Kept sockets go to ``serve``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable, Coroutine
from enum import Enum
from typing import Any

import structlog

from raftka.node.descriptors import LISTEN_BACKLOG
from raftka.node.logs import RateLimitedLog

log = structlog.get_logger("raftka.wire.acceptor")

ACCEPTS_PER_TURN = 64  # then the event loop serves the rest of its work; the next turn takes more
ACCEPT_RETRY_S = 1.0  # after an accept failed for want of a resource, as asyncio waits
LOG_INTERVAL_S = 60.0
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Verdict(Enum):
    """What becomes of a socket just accepted."""

    KEEP = "keep"
    # kept, in the place of an idle connection closed for it: that one's descriptor is
    # freed only when the event loop next turns, so no more are accepted until then
    KEEP_AFTER_EVICTION = "keep after eviction"
    CLOSE = "close"


Judge = Callable[[socket.socket, str], Verdict]  # (accepted socket, client host)
Serve = Callable[[socket.socket], Coroutine[Any, Any, Any]]


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for every address ``host`` resolves to, as asyncio's
    ``create_server`` makes them (``port`` 0: the first picks one, the others take it)."""
    sockets: list[socket.socket] = []
    seen: set[tuple[int, Any]] = set()
    try:
        for family, kind, proto, _, address in socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        ):
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Acceptor:
    """Accepts on ``sock`` until closed: each new socket to ``judge`` at once, the kept ones
    to ``serve`` (a task each, cancelled by ``close``)."""

    def __init__(self, sock: socket.socket, judge: Judge, serve: Serve, name: str) -> None:
        self.sock = sock
        self._judge = judge
        self._serve = serve
        self._name = name
        self._loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._retry: asyncio.TimerHandle | None = None
        self._failures = RateLimitedLog(log, LOG_INTERVAL_S)  # clients cause them at will
        self._closed = False
        self._loop.add_reader(sock.fileno(), self._accept_some)

    def _accept_some(self) -> None:
        for _ in range(ACCEPTS_PER_TURN):
            try:
                conn, address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:  # the client gave up while it waited in the queue
                continue
            except OSError as e:
                if e.errno not in _OUT_OF_RESOURCES:
                    raise
                self._pause(e)
                return
            host = address[0] if isinstance(address, tuple) else "?"
            verdict = self._judge(conn, host)
            if verdict is Verdict.CLOSE:
                conn.close()
                continue
            conn.setblocking(False)
            task = self._loop.create_task(self._serve_or_close(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            if verdict is Verdict.KEEP_AFTER_EVICTION:
                return  # the evicted connection's descriptor is freed before the next turn

    async def _serve_or_close(self, conn: socket.socket) -> None:
        try:
            await self._serve(conn)
        except BaseException:
            conn.close()
            raise

    def _pause(self, error: OSError) -> None:
        """Stop accepting for ``ACCEPT_RETRY_S``: the queue keeps the clients meanwhile."""
        self._failures.log(
            logging.WARNING,
            "cannot accept connections for now",
            listener=self._name,
            error=error.strerror or str(error),
            retry_s=ACCEPT_RETRY_S,
        )
        self._loop.remove_reader(self.sock.fileno())
        self._retry = self._loop.call_later(ACCEPT_RETRY_S, self._resume)

    def _resume(self) -> None:
        self._retry = None
        if not self._closed:
            self._loop.add_reader(self.sock.fileno(), self._accept_some)

    async def close(self) -> None:
        """Stop listening, and cancel the kept sockets not yet served."""
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        self._loop.remove_reader(self.sock.fileno())
        self.sock.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
