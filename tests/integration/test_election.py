"""Three controllers elect exactly one leader, and every node agrees on it and its epoch."""

from __future__ import annotations

import pytest

from tests.integration.conftest import MakeCluster
from tests.integration.harness import agreed_leader
from tests.integration.polling import hold_for

pytestmark = pytest.mark.integration

STABLE_WINDOW_S = 1.0


def test_three_controllers_elect_one_leader_all_agree(make_cluster: MakeCluster) -> None:
    cluster = make_cluster()
    cluster.start()
    leader = cluster.wait_for_leader()

    def still_agreed() -> None:
        views = cluster.views(cluster.node_ids)
        assert agreed_leader(views) == leader, views

    # Not a lucky instant: one leader, one epoch, seen the same by all for a while.
    hold_for(still_agreed, duration_s=STABLE_WINDOW_S)


def test_a_new_cluster_formatted_as_initial_forms_with_one_voter_down(make_cluster: MakeCluster) -> None:
    """``storage format --initial-cluster`` tells a voter it has never voted, so two of
    three can elect a leader and commit without ever hearing the third."""
    cluster = make_cluster(initial_cluster=True)
    cluster.start(1, 2)
    leader = cluster.wait_for_leader([1, 2])
    cluster.append(leader, [b"with-one-voter-down"])
    cluster.wait_converged([1, 2])
