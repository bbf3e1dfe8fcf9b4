"""A leader that crashes or hangs: the others elect a new one at a higher epoch, nothing
acknowledged is lost or doubled, and the old leader comes back as a follower."""

from __future__ import annotations

import concurrent.futures
import signal

import pytest

from tests.integration.client import AppendStatus
from tests.integration.conftest import MakeCluster
from tests.integration.polling import hold_for
from tests.integration.writer import JournalWriter

pytestmark = pytest.mark.integration

ACKS_PER_PHASE = 30
ACK_TIMEOUT_S = 15.0
RESUME_WINDOW_S = 3.0
STALE_APPEND_TIMEOUT_S = 10.0  # outlasts the stop, so the answer is the resumed node's own


def test_sigkill_leader_during_appends_loses_and_doubles_nothing(make_cluster: MakeCluster) -> None:
    cluster = make_cluster()
    cluster.start()
    old = cluster.wait_for_leader()
    survivors = [node_id for node_id in cluster.node_ids if node_id != old.leader_id]

    with JournalWriter(cluster, "failover"):
        cluster.history.wait_acked(ACKS_PER_PHASE, ACK_TIMEOUT_S)
        cluster.kill(old.leader_id)  # with an append in flight, most likely
        acked_at_kill = len(cluster.history.acked)
        new = cluster.wait_for_leader(survivors, above_epoch=old.epoch)
        cluster.history.wait_acked(acked_at_kill + ACKS_PER_PHASE, ACK_TIMEOUT_S)
        cluster.start(old.leader_id)
        cluster.history.wait_acked(len(cluster.history.acked) + ACKS_PER_PHASE, ACK_TIMEOUT_S)

    journal = cluster.wait_converged()  # the restarted node too
    assert len(journal) >= 3 * ACKS_PER_PHASE
    assert cluster.wait_for_leader().epoch >= new.epoch


def test_sigstopped_leader_rejoins_as_follower_without_an_election(make_cluster: MakeCluster) -> None:
    cluster = make_cluster()
    cluster.start()
    old = cluster.wait_for_leader()
    cluster.append(old, [b"before-stop"])
    survivors = [node_id for node_id in cluster.node_ids if node_id != old.leader_id]

    cluster.send_signal(old.leader_id, signal.SIGSTOP)  # hung, not dead: its connections stay open
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # Waits in the hung leader's socket; it reaches the node as it resumes, still leader.
        stale = pool.submit(
            cluster.try_append, old.leader_id, [b"to-the-hung-leader"], STALE_APPEND_TIMEOUT_S
        )
        new = cluster.wait_for_leader(survivors, above_epoch=old.epoch)
        cluster.append(new, [b"while-stopped"])
        cluster.send_signal(old.leader_id, signal.SIGCONT)
        followed: list[bool] = []

        def no_new_election() -> None:
            views = cluster.views(cluster.node_ids)
            leading = views[new.leader_id]
            assert leading is not None and leading.role == "leader", f"{new} lost the lead: {views}"
            epochs = {node_id: view.leader_epoch for node_id, view in views.items() if view is not None}
            assert max(epochs.values()) == new.epoch, f"an election after SIGCONT: epochs {epochs}"
            resumed = views[old.leader_id]
            if resumed is not None and resumed.role == "follower" and resumed.leader_id == new.leader_id:
                followed.append(True)

        # From the moment it resumes, for a while: nobody moves the epoch, the new leader leads.
        hold_for(no_new_election, duration_s=RESUME_WINDOW_S)
        assert followed, f"node {old.leader_id} did not follow {new} within {RESUME_WINDOW_S}s of SIGCONT"
        assert stale.result().status is not AppendStatus.ACKED, "a deposed leader acknowledged an append"

    cluster.append(new, [b"after-resume"])
    journal = cluster.wait_converged()
    assert b"to-the-hung-leader" not in journal, "an entry only the deposed leader had survived"
