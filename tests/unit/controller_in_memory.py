"""The active controller as the broker's controller link sees it, in memory: the group,
offset, transaction and producer-id requests a broker forwards are planned by the controller's own handlers
(``raftka.metadata.group_ops``, ``offset_ops``, ``txn_ops``, ``broker_ops``, ``topic_ops``, ``scram_ops``,
``reassign_ops``) on an image and replayed into it, and every new
image goes to the listeners a broker would feed (its group coordinator)."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import Callable
from typing import Any

from raftka.metadata import (
    broker_ops,
    config_ops,
    group_ops,
    offset_ops,
    quota_ops,
    reassign_ops,
    scram_ops,
    topic_ops,
    txn_ops,
)
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.image import MetadataImage
from raftka.rpc.stubs import ControllerRpc
from raftka.security import scram

NOW_MS = 1_700_000_000_000


class ControllerInMemory:
    """A controller link and the controller stub it calls, in one: ``call(rpc, request)``
    picks one of the methods below, as the real link picks one of its stub's."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.listeners: list[Callable[[MetadataImage], None]] = []
        self.rebalance_commit_s = 0.0  # how long a rebalance takes to commit: a slow quorum's, if set
        self.wall_clock_ms = NOW_MS  # the controller's wall clock, as transactions' stamps read it

    async def call(self, rpc: ControllerRpc, request: Any) -> Any:
        return await rpc(self)(request, timeout=1.0)

    async def OffsetFetch(self, request: Any, timeout: float) -> Any:
        return offset_ops.fetch(self.image, request)

    async def OffsetCommit(self, request: Any, timeout: float) -> Any:
        return self._commit(offset_ops.commit(self.image, request, NOW_MS))

    async def CommitGroupOffsets(self, request: Any, timeout: float) -> Any:
        return self._commit(group_ops.commit_batch(self.image, request, NOW_MS))

    async def RecordGroupRebalance(self, request: Any, timeout: float) -> Any:
        if self.rebalance_commit_s:
            await asyncio.sleep(self.rebalance_commit_s)
        return self._commit(group_ops.record_rebalance(self.image, request, NOW_MS))

    async def WriteTransaction(self, request: Any, timeout: float) -> Any:
        return self._commit(txn_ops.write(self.image, request, self.wall_clock_ms))

    async def TxnOffsetCommit(self, request: Any, timeout: float) -> Any:
        return self._commit(txn_ops.commit_offsets(self.image, request, self.wall_clock_ms))

    async def CreateTopics(self, request: Any, timeout: float) -> Any:
        limits = topic_ops.Limits(max_partitions=1_000, records_max=4_096)
        return self._commit(topic_ops.create_topics(self.image, request, limits, lambda: uuid.uuid4().bytes))

    async def DeleteTopics(self, request: Any, timeout: float) -> Any:
        return self._commit(topic_ops.delete_topics(self.image, request))

    async def DeleteGroups(self, request: Any, timeout: float) -> Any:
        return self._commit(group_ops.delete(self.image, request))

    async def AlterClientQuotas(self, request: Any, timeout: float) -> Any:
        return self._commit(quota_ops.alter(self.image, request))

    async def AlterConfigs(self, request: Any, timeout: float) -> Any:
        return self._commit(config_ops.alter(self.image, request))

    async def UnregisterBroker(self, request: Any, timeout: float) -> Any:
        """Step after step, as the controller runs it, until the registration is gone."""
        while True:
            plan = broker_ops.unregister(self.image, request.broker_id, records_max=4_096)
            self._commit(plan)
            if plan.failed or plan.records[-1].HasField("unregister_broker"):
                return plan.response

    async def AllocateProducerIds(self, request: Any, timeout: float) -> Any:
        return self._commit(broker_ops.allocate_producer_ids(self.image, request))

    async def AlterUserScramCredentials(self, request: Any, timeout: float) -> Any:
        return self._commit(scram_ops.alter(self.image, request, secrets.token_bytes(scram.DECOY_KEY_BYTES)))

    async def DescribeUserScramCredentials(self, request: Any, timeout: float) -> Any:
        return scram_ops.describe(self.image, request)

    async def AlterPartitionReassignments(self, request: Any, timeout: float) -> Any:
        return self._commit(reassign_ops.alter(self.image, request))

    async def ListPartitionReassignments(self, request: Any, timeout: float) -> Any:
        return reassign_ops.list_reassignments(self.image, request)

    def _commit(self, plan: Any) -> Any:
        """The plan's records replayed into the image at once, as if committed; its answer."""
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
