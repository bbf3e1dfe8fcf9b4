"""A transaction coordinator's failover, in memory: two brokers' coordinators against one
controller. The coordinator of a transactional id prepares a commit and cannot write its
markers; once it is fenced, the other broker coordinates the id, reads the prepared state
from its image, writes the markers (under a higher coordinator epoch) and records the
commit; the old coordinator can write nothing more."""

from __future__ import annotations

import asyncio

from raftka.broker.producer_ids import ProducerIdManager
from raftka.broker.transactions.coordinator import TransactionCoordinator
from raftka.broker.transactions.markers import MarkerWriter
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.group_placement import coordinator_for
from raftka.metadata.image import MetadataImage
from raftka.metadata.transactions import State
from raftka.v1 import broker_pb2, controller_pb2
from tests.unit import metadata_support as m
from tests.unit.broker_in_process import MarkerLeaders
from tests.unit.controller_in_memory import ControllerInMemory

E = controller_pb2.ErrorCode
Pb = broker_pb2
TOPIC = "orders"
OLD, NEW = 102, 101
TID = next(t for t in (f"tx-{i}" for i in range(100)) if coordinator_for(t, [OLD, NEW]) == OLD)


def replayed(image: MetadataImage, *records: m.Record) -> MetadataImage:
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta.apply(image.offset + len(records))


def coordinator(
    controller: ControllerInMemory, broker_id: int, leaders: MarkerLeaders
) -> TransactionCoordinator:
    made = TransactionCoordinator(
        broker_id,
        lambda: 1,
        controller,  # type: ignore[arg-type]
        ProducerIdManager(controller, broker_id, lambda: 1),  # type: ignore[arg-type]
        MarkerWriter(leaders, lambda: controller.image, broker_id, lambda: 1),
        wall_clock_ms=lambda: controller.wall_clock_ms,
    )
    made.update(controller.image)
    controller.listeners.append(made.update)
    return made


async def until(condition, what: str) -> None:  # noqa: ANN001
    for _ in range(1_000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def test_a_new_coordinator_completes_the_commit_its_fenced_predecessor_prepared() -> None:
    async def main() -> None:
        tid = m.topic_id(1)
        controller = ControllerInMemory(MetadataImage())
        controller.set_image(
            replayed(
                controller.image,
                m.register(NEW, 1, fenced=False),
                m.register(OLD, 1, fenced=False),
                m.topic(TOPIC, tid),
                *(m.partition(tid, p, [NEW, OLD], leader=NEW) for p in range(2)),
            )
        )
        stuck, working = MarkerLeaders(), MarkerLeaders()
        stuck.answer = E.NOT_LEADER_OR_FOLLOWER  # the old coordinator's markers never land
        old, new = coordinator(controller, OLD, stuck), coordinator(controller, NEW, working)
        running = [asyncio.create_task(c.run()) for c in (old, new)]
        try:
            started = await old.init_producer_id(
                Pb.InitProducerIdRequest(
                    transactional_id=TID, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
                )
            )
            pid = started.producer_id
            added = await old.add_partitions(
                Pb.AddPartitionsToTxnRequest(
                    transactional_id=TID,
                    producer_id=pid,
                    producer_epoch=0,
                    topics=[Pb.TxnTopic(name=TOPIC, partitions=[0, 1])],
                )
            )
            assert {p.error for t in added.topics for p in t.partitions} == {E.NONE}
            ended = await old.end_txn(
                Pb.EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=0, committed=True)
            )
            assert ended.status.error == E.NONE
            await until(lambda: len(stuck.requests) >= 2, "the old coordinator tried its markers")
            prepared = controller.image.transactions[TID]
            assert (prepared.state, prepared.coordinator, prepared.coordinator_epoch) == (
                State.TXN_PREPARE_COMMIT,
                OLD,
                0,
            )
            assert not working.requests

            controller.set_image(
                replayed(controller.image, m.fence(OLD, 1))
            )  # the old coordinator's broker fenced
            await until(
                lambda: controller.image.transactions[TID].state == State.TXN_COMPLETE_COMMIT, "completed"
            )
            completed = controller.image.transactions[TID]
            assert (completed.coordinator, completed.coordinator_epoch) == (NEW, 1)
            markers = [marker for _, r in working.requests for marker in r.markers]
            assert {(t.name, p) for mk in markers for t in mk.topics for p in t.partitions} == {
                (TOPIC, 0),
                (TOPIC, 1),
            }
            assert {(mk.committed, mk.producer_epoch, mk.coordinator_epoch) for mk in markers} == {
                (True, 0, 1)
            }
            assert all(r.broker_id == NEW for _, r in working.requests)

            tried = len(stuck.requests)
            await until(lambda: TID not in old._completing, "the old coordinator gave up")
            assert len(stuck.requests) <= tried + 1
            zombie = await old.end_txn(
                Pb.EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=0, committed=False)
            )
            assert zombie.status.error == E.NOT_COORDINATOR
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            await old.close()
            await new.close()

    asyncio.run(main())
