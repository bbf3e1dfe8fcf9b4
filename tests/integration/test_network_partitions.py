"""Network partitions between real processes: every node in its own network namespace
(``netns_cluster``), ``raftka chaos partition-broker`` cuts the busiest partition leader
off its followers, the controllers or the clients with iptables (``lossy-broker``: drops
a fifth of its packets; ``slow-broker``: delays every byte 50 ms each way) under an acks=all load from the idempotent producer (RF 3,
min.insync.replicas 2), then heals. Afterwards every
acknowledged record is read back once, in order, nothing unknown appears, every
partition's replicas converge to the same bytes while running (a leader fenced as the fault
heals, its connections dropped, must first truncate the tail it had not replicated), and,
the nodes stopped, still agree.

Needs root (``make chaos-net ROUNDS=20`` for a longer run: CHAOS_NET_ROUNDS).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from raftka.tools.chaos import netns
from raftka.tools.chaos.chaos_broker import PARTITIONS
from tests.integration.netns_cluster import NetnsCluster, netns_cluster
from tests.unit.kafka_wire import call

pytestmark = pytest.mark.integration
ROUNDS = int(os.environ.get("CHAOS_NET_ROUNDS", "1"))
SESSION_TIMEOUT_MS = 2_000  # a leader cut off the controllers is fenced quickly
HEARTBEAT_MS = 300
LAG_TIME_MAX_MS = 2_000  # a leader cut off its followers shrinks its ISRs quickly


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NetnsCluster]:
    with netns_cluster(
        tmp_path / "cluster",
        controller__controller={"session_timeout_ms": SESSION_TIMEOUT_MS},
        broker__broker={"heartbeat_interval_ms": HEARTBEAT_MS, "replica_lag_time_max_ms": LAG_TIME_MAX_MS},
    ) as cluster:
        yield cluster


@pytest.mark.parametrize(
    "fault",
    [
        ("partition-broker", "--from", "followers"),
        ("partition-broker", "--from", "controller"),
        ("partition-broker", "--from", "clients"),
        ("lossy-broker", "--loss-percent", "20"),
        ("slow-broker", "--delay-ms", "50"),
    ],
    ids=["followers", "controller", "clients", "loss", "delay"],
)
def test_acknowledged_records_survive_a_leader_cut_off(cluster: NetnsCluster, fault: tuple[str, ...]) -> None:
    done = cluster.run(
        "chaos", *fault, "--rounds", str(ROUNDS), "--hold-s", "2",
        "--rate", "500", "--timeout-s", "30", "--output", "json",
        timeout_s=120 * ROUNDS,
    )  # fmt: skip
    assert done.returncode in (0, 1) and done.stdout, (
        f"chaos failed to run ({done.returncode}): {done.stderr[-3000:]}\n{cluster.log_tails()}"
    )
    report = json.loads(done.stdout)
    summary = report["summary"]
    assert len(report["rounds"]) == ROUNDS
    if fault[-1] in ("followers", "controller"):  # the cluster saw the partition before the heal
        assert all(r["reaction_ms"] is not None for r in report["rounds"]), report["rounds"]
    assert summary["acknowledged"] > 0 and summary["idempotent"]
    assert summary["lost"] == 0, summary
    assert summary["duplicated"] == 0, summary
    assert summary["out_of_order"] == 0, summary
    assert summary["unknown"] == 0, summary
    assert summary["read"] == summary["acknowledged"] + summary["unacknowledged_read"], summary
    assert done.returncode == 0
    cluster.wait_for_replicas_to_agree(summary["topic"])  # a leader fenced as the fault healed truncates
    cluster.down()
    compared, divergent = cluster.compare_replicas(summary["topic"])
    assert compared == PARTITIONS and divergent == {}, (
        f"replicas disagree on disk: {divergent}\n{cluster.replica_events()}"
    )


def test_a_delayed_broker_answers_no_sooner_than_twice_the_delay_and_at_once_after_the_heal(
    cluster: NetnsCluster,
) -> None:
    """The delay is real and only while it lasts: a Kafka request to the broker and its
    answer each wait it (a lower bound, which no load can break), and the heal lifts it."""
    broker = cluster.nodes("broker")[0]
    delay_ms = 300
    before = _metadata_round_trip_s(broker.kafka_address)  # reported on failure, not bounded
    netns.delay(broker.netns, delay_ms)
    try:
        delayed = _metadata_round_trip_s(broker.kafka_address)
    finally:
        netns.heal(broker.netns)
    after = _metadata_round_trip_s(broker.kafka_address)  # and it still answers
    assert delayed >= 2 * delay_ms / 1000, (before, delayed, after)
    assert not netns.delay_proxies(broker.netns)  # the heal stopped the proxy and removed its rules:
    rules = subprocess.run(["ip", "netns", "exec", broker.netns, "iptables", "-t", "nat", "-S"],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "REDIRECT" not in rules


def _metadata_round_trip_s(address: str) -> float:
    """One Metadata request on a fresh connection: from connecting to the whole answer."""
    started = time.monotonic()
    answer = call(address, MetadataRequest(topics=[], allow_auto_topic_creation=False), 12, MetadataResponse)
    assert answer.brokers, answer
    return time.monotonic() - started
