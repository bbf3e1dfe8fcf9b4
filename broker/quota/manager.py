"""Client quotas on a broker (Kafka's ``ClientQuotaManager`` and
``ClientRequestQuotaManager``): what a client used, and how long it must wait.

Three quota types, each bounding one key of ``raftka.metadata.quotas`` per budget:

- ``Produce``: bytes of record batches a client sends (``producer_byte_rate``);
- ``Fetch``: bytes of record batches a consumer is sent (``consumer_byte_rate``);
- ``Request``: the broker's event-loop time spent on a client's requests
  (``request_percentage``). Kafka counts the time of its request-handler and network
  threads, 100% being one thread; raftka serves every request on one event loop, so
  100% is that whole loop. What is counted is the time the loop spends running the
  request's own code: decoding it, each step of its handler between two awaits, and
  encoding its answer; not the time it waits (for the ISR, a long poll, the disk
  flusher), nor work other tasks do for it (replication, group rebalances).

A budget is shared by the clients the matched quota entity covers (``QuotaMatch.bucket``,
Kafka's metric tags). Each use is recorded in a ``SampledRate`` of ``quota.window.num``
windows of ``quota.window.size.seconds``; when the rate is above the quota the client is
throttled for ``(rate - quota) / quota * span`` ms, the time after which the rate would
be back at the quota with nothing more recorded (Kafka's formula), at most one window
for request time (as Kafka caps it) and the whole span for bytes.

Budgets are bounded per user and in all, and one no quota bounds never evicts one a
quota bounds (``raftka.broker.quota.budgets``), so clients that invent client ids can
neither grow the broker's memory nor reset another client's throttle.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from raftka.broker.quota.budgets import Budgets
from raftka.broker.quota.rate import SampledRate
from raftka.metadata import quotas
from raftka.metadata.quotas import QuotaEntity
from raftka.raft.metrics import Histogram

PRODUCE, FETCH, REQUEST = "Produce", "Fetch", "Request"  # Kafka's QuotaType names
MS_PER_PERCENT = 10.0  # 1% of the loop is 10 ms of its time per second


@dataclass(frozen=True, slots=True)
class QuotaWindows:
    windows_num: int = 11  # Kafka's quota.window.num
    window_size_s: float = 1.0  # Kafka's quota.window.size.seconds


@dataclass(slots=True)
class Budget:
    """One (user, client id)'s use of one quota type (Kafka's ``ClientSensors``)."""

    rate: SampledRate
    recorded: float = 0.0  # bytes, or ms of loop time, since the budget was made
    throttle_ms: float = 0.0  # ms it was throttled for, in all


class ClientQuotaManager:
    def __init__(
        self,
        quota_type: str,
        key: str,
        windows: QuotaWindows,
        client_quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]],
        *,
        units_per_quota: float = 1.0,
        throttle_max_ms: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``units_per_quota``: what one unit of the quota value allows of what is recorded
        per second; ``throttle_max_ms``: the longest throttle (default: the whole span)."""
        self.quota_type = quota_type
        self.key = key
        self.windows = windows
        self._client_quotas = client_quotas
        self._units_per_quota = units_per_quota
        window_ms = windows.window_size_s * 1000
        self._throttle_max_ms = (
            throttle_max_ms if throttle_max_ms is not None else window_ms * windows.windows_num
        )
        self._clock = clock
        self.throttle_time = Histogram()  # ms of each throttle, every client's
        self._budgets: Budgets[Budget] = Budgets()

    def record(self, user: str, client_id: str, value: float) -> int:
        """Count ``value`` against the client's quota; the ms it must now wait (0: none)."""
        now_ms = self._clock() * 1000
        match = quotas.resolve(self._client_quotas(), user, client_id, self.key)
        budget = self._budget(match, user, now_ms)
        budget.rate.record(value, now_ms)
        budget.recorded += value
        if match.value == quotas.NO_QUOTA:
            return 0
        bound = match.value * self._units_per_quota
        rate = budget.rate.rate(now_ms)
        if rate <= bound:
            return 0
        throttle_ms = (rate - bound) / bound * budget.rate.span_ms(now_ms)
        return math.ceil(min(throttle_ms, self._throttle_max_ms))

    def most_without_throttle(self, user: str, client_id: str) -> float:
        """The most one use may be without being throttled on an idle budget (Kafka's
        ``getMaxValueInQuotaWindow``): a fetch asks no more bytes than this."""
        match = quotas.resolve(self._client_quotas(), user, client_id, self.key)
        windows = self.windows
        return match.value * self._units_per_quota * (windows.windows_num - 1) * windows.window_size_s

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Take back ``value`` (a throttled fetch whose records were not sent)."""
        now_ms = self._clock() * 1000
        match = quotas.resolve(self._client_quotas(), user, client_id, self.key)
        budget = self._budget(match, user, now_ms)
        budget.rate.record(-value, now_ms)
        budget.recorded -= value

    def throttled(self, user: str, client_id: str, throttle_ms: int) -> None:
        """The client was throttled for ``throttle_ms`` on this quota (its metric)."""
        match = quotas.resolve(self._client_quotas(), user, client_id, self.key)
        budget = self._budget(match, user, self._clock() * 1000)
        budget.throttle_ms += throttle_ms
        self.throttle_time.observe(throttle_ms)

    def budgets(self) -> Iterator[tuple[tuple[str, str], Budget]]:
        yield from self._budgets.items()

    def _budget(self, match: quotas.QuotaMatch, user: str, now_ms: float) -> Budget:
        return self._budgets.get(
            match.bucket,
            user,
            match.value != quotas.NO_QUOTA,
            lambda: Budget(SampledRate(self.windows.windows_num, self.windows.window_size_s * 1000, now_ms)),
        )


class ClientQuotas:
    """The broker's three quota managers, reading the quotas of its latest image."""

    def __init__(
        self,
        client_quotas: Callable[[], Mapping[QuotaEntity, Mapping[str, float]]],
        windows: QuotaWindows = QuotaWindows(),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.produce = ClientQuotaManager(
            PRODUCE, quotas.PRODUCER_BYTE_RATE, windows, client_quotas, clock=clock
        )
        self.fetch = ClientQuotaManager(FETCH, quotas.CONSUMER_BYTE_RATE, windows, client_quotas, clock=clock)
        self.request = ClientQuotaManager(
            REQUEST,
            quotas.REQUEST_PERCENTAGE,
            windows,
            client_quotas,
            units_per_quota=MS_PER_PERCENT,
            throttle_max_ms=windows.window_size_s * 1000,
            clock=clock,
        )

    def managers(self) -> tuple[ClientQuotaManager, ...]:
        return self.produce, self.fetch, self.request
