"""Transactions as an operator sees them (kafka-transactions): every broker's list of the
transactional ids it coordinates, and one id described by its coordinator."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from raftka.client.cluster_metadata import ClusterMetadata
from raftka.client.errors import KafkaError
from raftka.client.group import find_coordinator
from raftka.security.sasl import SaslCredentials
from raftka.security.tls import TlsFiles
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.client import WireError

E = controller_pb2.ErrorCode
BACKOFF_S = 0.1
TRANSACTIONAL_ID_KEY = 1


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str  # Kafka's: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    coordinator: int
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1: no transaction ongoing
    partitions: tuple[tuple[str, int], ...]


class TransactionAdmin:
    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        request_timeout_s: float = 10.0,
        tls: TlsFiles | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        self.metadata = ClusterMetadata(
            bootstrap_servers, request_timeout_s=request_timeout_s, tls=tls, sasl=sasl
        )
        self._timeout_s = request_timeout_s

    async def close(self) -> None:
        await self.metadata.close()

    async def list_transactions(
        self, states: Sequence[str] = (), producer_ids: Sequence[int] = (), duration_ms: int = -1
    ) -> list[TransactionListing]:
        """Every broker's transactional ids, filtered as Kafka's ListTransactions."""
        await self.metadata.refresh(force=True)
        request = broker_pb2.ListTransactionsRequest(
            states=list(states), producer_ids=list(producer_ids), duration_filter_ms=duration_ms
        )
        brokers = sorted(self.metadata.brokers.items())
        answers = await asyncio.gather(
            *(
                self.metadata.broker_at(address).ListTransactions(request, timeout=self._timeout_s)
                for _, address in brokers
            ),
            return_exceptions=True,
        )
        listed: list[TransactionListing] = []
        for (broker_id, _), answer in zip(brokers, answers, strict=True):
            if isinstance(answer, WireError | asyncio.TimeoutError):
                continue  # a broker down coordinates nothing now: its ids moved
            if isinstance(answer, BaseException):
                raise answer
            if answer.unknown_state_filters:
                raise KafkaError(
                    "INVALID_REQUEST", f"unknown states: {', '.join(answer.unknown_state_filters)}"
                )
            listed += [
                TransactionListing(t.transactional_id, broker_id, t.producer_id, t.state)
                for t in answer.transactions
            ]
        return sorted(listed, key=lambda t: t.transactional_id)

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        coordinator = await find_coordinator(
            self.metadata,
            transactional_id,
            self._timeout_s,
            BACKOFF_S,
            give_up_after_s=self._timeout_s,
            key_type=TRANSACTIONAL_ID_KEY,
        )
        answer = await coordinator.DescribeTransactions(
            broker_pb2.DescribeTransactionsRequest(transactional_ids=[transactional_id]),
            timeout=self._timeout_s,
        )
        if answer.status.error != E.NONE:
            raise KafkaError(E.Name(answer.status.error), answer.status.message)
        (d,) = answer.transactions
        if d.error != E.NONE:
            raise KafkaError(E.Name(d.error), d.message)
        return TransactionDescription(
            d.transactional_id,
            d.coordinator,
            d.producer_id,
            d.producer_epoch,
            d.state,
            d.timeout_ms,
            d.start_time_ms,
            tuple((t.name, p) for t in d.topics for p in t.partitions),
        )
