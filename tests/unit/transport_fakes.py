"""Test doubles shared by the transport tests: an inbox that can play the core, and log capture."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

import structlog

from raftka.raft.batch import Batch, BatchKind, OffsetAndEpoch
from raftka.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    Error,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from raftka.raft.transport.base import Transport

T = TypeVar("T")
WAIT_S = 5.0  # upper bound on any single wait in these tests; they finish in milliseconds

CLUSTER = "cluster-a"

REQUESTS: tuple[Request, ...] = (
    VoteRequest(CLUSTER, candidate_epoch=3, candidate_id=1, last_epoch=2, log_end_offset=10, pre_vote=True),
    BeginQuorumEpochRequest(CLUSTER, epoch=3, leader_id=1),
    EndQuorumEpochRequest(CLUSTER, epoch=3, leader_id=1, preferred_successors=(3, 2)),
    FetchRequest(CLUSTER, replica_id=1, epoch=3, fetch_offset=10, last_fetched_epoch=2, max_wait_ms=0),
    FetchSnapshotRequest(CLUSTER, 1, epoch=3, snapshot_id=OffsetAndEpoch(8, 2), position=0, max_bytes=1024),
)


def answer(request: Request) -> Response:
    """What a core might answer; it echoes the request's epoch so tests can pair them."""
    match request:
        case VoteRequest():
            return VoteResponse(Error.NONE, request.candidate_epoch, NO_LEADER, True, request.pre_vote)
        case BeginQuorumEpochRequest():
            return BeginQuorumEpochResponse(Error.NONE, request.epoch, request.leader_id)
        case EndQuorumEpochRequest():
            return EndQuorumEpochResponse(Error.NONE, request.epoch, NO_LEADER)
        case FetchRequest():
            batch = Batch(
                request.fetch_offset, request.epoch, 1_700_000_000_000, BatchKind.DATA, (b"a", b"bc")
            )
            return FetchResponse(Error.NONE, request.epoch, 2, batch.next_offset, 0, batches=(batch,))
        case FetchSnapshotRequest():
            return FetchSnapshotResponse(Error.NONE, request.epoch, 2, request.snapshot_id, 3, 0, b"abc")
    raise AssertionError(request)


class FakeInbox:
    """Records what a transport delivers; if ``answering``, answers requests as ``answer`` does."""

    def __init__(self, *, answering: bool = False) -> None:
        self.transport: Transport | None = None  # where answers go; set by the test
        self.answering = answering
        self.delivered: asyncio.Queue[Envelope] = asyncio.Queue()
        self.unreachable_peers: asyncio.Queue[int] = asyncio.Queue()
        self.connections: asyncio.Queue[tuple[int, bool]] = asyncio.Queue()  # (peer_id, connected)

    def deliver(self, envelope: Envelope) -> None:
        self.delivered.put_nowait(envelope)
        if self.answering and envelope.rpc_id:
            assert self.transport is not None
            reply = Envelope(envelope.dst, envelope.src, answer(envelope.msg), envelope.rpc_id)  # type: ignore[arg-type]
            self.transport.send(reply)

    def unreachable(self, peer_id: int) -> None:
        self.unreachable_peers.put_nowait(peer_id)

    def peer_connected(self, peer_id: int) -> None:
        self.connections.put_nowait((peer_id, True))

    def peer_disconnected(self, peer_id: int) -> None:
        self.connections.put_nowait((peer_id, False))

    async def next_delivered(self) -> Envelope:
        return await within(self.delivered.get())

    async def next_unreachable(self) -> int:
        return await within(self.unreachable_peers.get())

    async def next_connection(self) -> tuple[int, bool]:
        return await within(self.connections.get())


async def within(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, WAIT_S)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run an async test body in a fresh loop, bounded so a hang fails instead of stalling."""
    asyncio.run(asyncio.wait_for(test(), 4 * WAIT_S))


@contextlib.contextmanager
def log_events() -> Iterator[asyncio.Queue[dict[str, Any]]]:
    """Every structlog event, at any level, from loggers bound inside the block.

    Replaces the whole configuration (a test may have set a level filter or caching)
    and restores it after; transports bind their logger when built, so build them inside.
    """
    events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def capture(_logger: Any, method: str, event: dict[str, Any]) -> Any:
        events.put_nowait({**event, "level": method})
        raise structlog.DropEvent

    saved = structlog.get_config()
    structlog.configure(
        processors=[capture],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        cache_logger_on_first_use=False,
    )
    try:
        yield events
    finally:
        structlog.configure(**saved)


async def next_event(events: asyncio.Queue[dict[str, Any]], name: str) -> dict[str, Any]:
    """The next captured event called ``name`` (others are skipped)."""
    while True:
        event = await within(events.get())
        if event["event"] == name:
            return event
