"""A partition's open transactions and the first offset a read_committed consumer may not
read past (Kafka's ``ongoingTxns``, ``unreplicatedTxns`` and ``firstUnstableOffset``).

A transaction is open here from its producer's first transactional batch to its marker.
The last stable offset is the smallest first offset of an open transaction, or the high
watermark when it is lower. A transaction whose marker is written but not yet below the
high watermark still holds it (``unreplicated``): a new leader without that marker would
see the transaction open again, and the last stable offset must never go back.
"""

from __future__ import annotations

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
        self.ongoing: dict[int, int] = {}  # producer id -> first offset, in the order they began
        self.unreplicated: list[CompletedTxn] = []  # in marker order

    def begin(self, producer_id: int, first_offset: int) -> None:
        self.ongoing[producer_id] = first_offset

    def end(self, producer_id: int, marker_offset: int, aborted: bool) -> CompletedTxn:
        """The producer's transaction, ended by its marker at ``marker_offset``; one with no
        open transaction here spans the marker alone."""
        first = self.ongoing.pop(producer_id, marker_offset)
        others = min(self.ongoing.values(), default=marker_offset + 1)
        completed = CompletedTxn(producer_id, first, marker_offset, aborted, others)
        self.unreplicated.append(completed)
        return completed

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of an open transaction, or of an ended one whose marker is not
        below ``high_watermark``; None if there is none."""
        while self.unreplicated and self.unreplicated[0].last_offset < high_watermark:
            self.unreplicated.pop(0)
        firsts = [*self.ongoing.values(), *(t.first_offset for t in self.unreplicated)]
        return min(firsts, default=None)

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None else min(first, high_watermark)
