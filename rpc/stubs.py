"""Client stubs of raftka's gRPC services, the same for every caller: the admin client,
the broker's link to the active controller, and the CLI.

- ``CHANNEL_OPTIONS``: a node that just (re)started is found again within a poll or two,
  not after gRPC's default reconnect backoff of a second or more.
- ``Stubs`` (asyncio) and ``BlockingStubs``: one channel per address, opened on first use
  and closed together, so a caller polling every few milliseconds never reconnects; with
  ``tls``, each is mutual TLS with the caller's certificate.
- ``ControllerRpc`` and ``controller_answer``: an RPC is named by its typed stub method
  (``lambda stub: stub.CreateTopics``), never by a string, and is always called with a
  deadline; a standby's ``NOT_CONTROLLER`` answer becomes ``NotControllerError``, which
  says where the active controller is, if the standby knows.

Which address to ask next is each caller's own policy (the admin client rotates through
its bootstrap addresses, the broker starts from the Raft leader it follows); following a
``NotControllerError.redirect`` is common to all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import grpc

from raftka.security.tls import TlsFiles, aio_channel, sync_channel
from raftka.v1 import controller_pb2, controller_pb2_grpc

E = controller_pb2.ErrorCode
S = TypeVar("S")
R = TypeVar("R")

CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
)

# A Controller RPC, picked from a stub: ``lambda stub: stub.CreateTopics``.
ControllerRpc = Callable[[controller_pb2_grpc.ControllerStub], Any]


class _StubCache(Generic[S]):
    def __init__(self, stub: Callable[[Any], S], tls: TlsFiles | None = None) -> None:
        self._make_stub = stub
        self._tls = tls
        self._channels: dict[str, Any] = {}
        self._stubs: dict[str, S] = {}

    def __getitem__(self, address: str) -> S:
        stub = self._stubs.get(address)
        if stub is None:
            channel = self._channels[address] = self._open(address)
            stub = self._stubs[address] = self._make_stub(channel)
        return stub

    def _open(self, address: str) -> Any:
        raise NotImplementedError

    def _take_channels(self) -> list[Any]:
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        return channels


class Stubs(_StubCache[S]):
    """asyncio stubs of one service (``Stubs(ControllerStub)``), one channel per address."""

    def _open(self, address: str) -> grpc.aio.Channel:
        return aio_channel(address, self._tls, CHANNEL_OPTIONS)

    async def close(self) -> None:
        for channel in self._take_channels():
            await channel.close()


class BlockingStubs(_StubCache[S]):
    """Blocking stubs of one service, for commands that do one thing at a time."""

    def _open(self, address: str) -> grpc.Channel:
        return sync_channel(address, self._tls, CHANNEL_OPTIONS)

    def close(self) -> None:
        for channel in self._take_channels():
            channel.close()


class NotControllerError(Exception):
    """``address`` is not the active controller; ``hint`` is the active controller's
    address as that node knows it ("" when it knows none, e.g. during an election)."""

    def __init__(self, address: str, controller_id: int, hint: str) -> None:
        where = f" (controller {controller_id} at {hint})" if hint else " and knows none yet"
        super().__init__(f"{address} is not the active controller{where}")
        self.address = address
        self.hint = hint

    @property
    def redirect(self) -> str | None:
        """The address to ask instead, if the answer named another node."""
        return self.hint if self.hint and self.hint != self.address else None


def controller_answer(address: str, response: R) -> R:
    """``response`` (``address``'s answer to a Controller RPC), unless it is NOT_CONTROLLER."""
    status = response.status  # type: ignore[attr-defined]  # every Controller response has one
    if status.error == E.NOT_CONTROLLER:
        raise NotControllerError(address, status.controller_id, status.controller_address)
    return response
