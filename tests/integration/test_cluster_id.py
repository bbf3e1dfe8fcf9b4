"""A node whose storage was formatted for another cluster never joins: it stops with an
error naming the cluster id, and the nodes of the real cluster keep their leader.

The foreign node joins a running cluster: its disk is replaced and formatted with the
wrong id. A node stops only when most of the other voters refuse its cluster id, so a
healthy leader that one foreign node answers keeps leading.
"""

from __future__ import annotations

import pytest

from tests.integration.conftest import MakeCluster
from tests.integration.harness import Cluster, Leadership, agreed_leader
from tests.integration.polling import hold_for

pytestmark = pytest.mark.integration

FOREIGN_CLUSTER_ID = "some-other-cluster"
EXIT_TIMEOUT_S = 10.0
STABLE_WINDOW_S = 2.0


def assert_refused_to_join(cluster: Cluster, foreign_id: int) -> None:
    foreign = cluster.nodes[foreign_id]
    status = foreign.wait_exit(EXIT_TIMEOUT_S)
    assert status != 0, "a node in the wrong cluster must not exit successfully"
    log = foreign.log_text()
    assert FOREIGN_CLUSTER_ID in log and "cluster id" in log, "the error must name the cluster id problem"


def assert_members_keep(cluster: Cluster, leader: Leadership, members: list[int], marker: bytes) -> None:
    def members_keep_their_leader() -> None:
        assert all(cluster.nodes[node_id].running for node_id in members), "a member process exited"
        views = cluster.views(members)
        assert agreed_leader(views) == leader, f"the foreign node disturbed the cluster: {views}"

    hold_for(members_keep_their_leader, duration_s=STABLE_WINDOW_S)
    cluster.append(leader, [marker])
    cluster.wait_converged(members)


def test_node_formatted_for_another_cluster_refuses_to_join(make_cluster: MakeCluster) -> None:
    cluster = make_cluster()
    cluster.start()
    leader = cluster.wait_for_leader()
    foreign_id = next(node_id for node_id in cluster.node_ids if node_id != leader.leader_id)
    members = [node_id for node_id in cluster.node_ids if node_id != foreign_id]
    cluster.append(leader, [b"before-foreign-node"])

    cluster.kill(foreign_id)
    cluster.reformat(foreign_id, FOREIGN_CLUSTER_ID)
    cluster.start(foreign_id)

    assert_refused_to_join(cluster, foreign_id)
    assert_members_keep(cluster, leader, members, b"after-foreign-node")


def test_foreign_node_answering_the_leader_does_not_stop_it(make_cluster: MakeCluster) -> None:
    cluster = make_cluster()
    cluster.start()
    first = cluster.wait_for_leader()
    foreign_id = next(node_id for node_id in cluster.node_ids if node_id != first.leader_id)
    members = [node_id for node_id in cluster.node_ids if node_id != foreign_id]
    cluster.kill(foreign_id)
    # A new epoch the foreign node never fetched in: its leader keeps announcing itself to it.
    cluster.kill(first.leader_id)
    cluster.start(first.leader_id)
    leader = cluster.wait_for_leader(members, above_epoch=first.epoch)

    cluster.reformat(foreign_id, FOREIGN_CLUSTER_ID)
    for member in members:  # the leader's BeginQuorumEpoch reaches it before its own requests leave
        cluster.network.cut(foreign_id, member)
    cluster.start(foreign_id)
    assert_members_keep(cluster, leader, members, b"while-cut-off")

    cluster.network.heal()
    assert_refused_to_join(cluster, foreign_id)
    assert_members_keep(cluster, leader, members, b"after-healing")
