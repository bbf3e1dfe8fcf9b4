"""The quorum's Prometheus metrics, named after KRaft's ``kafka.server:type=raft-metrics``
and ``kafka.server:type=SnapshotEmitter`` (docs/metrics.md lists them all).

State (leader, epoch, high watermark, log end) is read from the core when scraped, so
nothing is kept twice. What only the moment of work knows (how long a commit took, how
many records were written) is accumulated here by the driver, in plain attributes
touched once per batch or per role change, on the loop thread: no locks, nothing per
record. Scrapes run on the loop thread too (``raftka.node.metrics_endpoint``), so they read a
consistent state. Latencies use ``time.perf_counter``: they are observed, never acted on,
so the driver's injected clock stays the only time the protocol sees; elections are the
exception, timed by the core in that clock, because one may start and end between two
looks of the driver (a single voter elects itself within one poll).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from raftka.raft.batch import Batch
from raftka.raft.roles import Role

if TYPE_CHECKING:
    from raftka.raft.driver import RaftNode

# Upper bounds in milliseconds: a local fsync (0.5 ms) up to a long-poll or a stuck quorum.
LATENCY_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000)
RAFT = "kafka_server_raft_metrics_"
SNAPSHOT = "kafka_server_snapshotemitter_"
STATES = (*(role.value for role in Role), "observer")  # a broker is an observer, whatever its role


def now_s() -> float:
    return time.perf_counter()


class Histogram:
    """A latency histogram in milliseconds, without prometheus_client's per-value lock."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS_MS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last: above every bound (+Inf)
        self.total = 0.0

    def observe(self, value_ms: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value_ms)] += 1
        self.total += value_ms

    def observe_since(self, started_s: float) -> None:
        self.observe((now_s() - started_s) * 1000)

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative (upper bound, count) pairs, as the exposition format wants them."""
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
        return out


def histogram_family(
    name: str, doc: str, histograms: Iterable[tuple[Sequence[str], Histogram]], labels: Sequence[str] = ()
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=list(labels))
    for values, histogram in histograms:
        family.add_metric(list(values), histogram.buckets(), histogram.total)
    return family


def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


class RaftMetrics:
    """What the driver accumulates (see the module doc)."""

    def __init__(self) -> None:
        self.commit_latency = Histogram()
        self.election_latency = Histogram()
        self.append_records = 0
        self.fetch_records = 0
        self.snapshot_generated_s = now_s()  # Kafka: the process start until the first snapshot
        self.snapshot_generated_bytes = 0
        self._elections_seen = 0

    def written(self, batches: Sequence[Batch], *, leader: bool) -> None:
        """A write to the log: a leader's own batches, or a follower's fetched ones."""
        records = sum(len(batch.records) for batch in batches)
        if leader:
            self.append_records += records
        else:
            self.fetch_records += records

    def elections_seen(self, ended: int, last_ms: int) -> None:
        """The core times elections (``RaftCore.last_election_ms``, in its own clock); the
        driver looks after each change of role, which may hide a quick election within it."""
        if ended > self._elections_seen:
            self._elections_seen = ended
            self.election_latency.observe(last_ms)

    def snapshot_generated(self, size_bytes: int) -> None:
        self.snapshot_generated_s = now_s()
        self.snapshot_generated_bytes = size_bytes


class RaftCollector(Collector):
    """One node's quorum metrics, read at scrape time."""

    def __init__(self, node: RaftNode) -> None:
        self._node = node

    def collect(self) -> Iterator[Metric]:
        core, metrics = self._node.core, self._node.metrics
        yield gauge(
            RAFT + "current_leader", "The current quorum leader's id; -1 when unknown.", core.leader_id
        )
        yield gauge(RAFT + "current_epoch", "The current quorum epoch.", core.epoch)
        state = GaugeMetricFamily(RAFT + "current_state", "1 for this node's quorum role.", labels=["state"])
        for name in STATES:
            state.add_metric([name], 1 if core.role_name == name else 0)
        yield state
        yield gauge(
            RAFT + "high_watermark",
            "The offset below which this node knows the log is committed.",
            core.high_watermark,
        )
        yield gauge(
            RAFT + "log_end_offset", "The offset after this node's last log record.", core.log_end_offset
        )
        yield histogram_family(
            RAFT + "commit_latency_ms",
            "Milliseconds from appending a batch on the leader to its commit.",
            [((), metrics.commit_latency)],
        )
        yield histogram_family(
            RAFT + "election_latency_ms",
            "Milliseconds from the first campaign of an election until a leader is known.",
            [((), metrics.election_latency)],
        )
        yield counter(
            RAFT + "append_records", "Records appended to the log while leading.", metrics.append_records
        )
        yield counter(
            RAFT + "fetch_records", "Records fetched from the leader and appended.", metrics.fetch_records
        )
        yield gauge(
            SNAPSHOT + "latestsnapshotgeneratedagems",
            "Milliseconds since this node last generated a snapshot (since start if never).",
            (now_s() - metrics.snapshot_generated_s) * 1000,
        )
        yield gauge(
            SNAPSHOT + "latestsnapshotgeneratedbytes",
            "Bytes of the snapshot this node last generated; 0 if none yet.",
            metrics.snapshot_generated_bytes,
        )
