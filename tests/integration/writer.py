"""A stream of journal appends in a background thread, following the leader through faults.

Faults are injected while this runs, so appends are in flight when a leader dies. It
sends one append at a time, each with a fresh entry (see ``history.py``), to whichever
node it believes leads: a NOT_LEADER answer names the next one to try, and a node that
does not answer sends it round the others.
"""

from __future__ import annotations

import threading
from types import TracebackType

from tests.integration.client import AppendStatus
from tests.integration.harness import Cluster

APPEND_TIMEOUT_S = 2.0  # a stopped or cut-off leader costs the stream this much
RETRY_BACKOFF_S = 0.02  # after a failed attempt, so a leaderless cluster is not hammered
_JOIN_TIMEOUT_S = APPEND_TIMEOUT_S + 5.0


class JournalWriter:
    """Use as a context manager; leaving it stops the stream and re-raises its errors."""

    def __init__(self, cluster: Cluster, prefix: str) -> None:
        self._cluster = cluster
        self._prefix = prefix
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"journal-writer-{prefix}", daemon=True)

    def __enter__(self) -> JournalWriter:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(_JOIN_TIMEOUT_S)
        assert not self._thread.is_alive(), "the journal writer did not stop"
        if self._error is not None:
            raise AssertionError("the journal writer failed") from self._error

    def _run(self) -> None:
        try:
            self._write()
        except BaseException as e:  # re-raised in the test's thread by stop()
            self._error = e

    def _write(self) -> None:
        node_ids = self._cluster.node_ids
        target = node_ids[0]
        sequence = 0
        while not self._stop.is_set():
            entry = f"{self._prefix}-{sequence:06d}".encode()
            sequence += 1
            outcome = self._cluster.try_append(target, [entry], APPEND_TIMEOUT_S)
            if outcome.status is AppendStatus.ACKED:
                continue
            if outcome.status is AppendStatus.NOT_LEADER and outcome.leader_id not in (-1, target):
                target = outcome.leader_id
            else:
                target = node_ids[(node_ids.index(target) + 1) % len(node_ids)]
            self._stop.wait(RETRY_BACKOFF_S)
