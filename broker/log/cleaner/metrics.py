"""The log cleaner's gauges for Prometheus, named as Kafka's JMX exporter names its
``kafka.log:type=LogCleaner`` and ``type=LogCleanerManager`` MBeans."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from raftka.broker.log.cleaner.manager import LogCleaner
from raftka.raft.metrics import gauge

CLEANER = "kafka_log_logcleaner_"
MANAGER = "kafka_log_logcleanermanager_"


class CleanerCollector(Collector):
    def __init__(self, cleaner: LogCleaner) -> None:
        self._cleaner = cleaner

    def collect(self) -> Iterator[Metric]:
        values = self._cleaner.metrics
        yield gauge(
            MANAGER + "max_dirty_percent",
            "The largest dirty ratio of a compacted log, in percent, when the cleaner last looked.",
            values.max_dirty_percent,
        )
        yield gauge(
            MANAGER + "uncleanable_partitions_count",
            "Compacted partitions whose cleaning failed (a damaged batch); not cleaned until restart.",
            values.uncleanable_partitions_count,
        )
        yield gauge(
            CLEANER + "cleaner_recopy_percent",
            "Bytes the last pass wrote over the bytes it read, in percent.",
            values.cleaner_recopy_percent,
        )
        yield gauge(
            CLEANER + "max_clean_time_secs", "Seconds the last pass took.", values.max_clean_time_secs
        )
        yield gauge(
            CLEANER + "max_buffer_utilization_percent",
            "How full the last pass's key map was, in percent of its slots.",
            values.max_buffer_utilization_percent,
        )
