"""Client quotas on the Kafka listener, throttled as Kafka throttles (KIP-219): the answer
goes back at once with ``throttle_time_ms``, and the connection is then muted for that
long (``raftka.wire.mute``), so a client that ignores it gains nothing.

A client is its user (the principal of the connection, ``ANONYMOUS`` without one) and the
client id of its request header. Produce counts the record batch bytes it carries and
Fetch the record batch bytes it returns (``raftka.broker.kafka.log_apis``); every request
counts the loop time it took (``answer_within_quotas``). A throttled fetch returns no
records and its bytes are taken back, as Kafka's; a fetch asks no more bytes than its
client's quota allows over the quota's span but one window, so a fetch that fits is
never throttled for its size alone. An answer throttled by both quotas says the longer
time; acks=0 produces get no answer, only the mute.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kafka.protocol.api_message import ApiMessage

from raftka.broker.quota import throttle as quota_throttle
from raftka.broker.quota.manager import ClientQuotaManager, ClientQuotas
from raftka.broker.quota.request_time import LoopTime, timed
from raftka.metadata.quotas import NAME_CHARS_MAX


class Client:
    """Who a Kafka request counts against: the connection's user, the header's client id
    (its first ``NAME_CHARS_MAX`` characters, as long as a quota entity's name may be, so
    budgets stay small whatever ids clients make up)."""

    __slots__ = ("user", "client_id")

    def __init__(self, request: ApiMessage) -> None:
        self.user = quota_throttle.client_user()
        self.client_id = (request.header.client_id or "")[:NAME_CHARS_MAX]


def throttle(manager: ClientQuotaManager, client: Client, value: float) -> int:
    """``raftka.broker.quota.throttle.throttle`` for a Kafka client."""
    return quota_throttle.throttle(manager, client.user, client.client_id, value)


async def answer_within_quotas(
    quotas: ClientQuotas,
    handler: Callable[[Any, int], Awaitable[ApiMessage | None]],
    request: ApiMessage,
    version: int,
    decode_s: float,
) -> ApiMessage | None:
    """``handler``'s answer, its loop time counted against the client's request quota."""
    spent = LoopTime(decode_s)
    response = await timed(handler(request, version), spent)
    throttle_ms = throttle(quotas.request, Client(request), spent.seconds * 1000)
    if throttle_ms > (getattr(response, "throttle_time_ms", None) or 0) and hasattr(
        response, "throttle_time_ms"
    ):
        response.throttle_time_ms = throttle_ms  # type: ignore[union-attr]
    return response
