"""Replication throttles (Kafka's KIP-73), on real partition logs with the test's clock.

Broker 1 leads; broker 3 is out of the ISR and catching up, broker 2 is in it. Each
round the clock moves ``STEP_MS`` and a follower fetches once; the tests count the
bytes it got. Kafka's rate spans at least ``WINDOWS - 1`` windows, so a throttle
lets through what that span allows at once (the burst), then bytes at the rate.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.broker.replica.throttle import WINDOW_MS, WINDOWS
from raftka.metadata.broker_configs import FOLLOWER_THROTTLED_RATE, LEADER_THROTTLED_RATE
from raftka.metadata.topic_configs import FOLLOWER_THROTTLED_REPLICAS, LEADER_THROTTLED_REPLICAS
from raftka.node.config import BrokerConfig
from tests.unit.test_replication import LAG_MS, Cluster, E, produce_request, result_of, run

RATE = 2_000  # bytes/s: a fifth of what one ~1 KB batch per round would be
ANSWER_MAX = 2048  # a follower's fetch per partition: at least one ~1 KB batch, at most two
STEP_MS = 100
VALUE = b"v" * 1000
BURST = RATE * (WINDOWS - 1) * WINDOW_MS // 1000 + ANSWER_MAX


def throttled(tmp_path: Path, partitions: int = 1, **topic_configs: str) -> Cluster:
    cluster = Cluster(
        tmp_path,
        partitions=partitions,
        broker_config=BrokerConfig(replica_lag_time_max_ms=LAG_MS, replica_fetch_max_bytes=ANSWER_MAX),
        **topic_configs,
    )
    cluster.publish(isr=(1, 2), partition_epoch=1)  # 3 is catching up
    return cluster


async def produce(cluster: Cluster, batches: int, partition: int = 0) -> None:
    for _ in range(batches):
        answer = await cluster.nodes[1].replicas.produce(
            produce_request([VALUE], acks=1, partition=partition)
        )
        assert result_of(answer).error == E.NONE


async def caught_up(cluster: Cluster, follower: int) -> None:
    """``follower`` fetches until it has all the leader has (so the high watermark is there)."""
    for _ in range(2 * cluster.nodes[1].partition.log.log_end_offset + 2):  # a batch a round at least
        if (
            cluster.nodes[follower].partition.log.log_end_offset
            == cluster.nodes[1].partition.log.log_end_offset
        ):
            await fetch_round(cluster, follower)  # the leader learns it has it all
            return
        await fetch_round(cluster, follower)
    raise AssertionError(f"broker {follower} never caught up")


async def fetch_round(cluster: Cluster, follower: int) -> dict[int, int]:
    """One fetch by ``follower`` after ``STEP_MS``: the record bytes it got, per partition."""
    cluster.clock.ms += STEP_MS
    response = await cluster.replicate(follower)
    assert response.status.error == E.NONE
    got = {}
    for topic in response.topics:
        for result in topic.partitions:
            assert result.error == E.NONE, result.message
            got[result.partition] = len(result.records)
    return got


@pytest.mark.parametrize(
    ("replicas_key", "throttled_broker", "rate_key"),
    [
        (LEADER_THROTTLED_REPLICAS, 1, LEADER_THROTTLED_RATE),
        (FOLLOWER_THROTTLED_REPLICAS, 3, FOLLOWER_THROTTLED_RATE),
    ],
    ids=["leader", "follower"],
)
def test_a_catching_up_follower_gets_no_more_than_the_rate_over_time_plus_one_burst(
    tmp_path: Path, replicas_key: str, throttled_broker: int, rate_key: str
) -> None:
    async def body() -> None:
        cluster = throttled(tmp_path)
        await produce(cluster, 1000)  # more than 40 s of unthrottled rounds could fetch (400 batches)
        await caught_up(cluster, 2)  # the high watermark at the end: 3 is behind it
        cluster.topic_configs[replicas_key] = f"0:{throttled_broker}"
        cluster.broker_configs[str(throttled_broker)] = {rate_key: str(RATE)}
        cluster.publish()
        total, elapsed_ms = 0, 0
        for _ in range(400):
            total += (await fetch_round(cluster, 3)).get(0, 0)
            elapsed_ms += STEP_MS
            assert total <= RATE * elapsed_ms // 1000 + BURST, f"{total} bytes after {elapsed_ms} ms"
        assert cluster.nodes[3].partition.log.log_end_offset * len(VALUE) == pytest.approx(total, rel=0.1)
        assert total >= RATE * elapsed_ms // 1000, "held to the rate, not starved"

    run(body())


def test_an_in_sync_follower_is_never_held_back_and_its_bytes_count_against_the_catching_up_one(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        cluster = throttled(tmp_path, **{LEADER_THROTTLED_REPLICAS: "*"})
        cluster.broker_configs["1"] = {LEADER_THROTTLED_RATE: "1"}
        cluster.publish()
        await produce(cluster, 20)
        await caught_up(cluster, 2)  # 3, at 0, is behind the high watermark: catching up
        await produce(cluster, 20)
        for _ in range(30):
            await fetch_round(cluster, 2)
            assert await fetch_round(cluster, 3) == {0: 0}, "2's bytes put the quota over"
        assert cluster.nodes[2].values() == [VALUE] * 40
        assert cluster.nodes[1].partition.high_watermark == 40, "the ISR moves on unthrottled"
        assert cluster.nodes[3].partition.log.log_end_offset == 0

    run(body())


def test_a_follower_side_throttle_never_holds_back_a_follower_that_has_caught_up(tmp_path: Path) -> None:
    async def body() -> None:
        cluster = throttled(tmp_path, **{FOLLOWER_THROTTLED_REPLICAS: "*"})
        cluster.broker_configs[""] = {FOLLOWER_THROTTLED_RATE: "1"}  # every broker's default
        cluster.publish()
        await fetch_round(cluster, 2)  # nothing to fetch yet: 2 is at the leader's high watermark
        await produce(cluster, 20)
        await caught_up(cluster, 2)  # over its quota by now, never held back: it stays caught up
        await produce(cluster, 20)
        first = await fetch_round(cluster, 3)  # 3's quota is not over yet: one answer
        for _ in range(30):
            await fetch_round(cluster, 2)
            assert await fetch_round(cluster, 3) == {}, "left out of 3's fetches: behind, over its quota"
        assert cluster.nodes[2].values() == [VALUE] * 40
        assert 0 < first[0] <= ANSWER_MAX
        assert cluster.nodes[3].fetch.partitions, "held back, still followed"

    run(body())


def test_a_throttled_partition_gets_nothing_the_others_are_answered_and_a_new_rate_applies_at_once(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        cluster = throttled(tmp_path, partitions=2, **{LEADER_THROTTLED_REPLICAS: "0:1,0:2"})
        cluster.broker_configs[""] = {LEADER_THROTTLED_RATE: "1"}
        cluster.publish()
        for partition in (0, 1):
            await produce(cluster, 20, partition)
        got = {0: 0, 1: 0}
        for _ in range(30):
            for partition, size in (await fetch_round(cluster, 3)).items():
                got[partition] += size
        follower = cluster.nodes[3].replicas
        assert follower.get("t", 1).log.log_end_offset == 20, "the unthrottled partition is answered"
        assert 0 < got[0] <= ANSWER_MAX, "one answer, then nothing while over the rate"

        cluster.broker_configs["1"] = {LEADER_THROTTLED_RATE: str(10**9)}  # broker 1's own beats the default
        cluster.publish()
        for _ in range(30):
            await fetch_round(cluster, 3)
        assert follower.get("t", 0).log.log_end_offset == 20

    run(body())
