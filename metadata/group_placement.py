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
from raftka.metadata.validation import ValidationError
from raftka.v1 import controller_pb2


def coordinator_for(group_id: str, broker_ids: Iterable[int]) -> int | None:
    """Rendezvous hashing: the broker with the highest hash of (broker, group)."""
    return max(broker_ids, key=lambda b: (crc32c.crc32c(f"{b}\x00{group_id}".encode()), b), default=None)


def group_coordinator(image: MetadataImage, group_id: str) -> int | None:
    """The group's coordinator in ``image``; None while no broker is unfenced."""
    return coordinator_for(group_id, (b.broker_id for b in image.unfenced_brokers()))


def check_coordinator(image: MetadataImage, group_id: str, sender: int) -> None:
    """ValidationError (NOT_COORDINATOR) unless ``sender`` coordinates the group in ``image``."""
    coordinator = group_coordinator(image, group_id)
    if coordinator != sender:
        where = "no broker does" if coordinator is None else f"broker {coordinator} does"
        raise ValidationError(
            controller_pb2.ErrorCode.NOT_COORDINATOR,
            f"broker {sender} does not coordinate group {group_id!r}: {where}",
        )
