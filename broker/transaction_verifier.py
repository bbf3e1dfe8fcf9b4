"""KIP-890's server-side defence, the partition's half: before a leader lets a producer's
transactional batch start a transaction in a partition, it asks the transaction
coordinator whether that partition is in the producer's ongoing transaction.

Without it a late batch from an already-ended transaction (a retry stuck on the network)
would open a new transaction here that no coordinator knows of: the last stable offset
would stop at it until the producer id expired, and its records would never be decided.

THE SEAM: ``ReplicaManager(verifier=...)`` takes any ``TransactionVerifier``. The replica
manager calls ``verify`` for a transactional batch (``ProduceRequest.transactional_id``
names its producer's transactional id) when its producer has no open transaction at that
epoch in the partition; ``E.NONE`` lets the batch be written, any other code is the
partition's answer (Kafka answers ``INVALID_TXN_STATE`` when the partition is not in the
transaction, ``INVALID_PRODUCER_EPOCH``/``PRODUCER_FENCED`` for a fenced epoch,
``COORDINATOR_NOT_AVAILABLE``/``NOT_COORDINATOR``/``CONCURRENT_TRANSACTIONS`` to retry).
The coordinator's implementation asks it with AddPartitionsToTxn, verify-only (Kafka's
``AddPartitionsToTxnManager``). ``AcceptAll`` is the default until one is plugged in.
As Kafka, ``COORDINATOR_NOT_AVAILABLE``, ``NOT_COORDINATOR`` and
``CONCURRENT_TRANSACTIONS`` (and a ``verify`` that raises: it should not) are answered
``NOT_ENOUGH_REPLICAS``, which every producer retries without a metadata refresh.

A marker written for the producer while its verification is in flight voids it (the
replica manager's guard, Kafka's ``VerificationGuard``): the batch is then refused with
``INVALID_TXN_STATE`` rather than open a transaction the coordinator has just ended.
"""

from __future__ import annotations

from typing import Protocol

from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode


class TransactionVerifier(Protocol):
    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, partition: int
    ) -> int:
        """``E.NONE`` if the partition is in this producer's ongoing transaction, else the
        error the produce is answered with for that partition."""
        ...


class AcceptAll:
    """Every partition is taken as in the transaction (no coordinator to ask)."""

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str, partition: int
    ) -> int:
        return E.NONE
