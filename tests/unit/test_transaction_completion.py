"""A prepared transaction is completed because the image shows it prepared, not because its
coordinator heard the answer to its write (issue 30, finding 4; Kafka's
TransactionMarkerChannelManager is fed from the loaded state).

- The PREPARE_ABORT write of EndTxn times out (the quorum was unavailable) and commits
  later: the client was told COORDINATOR_NOT_AVAILABLE, yet once the image shows the
  transaction prepared its markers are written and it completes.
- A completion attempt that raises is tried again, and completes.
- A coordinator that never saw the image with its own PREPARE write (cut off from the
  metadata) and then sees another coordinator's restatement of it acts on the image, not
  on what it wrote: it restates the transaction above the other's coordinator epoch, so
  the partitions take its markers (found by the data-plane simulation, seed 152).

One coordinator against an in-memory controller; the coordinator's timer and backoffs
sleep no wall-clock time (``_no_wait``), so each test runs the event loop until its
condition holds or a bound on loop turns passes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from raftka.broker.controller_link import LinkError
from raftka.broker.producer_ids import ProducerIdManager
from raftka.broker.transactions import coordinator as coordinator_module
from raftka.broker.transactions.coordinator import TransactionCoordinator
from raftka.broker.transactions.markers import MarkerWriter
from raftka.metadata import txn_ops
from raftka.metadata.image import MetadataImage
from raftka.metadata.plan import Plan
from raftka.metadata.transactions import State
from raftka.v1 import broker_pb2, controller_pb2
from tests.unit import metadata_support as m
from tests.unit.broker_in_process import MarkerLeaders
from tests.unit.controller_in_memory import ControllerInMemory

E = controller_pb2.ErrorCode
Pb = broker_pb2
BROKER = 101
TOPIC = "orders"
TID = "tx-1"
TURNS_MAX = 10_000


async def _no_wait(_: float) -> None:
    await asyncio.sleep(0)


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(TURNS_MAX):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never: {what}")


class LateCommits(ControllerInMemory):
    """The controller, except that a PREPARE_* write while ``lose_prepares`` is on gets
    no answer (the link gives up) and commits only when the test says (``commit_late``)."""

    def __init__(self, image: MetadataImage) -> None:
        super().__init__(image)
        self.lose_prepares = False
        self.held: list[Plan] = []

    async def WriteTransaction(self, request: Any, timeout: float) -> Any:
        if self.lose_prepares and request.transaction.state in (
            State.TXN_PREPARE_COMMIT,
            State.TXN_PREPARE_ABORT,
        ):
            self.held.append(txn_ops.write(self.image, request, self.wall_clock_ms))
            raise LinkError("no answer from the controller")
        return await super().WriteTransaction(request, timeout)

    def commit_late(self) -> None:
        for plan in self.held:
            self._commit(plan)
        self.held.clear()


class RaisesOnce(MarkerLeaders):
    """The partition leaders, whose first call raises (a bug, a broken connection)."""

    def __init__(self) -> None:
        super().__init__()
        self.raised = False

    async def __call__(
        self, broker_id: int, request: broker_pb2.WriteTxnMarkersRequest
    ) -> broker_pb2.WriteTxnMarkersResponse:
        if not self.raised:
            self.raised = True
            raise RuntimeError("the first marker request breaks")
        return await super().__call__(broker_id, request)


class FencingLeaders(MarkerLeaders):
    """Partition leaders that refuse markers of a coordinator epoch below the newest they
    took (TRANSACTION_COORDINATOR_FENCED), as a partition does; or every marker, while
    ``unreachable``."""

    def __init__(self) -> None:
        super().__init__()
        self.newest = 0
        self.unreachable = True

    async def __call__(
        self, broker_id: int, request: broker_pb2.WriteTxnMarkersRequest
    ) -> broker_pb2.WriteTxnMarkersResponse:
        epoch = min(marker.coordinator_epoch for marker in request.markers)
        if self.unreachable:
            self.answer = E.NOT_LEADER_OR_FOLLOWER
        elif epoch < self.newest:
            self.answer = E.TRANSACTION_COORDINATOR_FENCED
        else:
            self.newest, self.answer = epoch, E.NONE
        return await super().__call__(broker_id, request)


def cluster(controller: ControllerInMemory) -> None:
    tid = m.topic_id(1)
    controller.set_image(
        m.replay(
            controller.image,
            m.register(BROKER, 1, fenced=False),
            m.topic(TOPIC, tid),
            *(m.partition(tid, p, [BROKER], leader=BROKER) for p in range(2)),
        )
    )


def coordinator(controller: ControllerInMemory, leaders: MarkerLeaders) -> TransactionCoordinator:
    made = TransactionCoordinator(
        BROKER,
        lambda: 1,
        controller,  # type: ignore[arg-type]
        ProducerIdManager(controller, BROKER, lambda: 1),  # type: ignore[arg-type]
        MarkerWriter(leaders, lambda: controller.image, BROKER, lambda: 1, sleep=_no_wait),
        wall_clock_ms=lambda: controller.wall_clock_ms,
        sleep=_no_wait,
    )
    made.update(controller.image)
    controller.listeners.append(made.update)
    return made


async def ongoing(txns: TransactionCoordinator) -> int:
    """A transaction of TID ongoing in both partitions; its producer id (epoch 0)."""
    started = await txns.init_producer_id(
        Pb.InitProducerIdRequest(
            transactional_id=TID, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
        )
    )
    assert started.status.error == E.NONE, started.status.message
    added = await txns.add_partitions(
        Pb.AddPartitionsToTxnRequest(
            transactional_id=TID,
            producer_id=started.producer_id,
            producer_epoch=0,
            topics=[Pb.TxnTopic(name=TOPIC, partitions=[0, 1])],
        )
    )
    assert {p.error for t in added.topics for p in t.partitions} == {E.NONE}
    return started.producer_id


def markers_written(leaders: MarkerLeaders) -> set[tuple[bool, str, int]]:
    return {
        (marker.committed, t.name, p)
        for _, request in leaders.requests
        for marker in request.markers
        for t in marker.topics
        for p in t.partitions
    }


def run(scenario: Callable[[], Any]) -> None:
    asyncio.run(scenario())


@pytest.fixture(autouse=True)
def _writes_give_up_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The link's LinkError ends the write at once (no wall-clock retries for 5 s)."""
    monkeypatch.setattr(coordinator_module, "CONTROLLER_WRITE_TIMEOUT_S", 0.0)


