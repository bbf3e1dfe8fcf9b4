"""Throttling a client over its quota, the same on every listener that has connections
(Kafka's and the data protocol's): count what it used, and when that puts it over its
quota mute its connection (``raftka.wire.mute``) for the throttle time, which the answer
also carries. Requests served elsewhere (gRPC) are counted but have no connection to mute.
"""

from __future__ import annotations

from raftka.broker.quota.manager import ClientQuotaManager
from raftka.metadata.quotas import user_of
from raftka.security.principal import current_principal
from raftka.wire.mute import current_mute


def client_user() -> str:
    """The quota user of the request being handled: its connection's principal, or
    Kafka's ANONYMOUS on a connection without one."""
    principal = current_principal.get()
    return user_of(principal.name if principal is not None else None)


def throttle(manager: ClientQuotaManager, user: str, client_id: str, value: float) -> int:
    """Count ``value`` on ``manager``'s quota; when over it, mute the connection and return
    the throttle time for the answer (0: none)."""
    throttle_ms = manager.record(user, client_id, value)
    if throttle_ms > 0:
        manager.throttled(user, client_id, throttle_ms)
        mute = current_mute.get()
        if mute is not None:
            mute.mute_for(throttle_ms)
    return throttle_ms
