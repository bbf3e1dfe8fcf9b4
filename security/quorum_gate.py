"""Who may speak on the quorum's Exchange streams (with mutual TLS on).

Only controller certificates take part in elections and replication as voters, each
only as itself: controller 1's certificate cannot send a Vote as node 2. Brokers follow
the metadata log as observers, so a broker's certificate may Fetch (and FetchSnapshot),
as its own id, which must not be a voter's (a broker posing as a voter would count
towards the high watermark). Client certificates cannot open a stream at all. The voters
are asked for on every check: with a voter set in the log (KIP-853), they change while the
node runs, and a broker must not fetch as a controller added since it connected.

The gate remembers the ids it has seen on broker certificates (``is_broker``): a broker's
identity can never become a voter (``raftka.metadata.quorum_authorization``).
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from raftka.security.principal import BROKER, CONTROLLER, from_grpc

OBSERVER_RPCS = frozenset({"fetch", "fetch_snapshot"})
Check = Callable[[str, int], str | None]  # (rpc field, sender id) -> why refused, or None
BROKERS_SEEN_MAX = 65_536  # broker ids remembered; the oldest is forgotten first


class QuorumGate:
    """The transport's ``exchange_gate``: called with a stream's context, it returns the
    check of each request on it, or raises PermissionError to refuse the stream outright."""

    def __init__(self, is_voter: Callable[[int], bool]) -> None:
        self._is_voter = is_voter
        self._brokers_seen: dict[int, None] = {}  # insertion-ordered: a bounded set

    def is_broker(self, node_id: int) -> bool:
        """A broker's certificate has connected to the quorum as ``node_id``."""
        return node_id in self._brokers_seen

    def __call__(self, context: grpc.aio.ServicerContext) -> Check:
        caller = from_grpc(context)
        if caller is None:  # a plaintext server
            return lambda rpc, sender: None
        if caller.role == CONTROLLER:
            return lambda rpc, sender: (
                None if sender == caller.node_id else f"{caller} may not speak for node {sender}"
            )
        if caller.role == BROKER:
            assert caller.node_id is not None
            self._remember_broker(caller.node_id)
            is_voter = self._is_voter

            def observer(rpc: str, sender: int) -> str | None:
                if rpc not in OBSERVER_RPCS:
                    return f"{rpc}: only controllers vote and lead, and {caller} is a broker's certificate"
                if sender != caller.node_id or is_voter(sender):
                    return f"{caller} may fetch only as observer {caller.node_id}, not as node {sender}"
                return None

            return observer
        raise PermissionError(
            f"{caller} may not join the quorum: only controller and broker certificates may"
        )

    def _remember_broker(self, node_id: int) -> None:
        self._brokers_seen.pop(node_id, None)
        self._brokers_seen[node_id] = None
        if len(self._brokers_seen) > BROKERS_SEEN_MAX:
            del self._brokers_seen[next(iter(self._brokers_seen))]
