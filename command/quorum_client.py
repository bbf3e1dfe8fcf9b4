"""DescribeQuorum over gRPC for the operator commands, with a deadline on every call.

A synchronous client: the CLI does one thing at a time, and a blocking call with a
deadline is the simplest thing that cannot hang. Channels are cached per address
(``raftka.rpc.stubs``) so ``chaos`` can poll every few milliseconds without reconnecting.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType

import grpc

from raftka.command.errors import CliError
from raftka.rpc.stubs import BlockingStubs
from raftka.security.tls import TlsFiles
from raftka.v1 import raft_pb2, raft_pb2_grpc

DescribeQuorumResponse = raft_pb2.DescribeQuorumResponse


class QuorumError(CliError):
    """No usable answer from the quorum; the message says which addresses and why."""


class QuorumClient:
    def __init__(self, call_timeout_s: float = 2.0, tls: TlsFiles | None = None) -> None:
        self.call_timeout_s = call_timeout_s
        self._stubs = BlockingStubs(raft_pb2_grpc.RaftStub, tls)

    def __enter__(self) -> QuorumClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._stubs.close()

    def stub(self, address: str) -> raft_pb2_grpc.RaftStub:
        """The Raft service at ``address`` (voter changes: raftka.cli.quorum_voters)."""
        return self._stubs[address]

    def describe(self, address: str, timeout_s: float | None = None) -> DescribeQuorumResponse:
        """Ask one node; raise QuorumError if it cannot be reached in time."""
        try:
            return self._stubs[address].DescribeQuorum(
                raft_pb2.DescribeQuorumRequest(), timeout=timeout_s or self.call_timeout_s
            )
        except grpc.RpcError as e:
            raise QuorumError(f"{address}: {_describe_rpc_error(e)}") from None

    def try_describe(self, address: str, timeout_s: float | None = None) -> DescribeQuorumResponse | None:
        """Like ``describe`` but None when the node does not answer: for polling."""
        try:
            return self.describe(address, timeout_s)
        except QuorumError:
            return None

    def describe_leader(self, addresses: Sequence[str], timeout_s: float) -> DescribeQuorumResponse:
        """The leader's description, found through any of ``addresses``.

        A non-leader answers NOT_LEADER with the leader's address: follow it. Retry
        until ``timeout_s`` so a command issued mid-election waits for its outcome.
        """
        deadline = time.monotonic() + timeout_s
        problems: dict[str, str] = {}
        while True:
            for address in addresses:
                try:
                    resp = self.describe(address)
                    if resp.error == raft_pb2.RAFT_ERROR_NOT_LEADER and resp.leader_address:
                        address = resp.leader_address
                        resp = self.describe(address)
                except QuorumError as e:
                    problems[address] = str(e)
                    continue
                if resp.error == raft_pb2.RAFT_ERROR_NONE:
                    return resp
                problems[address] = f"{address}: {_describe_no_leader(resp)}"
            if time.monotonic() >= deadline:
                detail = "; ".join(problems.values())
                raise QuorumError(f"no leader found within {timeout_s:g} s ({detail})")
            time.sleep(0.05)


def _describe_rpc_error(e: grpc.RpcError) -> str:
    code = e.code() if isinstance(e, grpc.Call) else None
    if code == grpc.StatusCode.UNAVAILABLE:
        return "not reachable (is the node running?)"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "no answer before the deadline"
    name = code.name if code is not None else "error"
    details = e.details() if isinstance(e, grpc.Call) else str(e)
    return f"{name}: {details}"


def _describe_no_leader(resp: DescribeQuorumResponse) -> str:
    if resp.error == raft_pb2.RAFT_ERROR_NOT_LEADER:
        return f"no leader known in epoch {resp.leader_epoch}"
    return f"answered {raft_pb2.RaftError.Name(resp.error)}"
