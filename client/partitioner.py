"""Kafka's default partitioning, so a key lands where a Java client would put it.

A key goes to ``toPositive(murmur2(key)) % partitions`` (murmur2 from aiokafka, the
same function as Kafka's ``Utils.murmur2``). Records without a key stick to one
partition until a batch for it is sent, then move to another (KIP-480's sticky
partitioner), so keyless records fill batches instead of spreading thin.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from aiokafka.partitioner import murmur2


def default_partition(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, available: Callable[[], Sequence[int]]) -> int:
        """``available`` is only called when a partition must be chosen."""
        current = self._sticky.get(topic)
        if current is None or current >= num_partitions:
            current = self._choose(num_partitions, available(), previous=None)
            self._sticky[topic] = current
        return current

    def on_new_batch(self, topic: str, num_partitions: int, available: Sequence[int], previous: int) -> None:
        """A batch for ``previous`` is complete: the next records go elsewhere."""
        if self._sticky.get(topic) == previous:
            self._sticky[topic] = self._choose(num_partitions, available, previous)

    def _choose(self, num_partitions: int, available: Sequence[int], previous: int | None) -> int:
        candidates = [p for p in (available or range(num_partitions)) if p != previous] or [previous or 0]
        return self._rng.choice(candidates)
