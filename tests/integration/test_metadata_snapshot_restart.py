"""A controller restarted after many records starts from a snapshot of the metadata image
and catches up on the tail, and what it then serves is complete.

With ``metadata.snapshot_interval_records`` small, the quorum snapshots many times
while a standby is down; the standby's restart must load a snapshot (its log says so:
"metadata image loaded from snapshot") and reach the leader's high watermark. Then it is
made the active controller (the others are killed in turn until it wins an election)
and must answer every offset committed before and during its absence.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.types import NewTopic, OffsetCommit
from raftka.command.quorum_client import QuorumClient
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

SNAPSHOT_INTERVAL_RECORDS = 100
TOPIC = "snap"
PARTITIONS = 50
GROUP = "snap-group"
LOADED = "metadata image loaded from snapshot"
ELECTION_ROUNDS_MAX = 10  # each round the restarted node wins with probability 1/2


def test_a_restarted_controller_loads_a_snapshot_and_catches_up(tmp_path: Path) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up_configured(controller__metadata={"snapshot_interval_records": SNAPSHOT_INTERVAL_RECORDS})
        with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=20)) as admin:
            scenario(cluster, admin)
    finally:
        cluster.close()


def scenario(cluster: MetadataCluster, admin: Admin) -> None:
    (result,) = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
    assert result.error is None, result
    commit_rounds(admin, range(1, 11))  # 500 records: about 5 snapshots
    active = admin.describe_cluster().controller_id
    victim = next(n.id for n in cluster.nodes("controller") if n.id != active)
    cluster.kill(victim)
    commit_rounds(admin, range(11, 31))  # 1,000 more records it misses
    log_size = len(cluster.log_text(victim))

    cluster.up()
    with QuorumClient(call_timeout_s=1.0) as quorum:
        high_watermark = quorum.describe_leader(cluster.controller_addresses(), 10).high_watermark

        def caught_up() -> bool:
            leader = quorum.describe_leader(cluster.controller_addresses(), 10)
            return any(v.node_id == victim and v.log_end_offset >= high_watermark for v in leader.voters)

        wait_until(caught_up, timeout_s=30, what=f"node {victim} to reach offset {high_watermark}")
    loads = [line for line in log_lines(cluster.log_text(victim)[log_size:]) if line.get("event") == LOADED]
    assert loads, f"node {victim} did not log {LOADED!r} after its restart"
    assert loads[0]["offset"] > 0, loads[0]
    print(
        f"node {victim} loaded snapshots {[(x['offset'], x['bytes']) for x in loads]}, caught up to {high_watermark}"
    )

    make_active(cluster, admin, victim)
    fetched = admin.fetch_offsets(GROUP, {TOPIC: list(range(PARTITIONS))})
    assert sorted((f.partition, f.offset) for f in fetched) == [(p, 30 * 1000 + p) for p in range(PARTITIONS)]


def commit_rounds(admin: Admin, rounds: range) -> None:
    """Per round, one request committing every partition: one batch of PARTITIONS records."""
    for number in rounds:
        commits = [OffsetCommit(TOPIC, p, number * 1000 + p) for p in range(PARTITIONS)]
        results = admin.commit_offsets(GROUP, commits)
        assert all(r.error is None for r in results), results


def make_active(cluster: MetadataCluster, admin: Admin, node_id: int) -> None:
    """Kill whichever controller is active, restart it, until ``node_id`` wins."""
    for _ in range(ELECTION_ROUNDS_MAX):
        active = admin.describe_cluster().controller_id
        if active == node_id:
            return
        cluster.kill(active)
        wait_until(
            lambda killed=active: admin.describe_cluster().controller_id not in (killed, -1),
            timeout_s=15,
            what="a new active controller",
        )
        cluster.up()
    raise AssertionError(
        f"node {node_id} did not become the active controller in {ELECTION_ROUNDS_MAX} elections"
    )


def log_lines(text: str) -> list[dict]:
    lines = []
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            continue  # a line that is not JSON (a traceback would be) is not ours to parse
    return lines
