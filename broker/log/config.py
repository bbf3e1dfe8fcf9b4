"""A partition log's settings, read from its topic's configs (Kafka's names and defaults).

``LogConfig`` is what a ``PartitionLog`` holds as ``config`` (replaced whole by
``update_config`` when the topic's configs change). The compaction settings, for the log
cleaner, are:

- ``compact`` / ``delete``: ``cleanup.policy`` names ``compact`` / ``delete`` (either or
  both). Retention by ``retention.ms`` and ``retention.bytes`` runs only with ``delete``;
  the cleaner takes only logs with ``compact``.
- ``min_cleanable_dirty_ratio`` (float, 0..1), ``min_compaction_lag_ms``,
  ``max_compaction_lag_ms`` and ``delete_retention_ms``: Kafka's topic configs of those
  names (``min.cleanable.dirty.ratio`` ...), parsed.

The broker-wide cleaner settings (``log.cleaner.*`` in a node's TOML) are
``raftka.node.config.CleanerConfig``, on ``NodeConfig.log_cleaner``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from raftka.metadata.topic_configs import CLEANUP_POLICY, COMPACT, DELETE, TOPIC_CONFIGS, cleanup_policies

NEVER = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 604_800_000
    retention_ms: int = 604_800_000  # -1: forever
    retention_bytes: int = -1  # -1: unlimited
    index_interval_bytes: int = 4096
    flush_messages: int = NEVER  # fsync after this many unflushed records; 1: every batch
    flush_ms: int = NEVER  # fsync when the oldest unflushed write is this old
    max_message_bytes: int = 1_048_588
    compact: bool = False  # cleanup.policy has compact: the cleaner keeps the latest record per key
    delete: bool = True  # cleanup.policy has delete: retention by time and size applies
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = NEVER
    delete_retention_ms: int = 86_400_000  # a tombstone outlives the cleaner's first pass over it this long

    @classmethod
    def from_topic_configs(cls, explicit: Mapping[str, str]) -> LogConfig:
        def text(key: str) -> str:
            return explicit.get(key, TOPIC_CONFIGS[key].default)

        def value(key: str) -> int:
            return int(text(key))

        policies = cleanup_policies(text(CLEANUP_POLICY))
        return cls(
            segment_bytes=value("segment.bytes"),
            segment_ms=value("segment.ms"),
            retention_ms=value("retention.ms"),
            retention_bytes=value("retention.bytes"),
            index_interval_bytes=value("index.interval.bytes"),
            flush_messages=value("flush.messages"),
            flush_ms=value("flush.ms"),
            max_message_bytes=value("max.message.bytes"),
            compact=COMPACT in policies,
            delete=DELETE in policies,
            min_cleanable_dirty_ratio=float(text("min.cleanable.dirty.ratio")),
            min_compaction_lag_ms=value("min.compaction.lag.ms"),
            max_compaction_lag_ms=value("max.compaction.lag.ms"),
            delete_retention_ms=value("delete.retention.ms"),
        )
