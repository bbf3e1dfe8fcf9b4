"""A follower that was down while the leader snapshotted and dropped the log it would
need catches up from the leader's snapshot, and ends with the leader's journal."""

from __future__ import annotations

from pathlib import Path

import pytest

from raft.node_config import JournalConfig, LogConfig
from raftka.raft.storage import layout
from tests.integration.conftest import MakeCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration

SNAPSHOT_INTERVAL_RECORDS = 50
SEGMENT_BYTES = 4096
ENTRIES_BEFORE_KILL = 20  # fewer than a snapshot interval: the follower never snapshots itself
APPENDS_WHILE_DOWN = 30
ENTRIES_PER_APPEND = 20
ENTRY_PADDING = b"." * 100  # so that segments roll every few dozen entries


def entries(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i:04d}".encode() + ENTRY_PADDING for i in range(count)]


def compacted(data_dir: Path) -> bool:
    """The log below the newest snapshot is gone from the live log (moved to archive/)."""
    log_dir = layout.log_dir(data_dir)
    live = layout.list_segments(log_dir)
    archived = layout.list_segments(log_dir / layout.ARCHIVE_DIR)
    return bool(layout.list_snapshots(log_dir)) and bool(archived) and live[0][0] > 0


def test_restarted_follower_catches_up_from_the_leaders_snapshot(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(
        log=LogConfig(segment_bytes=SEGMENT_BYTES, archive_segments=True),
        journal=JournalConfig(snapshot_interval_records=SNAPSHOT_INTERVAL_RECORDS),
    )
    cluster.start()
    leader = cluster.wait_for_leader()
    laggard = next(node_id for node_id in cluster.node_ids if node_id != leader.leader_id)
    cluster.append(leader, entries("before", ENTRIES_BEFORE_KILL))
    cluster.wait_converged()
    cluster.kill(laggard)
    laggard_dir = cluster.nodes[laggard].data_dir
    assert not layout.list_snapshots(layout.log_dir(laggard_dir)), "precondition: no snapshot of its own"

    for n in range(APPENDS_WHILE_DOWN):
        cluster.append(leader, entries(f"down{n:02d}", ENTRIES_PER_APPEND))
    leader_dir = cluster.nodes[leader.leader_id].data_dir
    wait_until(
        lambda: compacted(leader_dir), timeout_s=10, what="the leader to snapshot and archive old segments"
    )

    cluster.start(laggard)
    journal = cluster.wait_converged()
    assert len(journal) == ENTRIES_BEFORE_KILL + APPENDS_WHILE_DOWN * ENTRIES_PER_APPEND
    view = cluster.journal(laggard)
    assert view is not None and view.loaded_snapshot, "the laggard should have restored the leader's snapshot"
    assert layout.list_snapshots(layout.log_dir(laggard_dir)), "the installed snapshot should be on its disk"
    assert cluster.wait_for_leader() == leader
