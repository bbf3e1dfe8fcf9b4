"""What the log cleaner needs to know, as plain values (the topic and broker configs are
read elsewhere and passed in): Kafka's names and defaults."""

from __future__ import annotations

from dataclasses import dataclass

from raftka.broker.log.config import LogConfig


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    """The broker's ``log.cleaner.*`` configs."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 << 20  # bytes of key map for all threads together
    io_max_bytes_per_second: float = float("inf")
    backoff_ms: int = 15_000
    io_buffer_load_factor: float = 0.9  # Kafka's log.cleaner.io.buffer.load.factor


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    """A compacted topic's configs (``cleanup.policy=compact`` and the keys after it)."""

    compact: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 2**63 - 1
    delete_retention_ms: int = 86_400_000
    segment_bytes: int = 1 << 30
    index_interval_bytes: int = 4096


def compaction_of(config: LogConfig) -> CompactionSettings:
    """A log's compaction settings from its config. ``cleanup.policy=compact`` and the keys
    after it are read into ``LogConfig`` by issue 31's topic configs; a config without them
    (``getattr``'s defaults) is a log that is not compacted."""
    defaults = CompactionSettings()
    return CompactionSettings(
        compact=getattr(config, "compact", defaults.compact),
        min_cleanable_dirty_ratio=getattr(
            config, "min_cleanable_dirty_ratio", defaults.min_cleanable_dirty_ratio
        ),
        min_compaction_lag_ms=getattr(config, "min_compaction_lag_ms", defaults.min_compaction_lag_ms),
        max_compaction_lag_ms=getattr(config, "max_compaction_lag_ms", defaults.max_compaction_lag_ms),
        delete_retention_ms=getattr(config, "delete_retention_ms", defaults.delete_retention_ms),
        segment_bytes=config.segment_bytes,
        index_interval_bytes=config.index_interval_bytes,
    )
