"""Replica placement: which brokers hold each partition of a topic, and which one leads.

Guarantees for ``place_replicas`` when every rack has the same number of brokers (no
racks at all counts as one rack), for any partition count and seed:

- the replicas of a partition are distinct brokers;
- the replica counts of the brokers differ by at most one, and so do their preferred
  leaderships (first replicas);
- a partition's replicas span min(replication factor, racks) racks.

With racks of unequal size the rack spread still holds and balance is best effort, as
in Kafka: spreading over racks comes first.

How: brokers are listed rack-alternating (Kafka's ``getRackAlternatedBrokerList``) and
rotated by a seeded start. Partitions are taken in epochs of n (the broker count); in
epoch e the list is read with a seeded stride coprime to n (the "shift": which brokers
share partitions changes from epoch to epoch, so a dead broker's load spreads widely).
Partition q of an epoch takes the rf brokers at positions q*rf .. q*rf+rf-1, so the
replicas of an epoch form one round-robin stream (counts within one for any prefix,
exactly rf each for a full epoch), and a stride coprime to n keeps neighbours on
different racks. Its leader is the k-th of those with k = q // (n / gcd(rf, n)), which
makes the leaders of an epoch a permutation of the brokers.

CreatePartitions: ``place_new_partitions`` continues the same pattern when the topic
still has exactly the placement ``place_replicas`` gave it (same brokers, same seed), so
the grown topic is balanced as if it had been created at its new size; when brokers
came or went it fills the least-loaded brokers instead. Pass the same seed both times:
``topic_seed(topic_id)``.

Draining a broker (``replace_broker``): each of its replicas goes, in place, to the
least-loaded broker the partition lacks, racks spread first, so the replication factor
and every other replica stay.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TypeVar

from raftka.metadata.image import BrokerRegistration
from raftka.metadata.validation import ErrorCode, ValidationError

Assignment = list[tuple[int, ...]]
K = TypeVar("K")  # what identifies a partition to the caller


class PlacementError(ValidationError):
    """The brokers cannot hold the requested replicas: INVALID_REPLICATION_FACTOR (or
    INVALID_PARTITIONS for a negative count, which validation should have refused)."""


def topic_seed(topic_id: bytes) -> int:
    """The seed for a topic: random across topics (leaders spread cluster-wide), fixed for one."""
    return int.from_bytes(topic_id[:8], "big")


def place_replicas(
    brokers: Sequence[BrokerRegistration],
    num_partitions: int,
    replication_factor: int,
    *,
    first_partition: int = 0,
    seed: int = 0,
) -> Assignment:
    """Replicas (preferred leader first) of partitions first_partition .. +num_partitions-1."""
    _check(brokers, replication_factor)
    if num_partitions < 0 or first_partition < 0:
        raise PlacementError(
            ErrorCode.INVALID_PARTITIONS,
            f"cannot place {num_partitions} partitions from partition {first_partition}",
        )
    layout = _Layout(brokers, seed)
    return [
        layout.replicas(p, replication_factor)
        for p in range(first_partition, first_partition + num_partitions)
    ]


def place_new_partitions(
    brokers: Sequence[BrokerRegistration],
    current: Sequence[Sequence[int]],
    count: int,
    *,
    seed: int = 0,
) -> Assignment:
    """Replicas for ``count`` partitions added to a topic whose partitions are ``current``
    (replicas of partition 0, 1, ... in order, as the image holds them).

    The replication factor is that of the existing partitions (as in Kafka), so it must
    still fit the unfenced brokers.
    """
    if not current or count < 0:
        raise PlacementError(
            ErrorCode.INVALID_PARTITIONS, f"cannot add {count} partitions to a topic of {len(current)}"
        )
    rf = len(current[0])
    existing = [tuple(replicas) for replicas in current]
    if existing == place_replicas(brokers, len(existing), rf, seed=seed):
        return place_replicas(brokers, count, rf, first_partition=len(existing), seed=seed)
    return _fill_least_loaded(_Layout(brokers, seed), existing, count, rf)


def _check(brokers: Sequence[BrokerRegistration], replication_factor: int) -> None:
    if replication_factor < 1:
        raise PlacementError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor must be at least 1, got {replication_factor}",
        )
    if replication_factor > len(brokers):
        raise PlacementError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {replication_factor} is larger than the {len(brokers)} available (unfenced) brokers",
        )


class _Layout:
    """The seeded, rack-alternating broker order and the per-epoch strides over it."""

    def __init__(self, brokers: Sequence[BrokerRegistration], seed: int) -> None:
        by_rack: dict[str, list[int]] = {}
        for broker in sorted(brokers, key=lambda b: b.broker_id):
            by_rack.setdefault(broker.rack, []).append(broker.broker_id)
        racks = [by_rack[rack] for rack in sorted(by_rack)]
        alternating = [rack[i] for i in range(max(map(len, racks))) for rack in racks if i < len(rack)]
        self.rack_of = {b.broker_id: b.rack for b in brokers}
        self.rack_count = len(racks)
        self.n = len(alternating)
        rng = random.Random(seed)
        start = rng.randrange(self.n)
        self.order = alternating[start:] + alternating[:start]
        # A stride scatters neighbours only where it keeps them on different racks.
        equal_racks = len({len(rack) for rack in racks}) == 1
        self.strides = (
            [u for u in range(1, max(self.n, 2)) if math.gcd(u, self.n) == 1] if equal_racks else [1]
        )
        self.shift = rng.randrange(len(self.strides))
        self._epoch = -1
        self._epoch_order: list[int] = []

    def replicas(self, partition: int, rf: int) -> tuple[int, ...]:
        epoch, q = divmod(partition, self.n)
        chosen = self.pick(self._order_for(epoch), q * rf, rf)
        leader = chosen[q // (self.n // math.gcd(rf, self.n))]
        return (leader, *(b for b in chosen if b != leader))

    def pick(self, order: Sequence[int], start: int, rf: int) -> list[int]:
        """rf brokers walking ``order`` from ``start``, skipping a used rack until every rack is used.

        The first lap takes the first broker of every rack it meets, so two laps always
        suffice. With equal racks the walk takes exactly the rf brokers from ``start``.
        """
        chosen: list[int] = []
        racks: set[str] = set()
        for i in range(start, start + 2 * self.n):
            broker = order[i % self.n]
            if broker in chosen or self.rack_repeats(broker, racks):
                continue
            chosen.append(broker)
            racks.add(self.rack_of[broker])
            if len(chosen) == rf:
                break
        return chosen

    def rack_repeats(self, broker: int, racks: set[str]) -> bool:
        """True while ``broker``'s rack is taken and some rack is not."""
        return self.rack_of[broker] in racks and len(racks) < self.rack_count

    def _order_for(self, epoch: int) -> list[int]:
        if epoch != self._epoch:
            stride = self.strides[(self.shift + epoch) % len(self.strides)]
            self._epoch_order = [self.order[i * stride % self.n] for i in range(self.n)]
            self._epoch = epoch
        return self._epoch_order


