"""What the tests wrote, and the safety check every journal must pass against it.

Every append attempt carries entries never sent before, and is never retried with the
same entries: a NOT_LEADER or a timeout leaves an append ambiguous (it may have
committed), so re-sending it could put it in the journal twice for the client's sake and
hide a real duplicate. With unique entries, the journal must hold every acknowledged
entry exactly once and in acknowledgement order (appends are sequential), may hold an
unacknowledged one at most once, and nothing that was never sent.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence


class AppendHistory:
    """Entries attempted and acknowledged, in order; safe to share between threads."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._attempted: set[bytes] = set()
        self._acked: list[bytes] = []

    @property
    def acked(self) -> list[bytes]:
        with self._lock:
            return list(self._acked)

    def attempt(self, entries: Sequence[bytes]) -> None:
        with self._lock:
            fresh = self._attempted.isdisjoint(entries) and len(set(entries)) == len(entries)
            assert fresh, "an append must carry entries never sent before"
            self._attempted.update(entries)

    def ack(self, entries: Sequence[bytes]) -> None:
        with self._lock:
            self._acked.extend(entries)
            self._lock.notify_all()

    def wait_acked(self, count: int, timeout_s: float) -> None:
        """Block until ``count`` entries in all have been acknowledged."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self._acked) >= count, timeout_s):
                raise AssertionError(
                    f"timed out after {timeout_s:.1f}s waiting for {count} acknowledged entries "
                    f"(have {len(self._acked)})"
                )

    def check(self, journal: Sequence[bytes], node_id: int) -> None:
        """Raise AssertionError if ``journal`` lost, duplicated, reordered or invented entries."""
        with self._lock:
            acked = list(self._acked)
            attempted = set(self._attempted)
        twice = sorted(entry for entry, n in Counter(journal).items() if n > 1)
        assert not twice, f"node {node_id}: entries applied more than once: {twice[:10]}"
        invented = [entry for entry in journal if entry not in attempted]
        assert not invented, f"node {node_id}: entries nobody appended: {invented[:10]}"
        position = {entry: index for index, entry in enumerate(journal)}
        lost = [entry for entry in acked if entry not in position]
        assert not lost, f"node {node_id}: {len(lost)} acknowledged entries lost, first {lost[:10]}"
        order = [position[entry] for entry in acked]
        assert order == sorted(order), f"node {node_id}: acknowledged entries out of order"
