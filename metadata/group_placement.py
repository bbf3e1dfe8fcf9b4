"""Which broker coordinates a consumer group: one answer per image, the same on every node.

A group's coordinator is the unfenced broker with the highest hash of (broker id, group
id), rendezvous hashing, so every broker computes the same answer from its image and a
broker that comes or goes moves only its own share of groups. The brokers use it to
know which groups they serve; the controller uses it to take a group's writes only from
that broker (``raftka.metadata.group_ops``).
"""

from __future__ import annotations

from collections.abc import Iterable

import crc32c

from raftka.metadata.image import MetadataImage


def coordinator_for(group_id: str, broker_ids: Iterable[int]) -> int | None:
    """Rendezvous hashing: the broker with the highest hash of (broker, group)."""
    return max(broker_ids, key=lambda b: (crc32c.crc32c(f"{b}\x00{group_id}".encode()), b), default=None)


def group_coordinator(image: MetadataImage, group_id: str) -> int | None:
    """The group's coordinator in ``image``; None while no broker is unfenced."""
    return coordinator_for(group_id, (b.broker_id for b in image.unfenced_brokers()))
