"""Broker heartbeat sessions: when each unfenced broker is due to be fenced.

Kept only by the active controller, in memory: a session is a deadline on the
controller's monotonic clock, pushed back by every heartbeat. A new active controller
cannot know how long ago a broker last heartbeated its predecessor, so it starts every
session afresh with a full timeout (as Kafka does), which never fences a live broker
early and delays fencing a dead one by at most one timeout.

A broker whose every connection to this controller closed is most likely dead: a
process that exits has its connections reset by the kernel at once. Its session is then
cut short to ``disconnect_fence_ms`` unless it reconnects or heartbeats first, so a dead
broker's partitions move in well under a second instead of a session timeout. A hung
broker (SIGSTOP) or one cut off by the network keeps its connections open and is fenced
by the session timeout, as before.

Each broker's last news (a heartbeat, a registration, a connection opened or closed) is
kept too: when every unfenced broker has gone without news for half a session, the
silence is shared, and the controller (``QuorumController._cut_off_from_brokers``) asks
whether it, rather than all of them, is the one cut off.
"""

from __future__ import annotations

from collections.abc import Iterable


class BrokerSessions:
    """One deadline per registered broker; bounded by the number of registrations."""

    def __init__(self, timeout_ms: int, disconnect_fence_ms: int = 0) -> None:
        """``disconnect_fence_ms``: 0 leaves a disconnected broker its full session."""
        assert timeout_ms > 0, timeout_ms
        assert 0 <= disconnect_fence_ms < timeout_ms, disconnect_fence_ms
        self.timeout_ms = timeout_ms
        self.disconnect_fence_ms = disconnect_fence_ms
        self._deadlines: dict[int, int] = {}
        self._news_ms: dict[int, int] = {}  # when this controller last heard of each broker

    def reset(self, broker_ids: Iterable[int], now_ms: int) -> None:
        """A new controller: every broker gets a full timeout from now."""
        self._deadlines = dict.fromkeys(broker_ids, now_ms + self.timeout_ms)
        self._news_ms = dict.fromkeys(self._deadlines, now_ms)

    def touch(self, broker_id: int, now_ms: int) -> None:
        """A heartbeat (or registration): a full session from now."""
        self._deadlines[broker_id] = now_ms + self.timeout_ms
        self._news_ms[broker_id] = now_ms

    def disconnected(self, broker_id: int, now_ms: int) -> bool:
        """The broker's last connection closed: cut its session short. True if it was cut.
        Either way it is news (most likely of its death), not silence."""
        deadline = self._deadlines.get(broker_id)
        if deadline is not None:
            self._news_ms[broker_id] = now_ms
        if not self.disconnect_fence_ms or deadline is None:
            return False
        self._deadlines[broker_id] = min(deadline, now_ms + self.disconnect_fence_ms)
        return True

    def reconnected(self, broker_id: int, now_ms: int) -> None:
        """The broker connected again: it is alive, so a full session from now."""
        if broker_id in self._deadlines:
            self.touch(broker_id, now_ms)

    def end(self, broker_id: int, now_ms: int) -> None:
        """The broker is known to be gone (it restarted): its session ends now."""
        if broker_id in self._deadlines:
            self._deadlines[broker_id] = now_ms

    def forget(self, broker_id: int) -> None:
        self._deadlines.pop(broker_id, None)
        self._news_ms.pop(broker_id, None)

    def silent_together(self, broker_ids: Iterable[int], now_ms: int) -> bool:
        """Has every one of ``broker_ids`` (at least one) gone half a session without news?
        A broker without a session has none to lose, and breaks the silence."""
        silent_since = now_ms - self.timeout_ms // 2
        news = [self._news_ms.get(b, now_ms) for b in broker_ids]
        return bool(news) and all(ms <= silent_since for ms in news)

    def is_live(self, broker_id: int, now_ms: int) -> bool:
        """The broker has a session that has not expired."""
        return self._deadlines.get(broker_id, now_ms) > now_ms

    def expired(self, now_ms: int) -> list[int]:
        """Brokers whose deadline has passed, in id order."""
        return sorted(b for b, deadline in self._deadlines.items() if deadline <= now_ms)

    def __contains__(self, broker_id: object) -> bool:
        return broker_id in self._deadlines
