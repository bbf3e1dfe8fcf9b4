"""The Journal gRPC service: write entries through the leader, read what committed.

With TLS, appending needs ALTER on the cluster and reading DESCRIBE on it
(``journal_rules``): a journal node has no ACLs, so only ``authorizer.super_users`` may.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from raftka.metadata import acls
from raftka.metadata.acls import Authorizer
from raftka.metadata.authorization import cluster_rule
from raftka.node.journal import Journal
from raftka.raft.core import NotLeaderError
from raftka.raft.driver import BackpressureError, RaftNode
from raftka.security.grpc_gate import Rule, by_name
from raftka.v1 import raft_pb2, raft_pb2_grpc

ENTRY_BYTES_MAX = 1 << 20
READ_ENTRIES_MAX = 10_000
JOURNAL_SERVICE = raft_pb2.DESCRIPTOR.services_by_name["Journal"]


def journal_rules(authorizer: Authorizer) -> dict[str, Rule]:
    return by_name(
        JOURNAL_SERVICE,
        {"Append": cluster_rule(authorizer, acls.ALTER), "Read": cluster_rule(authorizer, acls.DESCRIBE)},
    )


class JournalService(raft_pb2_grpc.JournalServicer):
    def __init__(self, node: RaftNode, journal: Journal, address_of: Callable[[int], str]) -> None:
        self._node = node
        self._journal = journal
        self._address_of = address_of  # a voter's address, from the voter set in the log

    async def Append(
        self, request: raft_pb2.JournalAppendRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.JournalAppendResponse:
        entries = list(request.entries)
        limit = self._node.core.cfg.append_max_records
        if not entries or len(entries) > limit:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"entries: between 1 and {limit} entries")
        if any(len(e) > ENTRY_BYTES_MAX for e in entries):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"entries: each at most {ENTRY_BYTES_MAX} bytes"
            )
        try:
            offset = await self._node.append(entries)
        except NotLeaderError as e:
            return raft_pb2.JournalAppendResponse(
                error=raft_pb2.RAFT_ERROR_NOT_LEADER,
                leader_id=e.leader_id,
                leader_address=self._address_of(e.leader_id),
                epoch=e.epoch,
            )
        except BackpressureError as e:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        return raft_pb2.JournalAppendResponse(offset=offset, epoch=self._node.core.epoch)

    async def Read(
        self, request: raft_pb2.JournalReadRequest, context: grpc.aio.ServicerContext
    ) -> raft_pb2.JournalReadResponse:
        if request.from_index < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "from_index: must not be negative")
        if not 0 < request.max_entries <= READ_ENTRIES_MAX:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"max_entries: between 1 and {READ_ENTRIES_MAX}"
            )
        journal = self._journal
        end = request.from_index + request.max_entries
        return raft_pb2.JournalReadResponse(
            applied_offset=journal.applied_offset,
            entry_count=len(journal.entries),
            entries=journal.entries[request.from_index : end],
            loaded_snapshot=journal.loaded_snapshot,
        )
