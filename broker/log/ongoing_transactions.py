"""A partition's open transactions and the first offset a read_committed consumer may not
read past (Kafka's ``ongoingTxns``, ``unreplicatedTxns`` and ``firstUnstableOffset``).

A transaction is open here from its producer's first transactional batch to its marker.
The last stable offset is the smallest first offset of an open transaction, or the high
watermark when it is lower. A transaction whose marker is written but not yet below the
high watermark still holds it (``unreplicated``): a new leader without that marker would
see the transaction open again, and the last stable offset must never go back.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool
    last_stable_offset: int  # once it ended: the next open transaction's first offset, or past the marker


class OngoingTransactions:
    def __init__(self) -> None:
        # producer id -> first offset, in the order they began: by first offset, as batches are
        # appended in offset order (``begin`` must be called so), so the first is the smallest
        self.ongoing: dict[int, int] = {}
        self.unreplicated: collections.deque[CompletedTxn] = collections.deque()  # in marker order

    def begin(self, producer_id: int, first_offset: int) -> None:
        self.ongoing[producer_id] = first_offset

    def end(self, producer_id: int, marker_offset: int, aborted: bool) -> CompletedTxn | None:
        """The producer's transaction, ended by its marker at ``marker_offset``; None if it
        had none open here (the marker ends nothing, as Kafka's ``appendEndTxnMarker``)."""
        first = self.ongoing.pop(producer_id, None)
        if first is None:
            return None
        others = next(iter(self.ongoing.values()), marker_offset + 1)
        completed = CompletedTxn(producer_id, first, marker_offset, aborted, others)
        self.unreplicated.append(completed)
        return completed

    def high_watermark_moved(self, high_watermark: int) -> None:
        """Forget the ended transactions whose markers are now below ``high_watermark``."""
        while self.unreplicated and self.unreplicated[0].last_offset < high_watermark:
            self.unreplicated.popleft()

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of an open transaction, or of an ended one whose marker is not
        below ``high_watermark``; None if there is none."""
        self.high_watermark_moved(high_watermark)
        first = next(iter(self.ongoing.values()), None)
        for ended in self.unreplicated:  # few: only those with markers above the high watermark
            if first is None or ended.first_offset < first:
                first = ended.first_offset
        return first
