"""A leader's ISR changes, sent to the active controller as AlterPartition requests.

Changes wait in a map keyed by partition (a newer change for the same partition
replaces the older) and go out together, one request at a time: each is a
compare-and-set on the partition epoch the leader last saw. An answer settles each
partition: committed (the partition takes the new ISR and epoch at once, before the
metadata log brings them), or refused, after which the partition asks again only once
the metadata has moved past the epoch it tried (Kafka's AlterPartitionManager); or
committed with a new leader elected (a reassignment completed), after which the change
stays pending until the metadata says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from raftka.broker.controller_link import ControllerLink, LinkError
from raftka.broker.replica.partition import Partition
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
log = structlog.get_logger("broker.isr")

RETRY_BACKOFF_S = 0.1
CHANGES_PER_REQUEST_MAX = 1_000  # within the controller's per-request bound on AlterPartition
# Our view of the partition is behind the controller's: wait for the metadata to catch up.
_STALE = frozenset({E.INVALID_UPDATE_VERSION, E.FENCED_LEADER_EPOCH})


class IsrChanges:
    def __init__(
        self,
        link: ControllerLink,
        broker_id: int,
        broker_epoch: Callable[[], int],
        on_settled: Callable[[Partition], None],
    ) -> None:
        self._link = link
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._on_settled = on_settled
        self._waiting: dict[Partition, tuple[int, ...]] = {}
        self.shrinks = 0  # changes the controller accepted, for the metrics (``raftka.broker.metrics``)
        self.expands = 0
        self._wake = asyncio.Event()

    def request(self, partition: Partition, new_isr: tuple[int, ...]) -> None:
        self._waiting[partition] = new_isr
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:
                sent = dict(list(self._waiting.items())[:CHANGES_PER_REQUEST_MAX])
                for partition in sent:
                    del self._waiting[partition]
                if not await self._send(sent):
                    for partition, isr in sent.items():
                        self._waiting.setdefault(partition, isr)
                    await asyncio.sleep(RETRY_BACKOFF_S)

    async def _send(self, changes: dict[Partition, tuple[int, ...]]) -> bool:
        """False when no controller answered: the changes stay to be sent again."""
        live = {p: isr for p, isr in changes.items() if p.is_leader and p.pending_isr == isr}
        if not live:
            return True
        request = controller_pb2.AlterPartitionRequest(
            broker_id=self._broker_id, broker_epoch=self._broker_epoch()
        )
        # (partition, its epoch and ISR size when asked: the metadata may bring the change first)
        tried: dict[tuple[bytes, int], tuple[Partition, int, int]] = {}
        by_topic: dict[bytes, controller_pb2.AlterPartitionTopic] = {}
        for partition, isr in live.items():
            topic = by_topic.get(partition.topic_id)
            if topic is None:
                topic = by_topic[partition.topic_id] = request.topics.add(topic_id=partition.topic_id)
            topic.partitions.add(
                partition=partition.partition,
                leader_epoch=partition.leader_epoch,
                new_isr=isr,
                partition_epoch=partition.partition_epoch,
                new_isr_broker_epochs=partition.broker_epochs(isr, request.broker_epoch),
            )
            key = (partition.topic_id, partition.partition)
            tried[key] = (partition, partition.partition_epoch, len(partition.isr))
        try:
            response = await self._link.call(lambda stub: stub.AlterPartition, request)
        except LinkError as e:
            log.debug("isr change not sent", detail=str(e))
            return False
        if response.status.error != E.NONE:
            log.warning(
                "isr change refused", error=E.Name(response.status.error), detail=response.status.message
            )
            for partition, _, _ in tried.values():
                partition.isr_change_refused(-1)
                self._on_settled(partition)
            return True
        for result in response.partitions:
            partition, epoch, isr_size = tried[(result.topic_id, result.partition)]
            settle(partition, result, epoch)
            if result.error == E.NONE:
                self.shrinks += len(result.isr) < isr_size
                self.expands += len(result.isr) > isr_size
            self._on_settled(partition)
        return True


def settle(partition: Partition, result: controller_pb2.AlterPartitionResult, tried_epoch: int) -> None:
    """The controller's answer to ``partition``'s change, asked at partition epoch ``tried_epoch``."""
    if result.error == E.NONE:
        partition.isr_change_committed(tuple(result.isr), result.partition_epoch)
    elif result.error == E.NEW_LEADER_ELECTED:
        # Committed, and it completed a reassignment that moved the leader off this broker,
        # which does not know yet: the change stays pending (its maximal ISR keeps holding
        # the high watermark back) until the metadata brings the new leader, as Kafka's
        # Partition.handleAlterPartitionError does.
        log.info("isr change completed a reassignment", partition=partition.name, leader=result.leader)
        partition.isr_change_superseded(tried_epoch + 1)
    else:
        log.info(
            "isr change refused", partition=partition.name, error=E.Name(result.error), detail=result.message
        )
        partition.isr_change_refused(tried_epoch + 1 if result.error in _STALE else -1)
