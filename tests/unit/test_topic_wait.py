"""The producer's wait for a topic no broker knows (``raftka.client.topic_wait``), on a
clock of the test's own: it says so at once and every WARN_INTERVAL_S after, gives up at
its deadline and not later, and a later send for a topic still missing fails at once
instead of waiting all over again."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from structlog.testing import capture_logs

from raftka.client.cluster_metadata import PartitionLeader, TopicInfo
from raftka.client.errors import KafkaError
from raftka.client.topic_wait import WARN_INTERVAL_S, TopicWaits

TOPIC = "nosuch"


class Clock:
    """One second later at every look: the wait's own reads are what move time on."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return float(self.reads - 1)


class Brokers:
    """ClusterMetadata as far as the wait uses it: a topic no broker knows until created."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicInfo] = {}
        self.refreshes = 0

    async def topic(self, name: str) -> TopicInfo:
        self.refreshes += 1
        if name not in self.topics:
            raise KafkaError("UNKNOWN_TOPIC_OR_PARTITION", f"no topic {name!r}")
        return self.topics[name]


def warnings(logs: list[dict]) -> list[tuple[float, float]]:
    return [(e["waited_s"], e["max_wait_s"]) for e in logs if e["log_level"] == "warning"]


def test_a_missing_topic_is_reported_at_once_and_again_until_the_deadline() -> None:
    brokers, clock = Brokers(), Clock()
    waits = TopicWaits(brokers, retry_backoff_s=0, clock=clock)  # type: ignore[arg-type]
    with capture_logs() as logs, pytest.raises(KafkaError, match="UNKNOWN_TOPIC_OR_PARTITION") as raised:
        asyncio.run(waits.topic(TOPIC, max_wait_s=10.0))  # the deadline: 10, read 0 plus 10
    assert warnings(logs)[0] == (1.0, 10.0), "said at the first miss, with the whole wait"
    assert warnings(logs) == [(t, 10.0) for t in (1.0, 1.0 + WARN_INTERVAL_S)]
    assert clock.reads - 1 == 10, "gave up at the first look at the deadline, not later"
    assert "not created within 10 s" in str(raised.value)


def test_a_later_send_for_a_topic_still_missing_fails_at_once_and_one_that_appears_is_found() -> None:
    brokers, clock = Brokers(), Clock()
    waits = TopicWaits(brokers, retry_backoff_s=0, clock=clock)  # type: ignore[arg-type]

    async def scenario() -> None:
        with pytest.raises(KafkaError):
            await waits.topic(TOPIC, max_wait_s=3.0)
        refreshes, reads = brokers.refreshes, clock.reads
        with capture_logs() as logs, pytest.raises(KafkaError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            await waits.topic(TOPIC, max_wait_s=100.0)  # its own bound is far off
        assert brokers.refreshes - refreshes == 1, "one refresh, no new wait"
        assert clock.reads - reads == 2, "its deadline and the one miss"
        assert warnings(logs) == []
        info = TopicInfo(TOPIC, uuid.UUID(int=1).bytes, {0: PartitionLeader(1, 0)})
        brokers.topics[TOPIC] = info
        assert await waits.topic(TOPIC, max_wait_s=0.0) is info
        del brokers.topics[TOPIC]  # deleted again: a new wait, said at once again
        with capture_logs() as logs, pytest.raises(KafkaError):
            await waits.topic(TOPIC, max_wait_s=2.0)
        assert warnings(logs) == [(1.0, 2.0)]

    asyncio.run(scenario())
