"""The process's file descriptors: its limit raised at start, what is in use, and the
room left, so a node refuses work near the limit instead of failing in the middle of it.

Every connection, segment and index file, checkpoint and metadata log segment takes a
descriptor, and the default soft limit (1,024 on most systems) is far below the hard one.
A node raises its soft limit to the hard one when it starts (Kafka's packaging asks the
operator for 100,000 or more) and logs both. Near the limit it keeps a reserve: a broker
opens a replica only while more than ``reserve()`` descriptors stay free (the replica goes
offline on this broker instead, answering ``KAFKA_STORAGE_ERROR``), a listener takes a new
connection only while more than half of that is free (or an idle connection makes room,
``raftka.wire.guard``), and the last half remains for the metadata log, checkpoints and
gRPC. gRPC accepts on its own, knowing nothing of the reserve: its server holds at most
``grpc_connections_max()`` connections and closes those that have not finished their
handshake within 10 s (``raftka.raft.transport.grpc_transport.server_options``). Replicas stop first: a broker whose replicas took every
descriptor it may use would still hold them, and no client could reach them; connections
come and go (idle ones are closed, and give way to new ones).

A listener judges each connection as it accepts it, before the next
(``raftka.wire.acceptor``): asyncio's accept loop took a whole backlog in one turn and
judged it two turns later, and at a limit of 128 three such turns came first ("Too many
open files").

Counting open descriptors reads ``/proc/self/fd`` (about 0.4 ms at 1,000), so a count
is reused for ``RECOUNT_INTERVAL_S``; a caller holding a fresh descriptor passes its
number, a floor on the count (Linux gives the lowest free number).
"""

from __future__ import annotations

import errno
import os
import resource
import threading
import time
from collections.abc import Iterator

import structlog
from prometheus_client.core import GaugeMetricFamily, Metric

log = structlog.get_logger("raftka.node.descriptors")

LISTEN_BACKLOG = 50  # connections the kernel holds until accepted: Kafka's socket.listen.backlog.size
RESERVE_MIN = 128
RESERVE_SHARE = 8  # a limit's eighth is kept back, at least RESERVE_MIN
RECOUNT_INTERVAL_S = 0.1
GRPC_CONNECTIONS_MIN = 64
_FD_FOLDER = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"


def raise_open_files_limit() -> int:
    """Raise the soft limit on open files to the hard one; the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as e:  # e.g. above fs.nr_open: keep what we have
            log.warning("cannot raise the open files limit", soft=soft, hard=hard, error=str(e))
    limit = open_files_limit()
    log.info(
        "open files limit",
        limit=limit,
        was=soft,
        replicas_refused_below_free=reserve(limit),
        connections_refused_below_free=reserve(limit) // 2,
        grpc_connections_max=grpc_connections_max(),
    )
    return limit


def open_files_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def grpc_connections_max() -> int:
    """Connections the node's gRPC server may hold: a quarter of the limit (grpc's own
    accept loop knows nothing of the reserve)."""
    return max(GRPC_CONNECTIONS_MIN, open_files_limit() // 4)


def reserve(limit: int) -> int:
    """Descriptors kept back from new replicas (half of them from new connections)."""
    return max(RESERVE_MIN, limit // RESERVE_SHARE)


class TooFewDescriptors(OSError):
    """A replica refused before it could take the node's last descriptors."""


class Descriptors:
    """Open descriptors against the limit, counted at most every ``RECOUNT_INTERVAL_S``."""

    def __init__(self) -> None:
        self._count = 0
        self._counted_at = float("-inf")
        self._claims = threading.Lock()  # a broker opens the logs found at start on several threads

    def open_now(self, at_least: int = 0) -> int:
        now = time.monotonic()
        if now - self._counted_at >= RECOUNT_INTERVAL_S:
            self._count = len(os.listdir(_FD_FOLDER)) - 1  # less the descriptor listdir itself held
            self._counted_at = now
        return max(self._count, at_least)

    def free(self, at_least: int = 0) -> int:
        return open_files_limit() - self.open_now(at_least)

    def room_for_connection(self, fd: int) -> bool:
        """Whether a connection that got descriptor ``fd`` may stay."""
        return self.free(fd + 1) > reserve(open_files_limit()) // 2

    def claim_for_replica(self, name: str, descriptors: int = 1) -> None:
        """Count ``descriptors`` as taken by replica ``name``, or raise ``TooFewDescriptors``
        if that would leave no more than the reserve free. Replicas come in bursts (a
        topic's creation), faster than the count is renewed: each claim is added to it, and
        it is counted afresh once the room gets short."""
        with self._claims:
            self._claim(name, descriptors)

    def _claim(self, name: str, descriptors: int) -> None:
        limit = open_files_limit()
        floor = reserve(limit)
        if self.free() - descriptors <= 2 * floor:
            self._counted_at = float("-inf")
        free = self.free()
        if free - descriptors <= floor:
            raise TooFewDescriptors(
                errno.EMFILE,
                f"{name}: not opened, {free} of {limit} file descriptors are free and {floor} are kept "
                "for the metadata log, checkpoints and connections; raise the open files limit (ulimit -n)",
            )
        self._count += descriptors

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("process_open_fds", "Open file descriptors.", value=self.open_now())
        yield GaugeMetricFamily(
            "process_max_fds",
            "The open files limit (raised to the hard limit at start).",
            value=open_files_limit(),
        )


DESCRIPTORS = Descriptors()  # one process, one table of descriptors
