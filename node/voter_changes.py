"""AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter (KIP-853) for any node: the leader
appends the change and answers once it has committed; any other node answers
NOT_LEADER with where the leader is. Bad input is answered INVALID_REQUEST naming the
field, and nothing is written."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog
from google.protobuf.message import Message as PbMessage

from raftka.raft.core import NotLeaderError, RaftCore
from raftka.raft.driver import RaftNode
from raftka.raft.voters import Voter, VoterChangeError
from raftka.v1 import raft_pb2

COMMIT_WAIT_S = 30.0  # a change not committed by then is reported as such (it may still commit)

_log = structlog.get_logger(__name__)


async def change_voters(
    node: RaftNode, cluster_id: str, leader_address: Callable[[int], str], request: PbMessage
) -> raft_pb2.RaftVoterChangeResponse:
    invalid = _invalid_field(request, cluster_id)
    if invalid is not None:
        return raft_pb2.RaftVoterChangeResponse(error=raft_pb2.RAFT_ERROR_INVALID_REQUEST, message=invalid)
    change = _change_of(request)
    try:
        offset = await asyncio.wait_for(node.change_voters(change), COMMIT_WAIT_S)
    except NotLeaderError as e:
        return raft_pb2.RaftVoterChangeResponse(
            error=raft_pb2.RAFT_ERROR_NOT_LEADER,
            message=str(e),
            leader_id=e.leader_id,
            leader_address=leader_address(e.leader_id),
        )
    except VoterChangeError as e:
        return raft_pb2.RaftVoterChangeResponse(refusal=e.refusal.name, message=str(e))
    except TimeoutError:
        return raft_pb2.RaftVoterChangeResponse(
            refusal="TIMED_OUT", message=f"the change did not commit within {COMMIT_WAIT_S:.0f} s; it may yet"
        )
    _log.info("voter set changed", request=type(request).__name__, voter_id=request.voter_id, offset=offset)  # type: ignore[attr-defined]
    return raft_pb2.RaftVoterChangeResponse(offset=offset, leader_id=node.core.node_id)


def _change_of(request: PbMessage) -> Callable[[RaftCore, int], object]:
    voter = Voter(request.voter_id, request.voter_directory_id, tuple(getattr(request, "endpoints", ())))  # type: ignore[attr-defined]
    if isinstance(request, raft_pb2.AddRaftVoterRequest):
        return lambda core, now: core.add_voter(voter, now)
    if isinstance(request, raft_pb2.UpdateRaftVoterRequest):
        return lambda core, now: core.update_voter(voter, now)
    return lambda core, now: core.remove_voter(voter.node_id, voter.directory_id, now)


def _invalid_field(request: PbMessage, cluster_id: str) -> str | None:
    if request.cluster_id != cluster_id:  # type: ignore[attr-defined]
        return f"cluster_id: {request.cluster_id!r} is not this cluster's ({cluster_id})"  # type: ignore[attr-defined]
    if request.voter_id < 0:  # type: ignore[attr-defined]
        return f"voter_id: {request.voter_id} is negative"  # type: ignore[attr-defined]
    if not request.voter_directory_id:  # type: ignore[attr-defined]
        return "voter_directory_id: required (the voter's meta.properties directory.id)"
    for endpoint in getattr(request, "endpoints", ()):
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            return f"endpoints: {endpoint!r} is not HOST:PORT"
    if (
        isinstance(request, raft_pb2.AddRaftVoterRequest | raft_pb2.UpdateRaftVoterRequest)
        and not request.endpoints
    ):
        return "endpoints: at least one HOST:PORT (the voter's raft listener) is required"
    return None
