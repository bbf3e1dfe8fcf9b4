"""The active controller, as the brokers see it: requests planned by the controller's own
handlers (``raftka.metadata.broker_ops``: registration, heartbeats, fencing, AlterPartition,
elections; ``group_ops``: the group coordinators' rebalance records and offset commits,
fenced by coordinator, broker epoch and generation; ``txn_ops``: the transaction
coordinators' transitions, and producer id blocks) on its image and replayed at once, as
if committed, and every new image sent to every broker over the simulated network, as the
metadata log would bring it.

The quorum itself is not simulated here (``tests.simulation`` does that): a failover is a
time with no controller (every request and answer lost) and then a new one on the same
committed image whose sessions all start afresh (``fail_over``); a broker cut off from it
simply hears nothing. Its session bookkeeping
is the real one (``raftka.metadata.sessions``), as are the restart rule (a new incarnation
before the old session ended fences the old one first) and the fencing in steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raftka.metadata import broker_ops, group_ops, offset_ops, reassign_ops, txn_ops
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.image import TOPIC, MetadataImage
from raftka.metadata.plan import MetadataRecord, Plan
from raftka.metadata.sessions import BrokerSessions
from raftka.v1 import controller_pb2, metadata_pb2

SESSION_TIMEOUT_MS = 600
TICK_MS = 50
RECORDS_MAX = 100


def topic_records(
    name: str, topic_id: bytes, replicas: list[tuple[int, ...]], configs: dict[str, str]
) -> list[MetadataRecord]:
    """A topic whose partition ``p`` has ``replicas[p]``, led by the first, every replica in sync."""
    records = [MetadataRecord(topic=metadata_pb2.TopicRecord(name=name, topic_id=topic_id))]
    records += [
        MetadataRecord(
            partition=metadata_pb2.PartitionRecord(
                partition_id=p,
                topic_id=topic_id,
                replicas=r,
                isr=r,
                leader=r[0],
                leader_epoch=0,
                partition_epoch=0,
            )
        )
        for p, r in enumerate(replicas)
    ]
    records += [
        MetadataRecord(
            config=metadata_pb2.ConfigRecord(resource_type=TOPIC, resource_name=name, name=k, value=v)
        )
        for k, v in configs.items()
    ]
    return records


class SimController:
    def __init__(
        self,
        clock: Callable[[], int],
        publish: Callable[[MetadataImage], None],
        commits_written: Callable[
            [
                MetadataImage,
                controller_pb2.CommitGroupOffsetsRequest,
                controller_pb2.CommitGroupOffsetsResponse,
            ],
            None,
        ],
        trace: Callable[[str], None],
    ) -> None:
        self._clock = clock
        self._publish = publish
        self._commits_written = commits_written  # told what each batch of group commits wrote
        self._trace = trace
        self.image = MetadataImage()
        self.sessions = BrokerSessions(SESSION_TIMEOUT_MS)
        self.history: list[MetadataImage] = []  # every image, for the report
        self.active = True

    def commit(self, records: list[MetadataRecord]) -> None:
        if not records:
            return
        delta = MetadataDelta(self.image)
        for record in records:
            delta.replay(record)
        self.image = delta.apply(self.image.offset + len(records))
        self.history.append(self.image)
        self._publish(self.image)

    def _plan(self, plan: Plan) -> Any:
        """Commit the plan's records; its response."""
        self.commit(plan.records)
        return plan.response

    # requests ---------------------------------------------------------------------------

    def register(
        self, request: controller_pb2.BrokerRegistrationRequest
    ) -> controller_pb2.BrokerRegistrationResponse:
        now = self._clock()
        live = self.sessions.is_live(request.broker_id, now)
        if broker_ops.restarted(self.image, request, has_live_session=live) is not None:
            self.sessions.end(request.broker_id, now)
            self._fence(request.broker_id)
            live = False
        plan = broker_ops.register(self.image, request, self.image.offset, has_live_session=live)
        if not plan.failed:
            self.sessions.touch(request.broker_id, now)
        return self._plan(plan)

    def heartbeat(
        self, request: controller_pb2.BrokerHeartbeatRequest
    ) -> controller_pb2.BrokerHeartbeatResponse:
        plan = broker_ops.heartbeat(self.image, request, (), RECORDS_MAX)
        if not plan.failed:
            self.sessions.touch(request.broker_id, self._clock())
        return self._plan(plan)

    def alter_partition(
        self, request: controller_pb2.AlterPartitionRequest
    ) -> controller_pb2.AlterPartitionResponse:
        return self._plan(broker_ops.alter_partition(self.image, request))

    def reassign(
        self, topic: str, partition: int, target: tuple[int, ...]
    ) -> controller_pb2.AlterPartitionReassignmentsResponse:
        """An operator's AlterPartitionReassignments, as the controller plans it."""
        asked = controller_pb2.ReassignablePartition(
            partition=partition, replicas=metadata_pb2.BrokerIdList(ids=target)
        )
        request = controller_pb2.AlterPartitionReassignmentsRequest(
            topics=[controller_pb2.ReassignableTopic(name=topic, partitions=[asked])]
        )
        return self._plan(reassign_ops.alter(self.image, request))

    # consumer groups (from their coordinators) and offsets ----------------------------------

    def record_rebalance(
        self, request: controller_pb2.RecordGroupRebalanceRequest
    ) -> controller_pb2.RecordGroupRebalanceResponse:
        plan = group_ops.record_rebalance(self.image, request, self._clock())
        if plan.records:
            rebalance = request.rebalance
            self._trace(
                f"controller: group {rebalance.group} generation {rebalance.generation_id} recorded "
                f"from b{request.broker_id} ({len(rebalance.members)} members)"
            )
        return self._plan(plan)

    def commit_group_offsets(
        self, request: controller_pb2.CommitGroupOffsetsRequest
    ) -> controller_pb2.CommitGroupOffsetsResponse:
        plan = group_ops.commit_batch(self.image, request, self._clock())
        self._commits_written(self.image, request, plan.response)
        return self._plan(plan)

    # transactions (from their coordinators) ---------------------------------------------

    def write_transaction(
        self, request: controller_pb2.WriteTransactionRequest
    ) -> controller_pb2.WriteTransactionResponse:
        return self._plan(txn_ops.write(self.image, request, self._clock()))

    def allocate_producer_ids(
        self, request: controller_pb2.AllocateProducerIdsRequest
    ) -> controller_pb2.AllocateProducerIdsResponse:
        return self._plan(broker_ops.allocate_producer_ids(self.image, request))

    def fetch_offsets(self, request: controller_pb2.OffsetFetchRequest) -> controller_pb2.OffsetFetchResponse:
        return offset_ops.fetch(self.image, request)

    # sessions ---------------------------------------------------------------------------

    def fail_over(self) -> None:
        """A new active controller takes over the committed image: it knows none of its
        predecessor's heartbeats, so every broker gets a full session from now, as
        ``QuorumController._claim`` does. (An uncommitted write of the old one is a
        request or answer the network lost.)"""
        self.sessions.reset(self.image.brokers, self._clock())
        self.active = True
        self._trace("controller: a new controller is active")

    def shut_down(self, broker_id: int) -> None:
        """A broker's controlled shutdown, as its last heartbeats ask: fenced at once, out of
        every ISR (and into the ELRs below min.insync.replicas)."""
        if self.active:
            self.sessions.end(broker_id, self._clock())
            self._fence(broker_id)

    def fail(self) -> None:
        """The active controller is gone; until ``fail_over``, no one fences anyone."""
        self.active = False

    def tick(self) -> None:
        if not self.active:
            return
        for broker_id in self.sessions.expired(self._clock()):
            self._fence(broker_id)
            self.sessions.forget(broker_id)

    def _fence(self, broker_id: int) -> None:
        """Fence the registration of ``broker_id`` in steps, each planned on the last one's image."""
        while True:
            broker = self.image.brokers.get(broker_id)
            if broker is None or broker.fenced:
                return
            self.commit(broker_ops.fence(self.image, broker, RECORDS_MAX))
