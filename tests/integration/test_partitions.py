"""Network partitions through the fault proxy, of both kinds: blackhole (bytes stop,
nothing closes: only timeouts notice) and reject (every connection reset at once).

A cut-off follower must not disrupt a healthy leader when it comes back (pre-vote), and a
cut-off leader must step down by itself (check-quorum) while the majority carries on
without losing anything it acknowledged.
"""

from __future__ import annotations

import concurrent.futures
import time

import pytest

from raftka.raft.config import RaftConfig
from tests.integration.client import AppendStatus
from tests.integration.conftest import MakeCluster
from tests.integration.harness import Cluster, Leadership, agreed_leader
from tests.integration.polling import hold_for, wait_until
from tests.integration.proxy import LinkState

pytestmark = pytest.mark.integration
CUTS = pytest.mark.parametrize("cut", [LinkState.BLACKHOLE, LinkState.REJECT], ids=lambda state: state.value)

CUT_S = 3.0  # well past fetch_timeout_ms and many election timeouts
AFTER_HEAL_S = 2.0
RESIGN_SLACK_S = 1.5  # scheduling and RPC deadlines on a loaded 2-core machine


def assert_undisturbed(cluster: Cluster, leader: Leadership, cut_off: int) -> None:
    """The connected nodes still agree on ``leader``, and nobody, the cut-off node included,
    has moved to a later epoch: pre-vote keeps a node that cannot win from raising it."""
    views = cluster.views(cluster.node_ids)
    connected = {node_id: view for node_id, view in views.items() if node_id != cut_off}
    assert agreed_leader(connected) == leader, f"leadership moved from {leader}: {views}"
    lonely = views[cut_off]
    assert lonely is None or lonely.leader_epoch == leader.epoch, f"node {cut_off} raised the epoch: {lonely}"


@CUTS
def test_cut_off_follower_comes_back_without_disrupting_the_leader(
    make_cluster: MakeCluster, cut: LinkState
) -> None:
    cluster = make_cluster()
    cluster.start()
    leader = cluster.wait_for_leader()
    follower = next(node_id for node_id in cluster.node_ids if node_id != leader.leader_id)
    cluster.append(leader, [b"before-cut"])

    cluster.network.isolate(follower, cut)
    cluster.append(leader, [b"during-cut"])  # the majority still commits
    hold_for(lambda: assert_undisturbed(cluster, leader, follower), duration_s=CUT_S)
    cluster.network.heal()
    hold_for(lambda: assert_undisturbed(cluster, leader, follower), duration_s=AFTER_HEAL_S)
    cluster.wait_following(follower, leader)
    cluster.append(leader, [b"after-heal"])
    cluster.wait_converged()
    assert cluster.wait_for_leader() == leader


@CUTS
def test_cut_off_leader_resigns_and_the_majority_carries_on(
    make_cluster: MakeCluster, cut: LinkState
) -> None:
    raft = RaftConfig()
    cluster = make_cluster(raft=raft)
    cluster.start()
    old = cluster.wait_for_leader()
    majority = [node_id for node_id in cluster.node_ids if node_id != old.leader_id]
    cluster.append(old, [b"before-cut"])

    cluster.network.isolate(old.leader_id, cut)
    cut_at = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        # Proposed on the cut-off leader, which can never commit it.
        stranded = pool.submit(cluster.try_append, old.leader_id, [b"stranded"])
        new = cluster.wait_for_leader(majority, above_epoch=old.epoch)
        cluster.append(new, [b"majority"])
        resign_s = raft.check_quorum_timeout_ms / 1000 + RESIGN_SLACK_S

        def resigned() -> bool:
            view = cluster.describe(old.leader_id)
            return view is not None and view.role != "leader"

        wait_until(
            resigned,
            timeout_s=max(0.0, cut_at + resign_s - time.monotonic()),
            what="check-quorum resignation",
        )
        outcome = stranded.result()
    assert outcome.status is not AppendStatus.ACKED, "a cut-off leader acknowledged an append"

    cluster.network.heal()
    cluster.wait_following(old.leader_id, new)
    cluster.append(new, [b"after-heal"])
    journal = cluster.wait_converged()
    assert b"stranded" not in journal, "the cut-off leader's uncommitted entry survived"
    assert cluster.wait_for_leader() == new
