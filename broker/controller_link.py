"""The broker's line to the active controller.

The active controller is the Raft leader, and the broker, a Raft observer, already knows
the leader's id from the metadata log it follows: that voter's address (from the voter
set in the log, ``raftka.raft.endpoints``: a controller added after the broker was
configured is found too) is asked first. A ``NOT_CONTROLLER`` answer's hint overrides it
(the observer may lag an election); with neither, or once a call to the leader it knows
has failed, the voters in effect are tried in turn. One call is one attempt with a
deadline: the lifecycle decides when to try again, on its own schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from raftka.raft.endpoints import VoterEndpoints
from raftka.rpc.stubs import ControllerRpc, NotControllerError, Stubs, controller_answer
from raftka.security.grpc_gate import forwarded_metadata
from raftka.security.tls import TlsFiles
from raftka.v1 import controller_pb2_grpc


class LinkError(Exception):
    """This attempt reached no active controller; another attempt may."""


class ControllerLink:
    def __init__(
        self,
        endpoints: VoterEndpoints,
        leader_id: Callable[[], int],
        request_timeout_s: float,
        tls: TlsFiles | None = None,
    ) -> None:
        self._endpoints = endpoints
        self._leader_id = leader_id
        self._timeout_s = request_timeout_s
        self._hint: str | None = None
        self._failed_leader: int | None = None  # the Raft leader a call just failed on: skip it
        self._next_voter = 0
        self._stubs = Stubs(controller_pb2_grpc.ControllerStub, tls)

    def target(self) -> str:
        """The address the next call goes to."""
        if self._hint is not None:
            return self._hint
        leader_id = self._leader_id()
        leader = self._endpoints.address(leader_id) if leader_id != self._failed_leader else ""
        if leader:
            return leader
        ordered = list(self._endpoints.voters().values())
        return ordered[self._next_voter % len(ordered)]

    async def call(self, rpc: ControllerRpc, request: Any) -> Any:
        """The response of the active controller to ``rpc`` (``lambda stub: stub.AlterPartition``),
        whatever its status but NOT_CONTROLLER; LinkError when none answered this time."""
        address = self.target()
        try:
            response = controller_answer(
                address,
                await rpc(self._stubs[address])(
                    request, timeout=self._timeout_s, metadata=forwarded_metadata()
                ),
            )
        except grpc.aio.AioRpcError as e:
            self._miss(address)
            raise LinkError(f"{address}: {e.code().name}: {e.details()}") from None
        except NotControllerError as e:
            self._miss(address)
            if e.redirect:
                self._hint = e.redirect
            raise LinkError(str(e)) from None
        self._failed_leader = None
        return response

    def _miss(self, address: str) -> None:
        if self._hint == address:
            self._hint = None
        leader_id = self._leader_id()
        if self._endpoints.address(leader_id) == address:
            self._failed_leader = leader_id
        self._next_voter += 1

    async def close(self) -> None:
        await self._stubs.close()
