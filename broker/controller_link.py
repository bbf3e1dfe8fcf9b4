"""The broker's line to the active controller.

The active controller is the Raft leader, and the broker, a Raft observer, already knows
the leader's id from the metadata log it follows: that voter's address is asked first.
A ``NOT_CONTROLLER`` answer's hint overrides it (the observer may lag an election); with
neither, or once a call to the leader it knows has failed, the voters are tried in turn. One call is one attempt with a deadline: the
lifecycle decides when to try again, on its own schedule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import grpc

from raftka.security.grpc_gate import forwarded_metadata
from raftka.security.tls import TlsFiles, aio_channel
from raftka.v1 import controller_pb2, controller_pb2_grpc

E = controller_pb2.ErrorCode

_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
)


class LinkError(Exception):
    """This attempt reached no active controller; another attempt may."""


class ControllerLink:
    def __init__(
        self,
        voter_addresses: Mapping[int, str],
        leader_id: Callable[[], int],
        request_timeout_s: float,
        tls: TlsFiles | None = None,
    ) -> None:
        assert voter_addresses, "the voter set is never empty"
        self._tls = tls
        self._voters = dict(voter_addresses)
        self._leader_id = leader_id
        self._timeout_s = request_timeout_s
        self._hint: str | None = None
        self._failed_leader: int | None = None  # the Raft leader a call just failed on: skip it
        self._next_voter = 0
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, controller_pb2_grpc.ControllerStub] = {}

    def target(self) -> str:
        """The address the next call goes to."""
        if self._hint is not None:
            return self._hint
        leader_id = self._leader_id()
        if leader_id in self._voters and leader_id != self._failed_leader:
            return self._voters[leader_id]
        ordered = [self._voters[i] for i in sorted(self._voters)]
        return ordered[self._next_voter % len(ordered)]

    async def call(self, method: str, request: Any) -> Any:
        """The response of the active controller, whatever its status but NOT_CONTROLLER;
        LinkError when none answered this time."""
        address = self.target()
        try:
            response = await getattr(self._stub(address), method)(
                request, timeout=self._timeout_s, metadata=forwarded_metadata()
            )
        except grpc.aio.AioRpcError as e:
            self._miss(address)
            raise LinkError(f"{address}: {e.code().name}: {e.details()}") from None
        status = response.status
        if status.error == E.NOT_CONTROLLER:
            self._miss(address)
            hint = status.controller_address
            if hint and hint != address:
                self._hint = hint
            raise LinkError(f"{address} is not the active controller (hint: {hint or 'none'})")
        self._failed_leader = None
        return response

    def _miss(self, address: str) -> None:
        if self._hint == address:
            self._hint = None
        leader_id = self._leader_id()
        if self._voters.get(leader_id) == address:
            self._failed_leader = leader_id
        self._next_voter += 1

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        self._stubs.clear()
        for channel in channels.values():
            await channel.close()

    def _stub(self, address: str) -> controller_pb2_grpc.ControllerStub:
        stub = self._stubs.get(address)
        if stub is None:
            channel = aio_channel(address, self._tls, _CHANNEL_OPTIONS)
            self._channels[address] = channel
            stub = self._stubs[address] = controller_pb2_grpc.ControllerStub(channel)
        return stub
