"""Latency percentiles as every ``perf`` command reports them (a leaf module: the perf
kinds import it, and it imports none of them)."""

from __future__ import annotations

from collections.abc import Sequence

LATENCY_SAMPLES_MAX = 100_000  # latency of every k-th record, as kafka-producer-perf-test samples


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest rank, exactly as the etcd anchor computes it, so the numbers compare."""
    k = min(len(sorted_values) - 1, int(round(p / 100.0 * (len(sorted_values) - 1))))
    return sorted_values[k]


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, float]:
    """Average, p50, p99, p99.9 and max in ms, rounded to 0.01 ms; zeros for no samples."""
    ordered = sorted(latencies_ms)
    if not ordered:
        return {"avg_ms": 0.0, "p50_ms": 0.0, "p99_ms": 0.0, "p999_ms": 0.0, "max_ms": 0.0}
    return {
        "avg_ms": round(sum(ordered) / len(ordered), 2),
        "p50_ms": round(percentile(ordered, 50), 2),
        "p99_ms": round(percentile(ordered, 99), 2),
        "p999_ms": round(percentile(ordered, 99.9), 2),
        "max_ms": round(ordered[-1], 2),
    }
