"""Who may be in the ISR an AlterPartition asks for (KIP-903).

A leader adds a follower to the ISR once the follower's fetches show it caught up. Those
fetches may be from an incarnation that has since died: a follower that crashed, lost
its disk and registered again fetches from offset 0, but an AlterPartition built on its
old fetches can still be on its way. So the leader names, for each member, the broker
epoch it saw in that member's fetches, and the controller refuses (INELIGIBLE_REPLICA)
a member that is not registered, is fenced, is in controlled shutdown, or whose broker
epoch is not its current registration's. An added member must carry its epoch; a member
the ISR already has may carry -1 (the leader has not heard from it in this epoch).
"""

from __future__ import annotations

from collections.abc import Collection

from raftka.metadata.image import MetadataImage, PartitionState
from raftka.metadata.plan import ErrorCode
from raftka.metadata.validation import ValidationError
from raftka.v1 import controller_pb2

UNKNOWN_EPOCH = -1


def check(
    image: MetadataImage,
    state: PartitionState,
    data: controller_pb2.AlterPartitionData,
    shutting_down: Collection[int],
) -> None:
    """ValidationError naming the first member of ``data.new_isr`` that may not be in it."""
    count = len(data.new_isr_broker_epochs)  # before it is read: as long as new_isr, or empty
    if count and count != len(data.new_isr):
        raise ValidationError(
            ErrorCode.INVALID_REQUEST,
            f"new_isr_broker_epochs: {count} entries for {len(data.new_isr)} new_isr members",
        )
    epochs = list(data.new_isr_broker_epochs)
    for broker_id, epoch in zip(data.new_isr, epochs or [UNKNOWN_EPOCH] * len(data.new_isr), strict=True):
        problem = _problem(image, broker_id, epoch, broker_id not in state.isr, shutting_down)
        if problem is not None:
            raise ValidationError(ErrorCode.INELIGIBLE_REPLICA, f"new_isr: broker {broker_id} {problem}")


def _problem(
    image: MetadataImage, broker_id: int, epoch: int, added: bool, shutting_down: Collection[int]
) -> str | None:
    broker = image.brokers.get(broker_id)
    if broker is None:
        return "is not registered"
    if broker.fenced:
        return "is fenced"
    if added and broker_id in shutting_down:
        return "is shutting down"
    if added and epoch == UNKNOWN_EPOCH:
        return "is added without its broker epoch"
    if epoch != UNKNOWN_EPOCH and epoch != broker.epoch:
        return f"has broker epoch {broker.epoch}, not {epoch}: it restarted since the leader saw it fetch"
    return None
