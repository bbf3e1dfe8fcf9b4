"""Every node SIGKILLed at once during appends: nothing acknowledged may be lost, since an
append is acknowledged only once a majority has it on disk (fsynced)."""

from __future__ import annotations

import pytest

from tests.integration.conftest import MakeCluster
from tests.integration.writer import JournalWriter

pytestmark = pytest.mark.integration

ACKS_BEFORE_CRASH = 60
ACK_TIMEOUT_S = 15.0


def test_whole_cluster_crash_keeps_every_acknowledged_append(make_cluster: MakeCluster) -> None:
    cluster = make_cluster()
    cluster.start()
    before = cluster.wait_for_leader()

    with JournalWriter(cluster, "crash"):
        cluster.history.wait_acked(ACKS_BEFORE_CRASH, ACK_TIMEOUT_S)
        cluster.kill(*cluster.node_ids)  # appends in flight; nothing flushed on the way out
    acked = len(cluster.history.acked)

    cluster.start()
    after = cluster.wait_for_leader()
    assert after.epoch > before.epoch
    journal = cluster.wait_converged()
    assert len(journal) >= acked
