"""The transport interface the driver uses; gRPC and the simulator's network implement it.

Requests the core sends are delivered to the peer; the peer's response comes back
through ``Inbox.deliver``. A request that cannot be delivered because the peer is not
there (connection refused or reset) is reported with ``Inbox.unreachable``: that is the
fast signal of a dead leader. Silence (a hung peer, a cut link) is reported by nothing;
the core's timeouts cover it.
"""

from __future__ import annotations

from typing import Protocol

from raftka.raft.messages import Envelope


class Inbox(Protocol):
    def deliver(self, envelope: Envelope) -> None:
        """An inbound request (with the transport's ``rpc_id``) or a response to our request."""
        ...

    def unreachable(self, peer_id: int) -> None: ...

    def peer_connected(self, peer_id: int) -> None:
        """``peer_id`` opened its first connection into this node (or its first since its
        last one closed)."""
        ...

    def peer_disconnected(self, peer_id: int) -> None:
        """``peer_id``'s last connection into this node closed."""
        ...


class Transport(Protocol):
    async def start(self, inbox: Inbox) -> None: ...

    def send(self, envelope: Envelope) -> None:
        """Send without waiting: a request starts a call; a response completes call ``rpc_id``."""
        ...

    def add_peer(self, peer_id: int, address: str) -> None:
        """Reach ``peer_id`` at ``address`` (host:port) from now on: a voter the log added
        or moved (KIP-853). Calls in flight to a peer's old address are lost."""
        ...

    async def close(self) -> None: ...
