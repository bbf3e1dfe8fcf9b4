"""Producer ids for InitProducerId: blocks from the quorum, handed out one at a time
(Kafka's RPCProducerIdManager).

Any broker answers an idempotent producer's InitProducerId (no coordinator is needed
without transactions). It takes ids from a block the active controller allocated to it:
``AllocateProducerIds`` writes a ``ProducerIdsRecord`` and answers once that commits, so
no two brokers, and no restarted broker, ever hold the same block. The next block is
asked for once 90% of the current one is handed out, so a producer rarely waits for the
controller; one request is in flight at a time and at most one block is held in reserve.
With no id left and no block from the controller this time (no controller, or this
broker not registered yet), ``ProducerIdsUnavailable``: the producer is told
``REQUEST_TIMED_OUT`` and asks again. Ids left in a block when the broker stops are
never used.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from raftka.broker.controller_link import LinkError
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
log = structlog.get_logger("raftka.broker.producer_ids")
PREFETCH_AT = 0.9  # of a block handed out, when the next is asked for (Kafka's 90%)


class ControllerCaller(Protocol):
    async def call(self, method: str, request: Any) -> Any: ...


class ProducerIdsUnavailable(Exception):
    """No producer id to give now; asking again later may find one."""


class ProducerIdManager:
    def __init__(self, link: ControllerCaller, broker_id: int, broker_epoch: Callable[[], int]) -> None:
        self._link = link
        self._broker_id = broker_id
        self._broker_epoch = broker_epoch
        self._next = self._end = self._prefetch_at = 0  # the current block, [next, end)
        self._reserve: tuple[int, int] | None = None  # (start, length) of the next block
        self._asking: asyncio.Task[None] | None = None
        self._problem = "no producer id block yet"  # why the last allocation gave none

    async def next_id(self) -> int:
        if self._next >= self._end and self._reserve is None:
            await self._ask()
        if self._next >= self._end:  # other requests may have taken what the wait brought
            if self._reserve is None:
                raise ProducerIdsUnavailable(self._problem)
            self._take_reserve()
        producer_id = self._next
        self._next += 1
        if self._next >= self._prefetch_at and self._reserve is None and self._asking is None:
            self._asking = asyncio.create_task(self._allocate(), name="producer-ids")
        return producer_id

    def _take_reserve(self) -> None:
        assert self._reserve is not None
        start, length = self._reserve
        self._reserve = None
        self._next, self._end = start, start + length
        self._prefetch_at = start + max(1, int(length * PREFETCH_AT))

    async def _ask(self) -> None:
        if self._asking is None:
            self._asking = asyncio.create_task(self._allocate(), name="producer-ids")
        await asyncio.shield(self._asking)

    async def _allocate(self) -> None:
        """One AllocateProducerIds call: its block becomes the reserve, or ``_problem`` says why not."""
        try:
            request = controller_pb2.AllocateProducerIdsRequest(
                broker_id=self._broker_id, broker_epoch=self._broker_epoch()
            )
            try:
                response = await self._link.call(lambda stub: stub.AllocateProducerIds, request)
            except LinkError as e:
                self._problem = f"no active controller answered: {e}"
                return
            if response.status.error != E.NONE:
                why = f"{E.Name(response.status.error)}: {response.status.message}"
                self._problem = f"the controller allocated no producer ids: {why}"
                return
            if response.producer_id_len <= 0 or response.producer_id_start < 0:
                self._problem = f"the controller answered an empty block at {response.producer_id_start}"
                return
            self._reserve = (response.producer_id_start, response.producer_id_len)
            log.debug("producer id block", start=response.producer_id_start, length=response.producer_id_len)
        finally:
            self._asking = None

    async def close(self) -> None:
        if self._asking is not None:
            self._asking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._asking
