"""A partition log's settings, read from its topic's configs (Kafka's names and defaults)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from raftka.metadata.topic_configs import TOPIC_CONFIGS

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

    @classmethod
    def from_topic_configs(cls, explicit: Mapping[str, str]) -> LogConfig:
        def value(key: str) -> int:
            return int(explicit.get(key, TOPIC_CONFIGS[key].default))

        return cls(
            segment_bytes=value("segment.bytes"),
            segment_ms=value("segment.ms"),
            retention_ms=value("retention.ms"),
            retention_bytes=value("retention.bytes"),
            index_interval_bytes=value("index.interval.bytes"),
            flush_messages=value("flush.messages"),
            flush_ms=value("flush.ms"),
            max_message_bytes=value("max.message.bytes"),
        )