def test_a_prepare_whose_answer_was_lost_is_completed_once_the_image_shows_it() -> None:
    async def scenario() -> None:
        controller, leaders = LateCommits(MetadataImage()), MarkerLeaders()
        cluster(controller)
        txns = coordinator(controller, leaders)
        running = asyncio.create_task(txns.run())
        try:
            pid = await ongoing(txns)
            controller.lose_prepares = True
            ended = await txns.end_txn(
                Pb.EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=0, committed=False)
            )
            assert ended.status.error == E.COORDINATOR_NOT_AVAILABLE
            assert controller.image.transactions[TID].state == State.TXN_ONGOING
            assert not leaders.requests

            controller.commit_late()  # the old leader comes back with the write
            assert controller.image.transactions[TID].state == State.TXN_PREPARE_ABORT
            await until(
                lambda: controller.image.transactions[TID].state == State.TXN_COMPLETE_ABORT, "completed"
            )
            assert markers_written(leaders) == {(False, TOPIC, 0), (False, TOPIC, 1)}
            await until(lambda: not txns._completing, "the completion task ended")

            retried = await txns.end_txn(  # the client's retry is answered as the first would have been
                Pb.EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=0, committed=False)
            )
            assert retried.status.error == E.NONE
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await txns.close()

    run(scenario)


def test_a_completion_that_raises_is_tried_again() -> None:
    async def scenario() -> None:
        controller, leaders = ControllerInMemory(MetadataImage()), RaisesOnce()
        cluster(controller)
        txns = coordinator(controller, leaders)
        running = asyncio.create_task(txns.run())
        try:
            pid = await ongoing(txns)
            ended = await txns.end_txn(
                Pb.EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=0, committed=True)
            )
            assert ended.status.error == E.NONE
            await until(
                lambda: controller.image.transactions[TID].state == State.TXN_COMPLETE_COMMIT, "completed"
            )
            assert leaders.raised
            assert markers_written(leaders) == {(True, TOPIC, 0), (True, TOPIC, 1)}
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await txns.close()

    run(scenario)


def test_reconcile_keeps_one_completion_task_per_prepared_transaction() -> None:
    async def scenario() -> None:
        controller, leaders = ControllerInMemory(MetadataImage()), MarkerLeaders()
        leaders.answer = E.NOT_LEADER_OR_FOLLOWER  # the markers do not land: the task keeps going
        cluster(controller)
        txns = coordinator(controller, leaders)
        running = asyncio.create_task(txns.run())
        try:
            pid = await ongoing(txns)
            await txns.end_txn(
                Pb.EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=0, committed=True)
            )
            task = txns._completing[TID]
            for _ in range(3):
                txns.reconcile()
            assert txns._completing == {TID: task}
            leaders.answer = E.NONE
            await until(
                lambda: controller.image.transactions[TID].state == State.TXN_COMPLETE_COMMIT, "completed"
            )
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await txns.close()

    run(scenario)


def test_a_coordinator_acts_on_a_newer_writers_record_not_on_its_own_older_write() -> None:
    async def scenario() -> None:
        controller, leaders = ControllerInMemory(MetadataImage()), FencingLeaders()
        cluster(controller)
        txns = coordinator(controller, leaders)
        running = asyncio.create_task(txns.run())
        try:
            pid = await ongoing(txns)
            controller.listeners.remove(txns.update)  # cut off from the metadata from now on
            ended = await txns.end_txn(
                Pb.EndTxnRequest(transactional_id=TID, producer_id=pid, producer_epoch=0, committed=True)
            )
            assert ended.status.error == E.NONE
            ours = controller.image.transactions[TID]
            assert (ours.state, ours.coordinator, ours.coordinator_epoch) == (
                State.TXN_PREPARE_COMMIT,
                BROKER,
                0,
            )

            # meanwhile another coordinator took the id over, restated it and wrote markers
            theirs = m.Record(transaction=ours)
            theirs.transaction.coordinator, theirs.transaction.coordinator_epoch = BROKER + 1, 1
            controller.set_image(m.replay(controller.image, theirs))
            leaders.unreachable, leaders.newest = False, 1

            controller.listeners.append(txns.update)  # the id is this broker's again
            txns.update(controller.image)
            await until(
                lambda: controller.image.transactions[TID].state == State.TXN_COMPLETE_COMMIT, "completed"
            )
            completed = controller.image.transactions[TID]
            assert (completed.coordinator, completed.coordinator_epoch) == (BROKER, 2)
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await txns.close()

    run(scenario)
