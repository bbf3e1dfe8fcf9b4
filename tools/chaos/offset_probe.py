"""Failover as a client sees it: the first OffsetCommit that succeeds at a survivor.

``raftka chaos kill-leader --until offset-commit`` calls the probe every poll after the
signal; each call sends one one-record commit to each given controller in turn (a
standby answers NOT_CONTROLLER at once) and says whether one succeeded. Raw stubs with
a short deadline, no retries: the poll loop is the retry, and its clock is the
measurement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType

import grpc

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.types import NewTopic
from raftka.command.errors import CliError
from raftka.rpc.stubs import BlockingStubs
from raftka.security.tls import TlsFiles
from raftka.v1 import controller_pb2, controller_pb2_grpc

TOPIC = "raftka-chaos"
GROUP = "raftka-chaos"
SETUP_TIMEOUT_S = 30.0
E = controller_pb2.ErrorCode


class OffsetCommitProbe:
    def __init__(self, addresses: Mapping[int, str], timeout_s: float, tls: TlsFiles | None = None) -> None:
        self._addresses = dict(addresses)
        self._timeout_s = timeout_s
        self._tls = tls
        self._stubs = BlockingStubs(controller_pb2_grpc.ControllerStub, tls)
        self._offset = 0

    def __enter__(self) -> OffsetCommitProbe:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stubs.close()

    def prepare(self) -> None:
        """Create the one-partition topic the commits are for (an existing one is fine)."""
        policy = RetryPolicy(total_timeout_s=SETUP_TIMEOUT_S)
        with Admin(list(self._addresses.values()), policy, self._tls) as admin:
            (result,) = admin.create_topics([NewTopic(TOPIC, 1, 1)])
        if result.error not in (None, "TOPIC_ALREADY_EXISTS"):
            raise CliError(
                f"creating topic {TOPIC} for the offset-commit probe: {result.error}: {result.message}"
            )

    def __call__(self, node_ids: Sequence[int]) -> bool:
        """One commit attempt at each of ``node_ids`` until one succeeds."""
        for node_id in node_ids:
            self._offset += 1
            entry = controller_pb2.OffsetCommitPartition(partition=0, offset=self._offset)
            request = controller_pb2.OffsetCommitRequest(
                group=GROUP, topics=[controller_pb2.OffsetCommitTopic(topic=TOPIC, partitions=[entry])]
            )
            try:
                response = self._stubs[self._addresses[node_id]].OffsetCommit(
                    request, timeout=self._timeout_s
                )
            except grpc.RpcError:
                continue
            if response.status.error == E.NONE and all(p.error == E.NONE for p in response.partitions):
                return True
        return False
