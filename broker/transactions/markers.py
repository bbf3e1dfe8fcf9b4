"""Commit and abort markers, written by a transaction's coordinator to every partition of
the transaction through each partition leader's WriteTxnMarkers (Kafka's
TransactionMarkerChannelManager).

The markers of a prepared transaction are written until every partition has one: a
partition whose leader refuses (moved, not enough replicas, unreachable) is tried again
on the leader the newest image names, after a backoff; a partition whose topic is gone
needs none. Writing stops, unfinished, when this broker no longer coordinates the
transaction (its successor reads the prepared state from the image and writes them
again; a partition takes a repeated marker as Kafka's do) or when a
partition says a newer coordinator epoch or producer epoch wrote there: this
coordinator is a zombie.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from raftka.broker.transactions.peers import PeerBrokers
from raftka.metadata import transactions
from raftka.metadata.image import NO_LEADER, MetadataImage
from raftka.metadata.transactions import State, TransactionRecord
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import WireError

E = controller_pb2.ErrorCode
log = structlog.get_logger("raftka.broker.transactions")
LeaderCall = Callable[[int, broker_pb2.WriteTxnMarkersRequest], Awaitable[broker_pb2.WriteTxnMarkersResponse]]
FENCED = frozenset({E.TRANSACTION_COORDINATOR_FENCED, E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED})
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 2.0
MARKER_REQUEST_TIMEOUT_S = 30.0  # the leader answers once the ISR has the markers (as acks=all)


class LeaderUnreachable(Exception):
    """No answer from the leader this time: its markers are tried again."""


class MarkerWriter:
    def __init__(
        self,
        call: LeaderCall,
        image: Callable[[], MetadataImage],
        broker_id: int,
        broker_epoch: Callable[[], int],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """``call(broker_id, request)``: that broker's answer, or ``LeaderUnreachable``;
        ``broker_id`` at ``broker_epoch()``: this broker, whom the leaders check;
        ``sleep``: the backoff's (a simulation passes its own)."""
        self._call = call
        self._sleep = sleep
        self._image = image
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch

    async def write(self, prepared: TransactionRecord, still_mine: Callable[[], bool]) -> bool:
        """True once every partition of ``prepared`` has its marker; False if this broker
        should leave it to another coordinator."""
        assert prepared.state in (State.TXN_PREPARE_COMMIT, State.TXN_PREPARE_ABORT), prepared.state
        pending = transactions.partitions(prepared)
        backoff_s = RETRY_BACKOFF_S
        while pending:
            if not still_mine():
                return False
            image = self._image()
            pending = {p for p in pending if transactions.partition_exists(image, p)}
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for topic, partition in sorted(pending):
                leader = image.topic(topic).partitions[partition].leader  # type: ignore[union-attr]
                if leader != NO_LEADER:
                    by_leader.setdefault(leader, []).append((topic, partition))
            answers = await asyncio.gather(
                *(self._send(leader, prepared, parts) for leader, parts in by_leader.items())
            )
            for done, fenced in answers:
                if fenced:
                    log.info(
                        "markers refused: a newer coordinator or producer wrote",
                        txn=prepared.transactional_id,
                    )
                    return False
                pending -= done
            if pending:
                await self._sleep(backoff_s)
                backoff_s = min(backoff_s * 2, RETRY_BACKOFF_MAX_S)
        return True

    async def _send(
        self, leader: int, prepared: TransactionRecord, parts: list[tuple[str, int]]
    ) -> tuple[set[tuple[str, int]], bool]:
        """(the partitions that have their marker, whether the leader said we are fenced)."""
        marker = broker_pb2.TxnMarker(
            producer_id=prepared.producer_id,
            producer_epoch=prepared.producer_epoch,
            committed=prepared.state == State.TXN_PREPARE_COMMIT,
            coordinator_epoch=prepared.coordinator_epoch,
        )
        by_topic: dict[str, list[int]] = {}
        for topic, partition in parts:
            by_topic.setdefault(topic, []).append(partition)
        for topic, ids in by_topic.items():
            marker.topics.add(name=topic, partitions=ids)
        try:
            answer = await self._call(
                leader,
                broker_pb2.WriteTxnMarkersRequest(
                    markers=[marker], broker_id=self._broker_id, broker_epoch=self._broker_epoch()
                ),
            )
        except LeaderUnreachable as e:
            log.debug("markers not written", leader=leader, error=str(e))
            return set(), False
        done: set[tuple[str, int]] = set()
        fenced = False
        for result in answer.markers:
            for topic in result.topics:
                for p in topic.partitions:
                    if p.error == E.NONE:
                        done.add((topic.name, p.partition))
                    fenced = fenced or p.error in FENCED
        return done, fenced


class DataListenerLeaders:
    """``LeaderCall`` over the brokers' data listeners."""

    def __init__(self, peers: PeerBrokers) -> None:
        self._peers = peers

    async def __call__(
        self, broker_id: int, request: broker_pb2.WriteTxnMarkersRequest
    ) -> broker_pb2.WriteTxnMarkersResponse:
        client = self._peers.client(broker_id)
        if client is None:
            raise LeaderUnreachable(f"broker {broker_id} has no data listener")
        try:
            return await client.WriteTxnMarkers(request, timeout=MARKER_REQUEST_TIMEOUT_S)
        except WireError as e:
            raise LeaderUnreachable(str(e)) from e
