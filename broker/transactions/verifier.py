"""KIP-890's defence, the coordinator's half: the ``TransactionVerifier`` a partition
leader asks (``raftka.broker.transaction_verifier``) before a transactional batch opens a
transaction in a partition. It asks the transaction's coordinator, as Kafka's
AddPartitionsToTxnManager does, with AddPartitionsToTxn verify-only: this broker's own
coordinator directly, another broker's over its data listener.

A partition not in the producer's ongoing transaction is INVALID_TXN_STATE and a fenced
epoch INVALID_PRODUCER_EPOCH (the coordinator says PRODUCER_FENCED; Kafka's
AddPartitionsToTxnManager answers a Produce so, which clients abort on before the
coordinator tells them they are fenced), so nothing is appended. While no coordinator can answer (none
reachable, the id moving, a transaction completing) the batch is answered
NOT_ENOUGH_REPLICAS, as Kafka's ReplicaManager answers it: every producer retries that
on Produce, while it would give up on coordinator errors it does not expect there.
"""

from __future__ import annotations

from collections.abc import Callable

from raftka.broker.transactions.coordinator import TransactionCoordinator
from raftka.broker.transactions.peers import PeerBrokers
from raftka.metadata import transactions
from raftka.metadata.image import MetadataImage
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import WireError

E = controller_pb2.ErrorCode
VERIFY_TIMEOUT_S = 5.0
_RETRIABLE = frozenset(
    {E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.CONCURRENT_TRANSACTIONS, E.REQUEST_TIMED_OUT}
)


class CoordinatorVerifier:
    def __init__(
        self, coordinator: TransactionCoordinator, image: Callable[[], MetadataImage], peers: PeerBrokers
    ) -> None:
        self._coordinator = coordinator
        self._image = image
        self._peers = peers

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, partition: int
    ) -> int:
        request = broker_pb2.AddPartitionsToTxnRequest(
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            topics=[broker_pb2.TxnTopic(name=topic, partitions=[partition])],
            verify_only=True,
        )
        owner = transactions.transaction_coordinator(self._image(), transactional_id)
        client = None if owner is None or owner == self._coordinator.broker_id else self._peers.client(owner)
        if owner == self._coordinator.broker_id:
            answer = await self._coordinator.add_partitions(request)
        elif client is None:
            return E.NOT_ENOUGH_REPLICAS
        else:
            try:
                answer = await client.AddPartitionsToTxn(request, timeout=VERIFY_TIMEOUT_S)
            except WireError:
                return E.NOT_ENOUGH_REPLICAS
        code = answer.status.error or next(
            (p.error for t in answer.topics for p in t.partitions), E.UNKNOWN_SERVER_ERROR
        )
        if code == E.PRODUCER_FENCED:
            return E.INVALID_PRODUCER_EPOCH
        return E.NOT_ENOUGH_REPLICAS if code in _RETRIABLE else code
