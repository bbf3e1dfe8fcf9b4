"""Client quota metrics (docs/metrics.md), after Kafka's ``kafka.server:type=Produce|Fetch|
Request,user=...,client-id=...`` sensors: per budget (the user and client id a quota is
counted for, ``""`` where shared) what was counted and how long it was throttled, as
counters (``rate()`` of the bytes is Kafka's ``byte-rate``, of the request time divided by
10 its ``request-time`` percentage), and every throttle's length per quota type.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from raftka.broker.quota.manager import ClientQuotas
from raftka.raft.metrics import histogram_family

QUOTA = "kafka_server_quota_"


class QuotaCollector(Collector):
    def __init__(self, quotas: ClientQuotas) -> None:
        self._quotas = quotas

    def collect(self) -> Iterator[Metric]:
        labels = ["quota_type", "user", "client_id"]
        bytes_counted = CounterMetricFamily(
            QUOTA + "bytes",
            "Record batch bytes counted against byte-rate quotas, per budget (user, client id).",
            labels=labels,
        )
        request_time = CounterMetricFamily(
            QUOTA + "request_time_ms",
            "Event-loop ms spent on a budget's requests (request_percentage counts it).",
            labels=labels[1:],
        )
        throttled = CounterMetricFamily(
            QUOTA + "throttle_time_ms", "Ms a budget's clients were throttled for.", labels=labels
        )
        quotas = self._quotas
        for manager in (quotas.produce, quotas.fetch):
            for (user, client_id), budget in manager.budgets():
                bytes_counted.add_metric([manager.quota_type, user, client_id], budget.recorded)
        for (user, client_id), budget in quotas.request.budgets():
            request_time.add_metric([user, client_id], budget.recorded)
        for manager in quotas.managers():
            for (user, client_id), budget in manager.budgets():
                throttled.add_metric([manager.quota_type, user, client_id], budget.throttle_ms)
        yield bytes_counted
        yield request_time
        yield throttled
        yield histogram_family(
            QUOTA + "answer_throttle_time_ms",
            "Ms each throttled answer throttled its client for, per quota type.",
            [((m.quota_type,), m.throttle_time) for m in quotas.managers()],
            labels=("quota_type",),
        )
