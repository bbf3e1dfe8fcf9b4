"""A node's Prometheus endpoint: ``GET /metrics`` on ``metrics.port``, over HTTPS with a
client certificate the cluster's CA signed when the node has ``[tls]`` (as its other
listeners: Prometheus scrapes with ``tls_config``), plain HTTP otherwise.

With TLS, only the principals of ``metrics.allowed_principals`` and the super users may
scrape (anyone else is answered 403): the metrics name every client's principal and
client id (the quota metrics), which Kafka keeps in JMX, away from its clients.

Served on the node's own asyncio loop rather than in prometheus_client's HTTP thread, so
a scrape reads the raft core, the controller and the replicas between two events, never
in the middle of one, and the collectors need no locks. A scrape is a few dozen values;
the controller's and the broker's counts are one pass over state the node holds anyway
(the controller's once per metadata image).

Each node has its own ``CollectorRegistry`` (not prometheus_client's global one), so
several nodes in one process (the in-process tests) export separately.

Bounds: ``CONNECTIONS_MAX`` connections at once, a TLS handshake, then a request head of
``REQUEST_HEAD_MAX_BYTES``, each within ``IO_TIMEOUT_S``, one request per connection
(``Connection: close``), and the answer written within ``IO_TIMEOUT_S``. Idle sockets
cannot starve it (16 of them took every place, each for 10 s, and 30 scrapes in a row
went unanswered): at the bound a new connection takes the place of the oldest one still
waiting for its request, and is closed only if every connection is being answered. It
takes no more than its 16 descriptors, even near the node's limit, where the listeners
refuse clients (``raftka.node.descriptors``): that is when its numbers matter most. A
scraper sends its request as soon as it is connected, so it is never the oldest waiting.
A connection is judged as it is accepted, before its TLS handshake (``raftka.wire.acceptor``):
asyncio's server handshook every socket before the bound saw it, and a flood without
certificates took a broker's descriptors to its limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from raftka.node.assembly import ServerError
from raftka.node.config import NodeConfig, parse_host_port
from raftka.security.principal import Principal, from_ssl
from raftka.wire.acceptor import Acceptor, Verdict, bind

log = structlog.get_logger("raftka.raft.metrics")

PATH = "/metrics"
CONNECTIONS_MAX = 16
REQUEST_HEAD_MAX_BYTES = 8 << 10
IO_TIMEOUT_S = 10.0
Probe = Callable[[], Coroutine[Any, Any, None]]  # runs until cancelled, feeding a collector
MayScrape = Callable[[Principal | None], bool]  # the peer's certificate's principal -> allowed


class MetricsEndpoint:
    """The endpoint, and the probes that feed its collectors (they stop with it)."""

    def __init__(
        self,
        collectors: Iterable[Collector],
        probes: Iterable[Probe] = (),
        may_scrape: MayScrape | None = None,
    ) -> None:
        """``may_scrape``: who may read the metrics (None: anyone who connects)."""
        self._may_scrape = may_scrape
        self.registry = CollectorRegistry()
        for collector in collectors:
            self.registry.register(collector)  # a name exported twice raises here, at start
        self._acceptors: list[Acceptor] = []
        self._tls: ssl.SSLContext | None = None
        self._open: set[socket.socket] = set()  # kept and not evicted
        # connections waiting for their request (or handshake), oldest first (dicts keep order)
        self._waiting: dict[socket.socket, None] = {}
        self.evicted = 0  # connections closed to make room for a newer one
        self._probes = [asyncio.create_task(probe(), name="metrics-probe") for probe in probes]

    @property
    def port(self) -> int:
        return self._acceptors[0].sock.getsockname()[1]

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> None:
        self._tls = tls
        self._acceptors = [Acceptor(sock, self._judge, self._accept, "metrics") for sock in bind(host, port)]

    async def close(self) -> None:
        for acceptor in self._acceptors:
            await acceptor.close()  # cancels the connections being served
        for probe in self._probes:
            probe.cancel()
        await asyncio.gather(*self._probes, return_exceptions=True)

    def scrape(self) -> bytes:
        return generate_latest(self.registry)

    def _scrape_or_none(self) -> bytes | None:
        """A collector's bug costs the scrape, never the node."""
        try:
            return self.scrape()
        except Exception:
            log.exception("metrics scrape failed")
            return None

    def _judge(self, sock: socket.socket, host: str) -> Verdict:
        """Keep a socket just accepted, in the place of the oldest one still waiting if
        every place is taken (that one is shut down: its serving ends at once)."""
        if len(self._open) >= CONNECTIONS_MAX:
            if not self._waiting:
                return Verdict.CLOSE
            oldest = next(iter(self._waiting))
            del self._waiting[oldest]
            self._open.discard(oldest)
            with contextlib.suppress(OSError):
                oldest.shutdown(socket.SHUT_RDWR)
            self.evicted += 1
            verdict = Verdict.KEEP_AFTER_EVICTION
        else:
            verdict = Verdict.KEEP
        self._open.add(sock)
        self._waiting[sock] = None
        return verdict

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=REQUEST_HEAD_MAX_BYTES)
        protocol = asyncio.StreamReaderProtocol(reader)
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(IO_TIMEOUT_S):
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol,
                    sock,
                    ssl=self._tls,
                    ssl_handshake_timeout=IO_TIMEOUT_S if self._tls else None,
                )
                writer = asyncio.StreamWriter(transport, protocol, reader, loop)
                await self._serve(reader, writer, sock)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # a client that is slow, gone, refused by TLS or sends too much gets no answer
        finally:
            self._open.discard(sock)
            self._waiting.pop(sock, None)
            if writer is None:
                sock.close()
            else:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, accepted: socket.socket
    ) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self._waiting.pop(accepted, None)  # being answered: not to be closed for a newer one
        method, _, rest = head.decode("latin-1").partition(" ")
        target = rest.partition(" ")[0].partition("?")[0]
        if method not in ("GET", "HEAD"):
            status, body, kind = "405 Method Not Allowed", b"GET /metrics\n", "text/plain"
        elif target != PATH:
            status, body, kind = "404 Not Found", b"metrics are at /metrics\n", "text/plain"
        elif self._may_scrape is not None and not self._may_scrape(
            from_ssl(writer.get_extra_info("ssl_object"))
        ):
            status, body, kind = "403 Forbidden", b"not in metrics.allowed_principals\n", "text/plain"
        else:
            status, body, kind = "200 OK", self._scrape_or_none(), CONTENT_TYPE_LATEST
            if body is None:
                status, body, kind = (
                    "500 Internal Server Error",
                    b"scrape failed; see the node's log\n",
                    "text/plain",
                )
        header = (
            f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        writer.write(header.encode("latin-1") + (body if method != "HEAD" else b""))
        await writer.drain()


async def serve_metrics(
    config: NodeConfig, collectors: Iterable[Collector], probes: Iterable[Probe] = ()
) -> MetricsEndpoint | None:
    """The node's endpoint on ``metrics.port`` at the listener's host; None when off."""
    if not config.metrics.port:
        return None
    host = parse_host_port(config.listener, "listener")[0]
    scrapers = {*config.metrics.allowed_principals, *config.authorizer.super_users}
    endpoint = MetricsEndpoint(
        collectors, probes, (lambda p: p is not None and p.name in scrapers) if config.tls else None
    )
    try:
        await endpoint.start(host, config.metrics.port, config.tls.server_ssl if config.tls else None)
    except OSError as e:
        await endpoint.close()
        raise ServerError(
            f"metrics.port: cannot listen on {host}:{config.metrics.port}: {e.strerror or e}"
        ) from None
    scheme = "https" if config.tls else "http"
    log.info("metrics endpoint listening", address=f"{scheme}://{host}:{endpoint.port}{PATH}")
    return endpoint