def _fill_least_loaded(layout: _Layout, existing: Assignment, count: int, rf: int) -> Assignment:
    """Each new partition on the rf least-loaded brokers (racks spread first), led by the one
    of them with the fewest leaderships. Replicas on brokers not in ``layout`` do not count.

    Without racks the replica-count spread never grows; ties rotate through the seeded order.
    """
    known = set(layout.order)
    load = Counter(b for replicas in existing for b in replicas if b in known)
    leads = Counter(replicas[0] for replicas in existing if replicas[0] in known)
    placed: Assignment = []
    for i in range(count):
        turn = i % layout.n
        rotation = layout.order[turn:] + layout.order[:turn]  # min() keeps the first of equals
        chosen: list[int] = []
        racks: set[str] = set()
        for _ in range(rf):
            candidates = [b for b in rotation if b not in chosen]
            repeats = {b: layout.rack_repeats(b, racks) for b in candidates}
            broker = min(candidates, key=lambda b, repeats=repeats: (repeats[b], load[b], leads[b]))
            chosen.append(broker)
            racks.add(layout.rack_of[broker])
        leader = min(chosen, key=lambda b: (leads[b], rotation.index(b)))
        replicas = (leader, *(b for b in chosen if b != leader))
        load.update(replicas)
        leads[leader] += 1
        placed.append(replicas)
    return placed


def replace_broker(
    brokers: Sequence[BrokerRegistration], current: Mapping[K, Sequence[int]], leaving: int
) -> dict[K, tuple[int, ...]]:
    """New replicas for every partition of ``current`` (key -> replicas) that ``leaving``
    holds, each with ``leaving`` replaced in its place (a preferred leader's successor is
    preferred) by the broker of ``brokers`` that the partition does not have yet, chosen
    as ``_fill_least_loaded`` chooses: racks spread first, then the fewest replicas, then
    the fewest preferred leaderships. The replication factor stays; the other replicas
    do not move. PlacementError if some partition has no broker left to take its place."""
    candidates = [b for b in brokers if b.broker_id != leaving]
    layout = _Layout(candidates, seed=leaving) if candidates else None
    load = Counter(b for replicas in current.values() for b in replicas)
    leads = Counter(replicas[0] for replicas in current.values() if replicas)
    moved: dict[K, tuple[int, ...]] = {}
    for key, replicas in current.items():
        if leaving not in replicas:
            continue
        kept = [b for b in replicas if b != leaving]
        options = [] if layout is None else [b for b in layout.order if b not in kept]
        if not options:
            raise PlacementError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"{key}: no broker outside {list(replicas)} to take broker {leaving}'s replica",
            )
        assert layout is not None
        racks = {layout.rack_of[b] for b in kept if b in layout.rack_of}
        successor = min(options, key=lambda b: (layout.rack_repeats(b, racks), load[b], leads[b]))
        new = tuple(successor if b == leaving else b for b in replicas)
        load[successor] += 1
        if replicas[0] == leaving:
            leads[successor] += 1
        moved[key] = new
    return moved
