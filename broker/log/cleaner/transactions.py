"""Which transactional batches and markers a cleaning pass may drop (Kafka's
``CleanedTransactionMetadata``), fed every batch of the pass in offset order.

An aborted transaction's batches go at once (their records were never readable under
read_committed, and a read_uncommitted consumer of a compacted topic is promised only the
latest value of each key). Its ABORT marker stays while any batch of it was seen in the
pass, so the marker and its index entry outlive the batches it hides; once a pass sees
none, the marker may go, after its delete horizon. A COMMIT marker may go once a pass sees
no batch of its transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftka.broker.log.transaction_index import AbortedTxn
from raftka.records.batch import BatchHeader
from raftka.records.control import Marker


@dataclass(slots=True)
class _Aborted:
    txn: AbortedTxn
    seen_batch: bool = False


class CleanedTransactions:
    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda t: t.first_offset, reverse=True)  # popped from the end
        self._aborted: dict[int, _Aborted] = {}  # producer id -> its aborted transaction under way
        self._committed: set[int] = set()  # producers whose committed transaction had batches seen

    def _start_up_to(self, offset: int) -> None:
        while self._pending and self._pending[-1].first_offset <= offset:
            txn = self._pending.pop()
            self._aborted[txn.producer_id] = _Aborted(txn)

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch: whether it belongs to an aborted transaction (drop it)."""
        self._start_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        aborted = self._aborted.get(header.producer_id)
        if aborted is not None:
            aborted.seen_batch = True
            return True
        self._committed.add(header.producer_id)
        return False

    def on_marker(
        self, header: BatchHeader, marker: Marker | None, has_records: bool
    ) -> tuple[bool, AbortedTxn | None]:
        """A control batch: (whether its transaction left no batch behind, so the marker may
        go after its horizon; the aborted transaction to keep in the cleaned index)."""
        self._start_up_to(header.last_offset)
        if not has_records:
            return True, None  # emptied by an earlier pass
        if marker is None:
            return False, None
        if marker.committed:
            seen = header.producer_id in self._committed
            self._committed.discard(header.producer_id)
            return not seen, None
        aborted = self._aborted.pop(header.producer_id, None)
        if aborted is not None and aborted.seen_batch:
            return False, aborted.txn
        return True, None
