"""A broker's listeners in Prometheus: connections open and those the guard closed, by
reason (``raftka.wire.guard``), read at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from raftka.wire.guard import REASONS, ConnectionGuard

CONNECTIONS = "raftka_listener_connections"
CLOSED = "raftka_listener_connections_closed"


class ListenerCollector:
    def __init__(self, guards: Callable[[], Iterable[ConnectionGuard]]) -> None:
        self._guards = guards

    def collect(self) -> Iterator[Metric]:
        guards = list(self._guards())
        connections = GaugeMetricFamily(CONNECTIONS, "Connections open on a listener.", labels=["listener"])
        closed = CounterMetricFamily(
            CLOSED, "Connections a listener closed for a bound, by reason.", labels=["listener", "reason"]
        )
        for guard in guards:
            connections.add_metric([guard.name], len(guard.connections))
            for reason in REASONS:
                closed.add_metric([guard.name, reason], guard.closed[reason])
        yield connections
        yield closed
