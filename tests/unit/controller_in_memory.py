"""The active controller as the broker's controller link sees it, in memory: the group,
offset and producer-id requests a broker forwards are planned by the controller's own handlers
(``raftka.metadata.group_ops``, ``offset_ops``, ``broker_ops``) on an image and replayed into it, and every new
image goes to the listeners a broker would feed (its group coordinator)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raftka.metadata import broker_ops, group_ops, offset_ops
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.image import MetadataImage

NOW_MS = 1_700_000_000_000


class ControllerInMemory:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.calls: list[tuple[str, Any]] = []
        self.listeners: list[Callable[[MetadataImage], None]] = []

    async def call(self, method: str, request: Any) -> Any:
        self.calls.append((method, request))
        if method == "OffsetFetch":
            return offset_ops.fetch(self.image, request)
        plan = {
            "CommitGroupOffsets": lambda: group_ops.commit_batch(self.image, request, NOW_MS),
            "RecordGroupRebalance": lambda: group_ops.record_rebalance(self.image, request, NOW_MS),
            "DeleteGroups": lambda: group_ops.delete(self.image, request),
            "AllocateProducerIds": lambda: broker_ops.allocate_producer_ids(self.image, request),
        }[method]()
        if plan.records:
            delta = MetadataDelta(self.image)
            for record in plan.records:
                delta.replay(record)
            self.set_image(delta.apply(self.image.offset + len(plan.records)))
        return plan.response

    def set_image(self, image: MetadataImage) -> None:
        self.image = image
        for listener in self.listeners:
            listener(image)
