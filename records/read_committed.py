"""Which fetched batches a read_committed consumer drops (Kafka's ``CompletedFetch``).

A read_committed fetch returns records below the last stable offset and the aborted
transactions (producer id, first offset) they overlap. Walking the batches in order, an
aborted transaction's producer becomes "aborted" once a batch reaches its first offset;
from then on that producer's transactional batches are dropped, until its ABORT marker
ends the run. Control batches are never records, in either isolation level. No I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from raftka.records.batch import BatchHeader
from raftka.records.codec import RecordError
from raftka.records.control import read_marker


class AbortedBatches:
    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        self._pending = [(first_offset, producer_id) for producer_id, first_offset in aborted]
        heapq.heapify(self._pending)
        self._aborting: set[int] = set()

    def drops(self, header: BatchHeader, batch: bytes | bytearray | memoryview) -> bool:
        """Whether the batch (``batch``: its bytes) is dropped; call for every batch, in order."""
        if not header.has_producer_id:
            return header.is_control
        while self._pending and self._pending[0][0] <= header.last_offset:
            self._aborting.add(heapq.heappop(self._pending)[1])
        if header.is_control:
            try:
                marker = read_marker(bytes(batch))
            except RecordError:
                marker = None
            if marker is not None and not marker.committed:
                self._aborting.discard(header.producer_id)
            return True
        return header.is_transactional and header.producer_id in self._aborting
