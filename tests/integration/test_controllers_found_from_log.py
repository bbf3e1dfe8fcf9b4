"""Brokers find the active controller where the voter set in their metadata log says
(KIP-853; ``raftka.raft.endpoints``), not only among the controllers they were
configured with: a quorum whose every configured controller is gone keeps its brokers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.producer import Producer
from raftka.client.types import NewTopic
from raftka.command import local
from raftka.node.config import load_config
from tests.integration.metadata_cluster import MetadataCluster
from tests.integration.polling import hold_for, wait_until
from tests.integration.test_controller_membership import (
    CHANGE_TIMEOUT_S,
    add_controller_node,
    add_observer,
    format_dynamic,
    leader_row,
    voters,
)

pytestmark = pytest.mark.integration

TOPIC = "after-controller-1"


def test_brokers_find_controllers_they_were_not_configured_with(tmp_path: Path) -> None:
    """The brokers are configured with controllers 1, 2 and 3; the quorum starts with 1
    alone (2 and 3 never run), 10 and 11 are added (voters {1, 10, 11}), and 1 is SIGKILLed.
    The brokers find 10 or 11 where the voter set in their metadata log says (no address
    they were configured with answers): they keep their sessions for a session timeout and
    a half under the new controller, and a topic on all of them is created and produced
    to with acks=all."""
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up()
        cluster.down()
        gone = [n for n in cluster.nodes("controller") if n.id != 1]
        state = local.load(cluster.dir)
        state.nodes = [n for n in state.nodes if n not in gone]  # configured, never started again
        local.save(state)
        format_dynamic(cluster)  # controller 1 alone
        added = {node_id: add_controller_node(cluster, node_id) for node_id in (10, 11)}
        cluster.up()
        for node_id, address in added.items():
            add_observer(cluster, node_id, address)
        assert {v for v, _ in voters(cluster)} == {1, 10, 11}
        cluster.kill(1)
        wait_until(
            lambda: leader_row(cluster)[0] in added,
            timeout_s=CHANGE_TIMEOUT_S,
            what="controller 10 or 11 to lead",
        )
        session_s = load_config(cluster.node(10).config).controller.session_timeout_ms / 1000
        with Admin(list(added.values()), RetryPolicy(total_timeout_s=30)) as admin:
            brokers = [b.broker_id for b in admin.describe_cluster().brokers]
            assert len(brokers) == 3

            def unfenced() -> None:
                fenced = [b.broker_id for b in admin.describe_cluster().brokers if b.fenced]
                assert not fenced, f"brokers {fenced} were fenced: they did not reach the new controller"

            hold_for(unfenced, duration_s=1.5 * session_s)
            admin.create_topics([NewTopic(TOPIC, 3, 3, {"min.insync.replicas": "3"})])[0].check()
        producer = Producer([n.data_address for n in cluster.nodes("broker")], acks=-1)
        try:
            futures = [producer.send(TOPIC, b"after %d" % p, partition=p) for p in range(3)]
            producer.flush()
            assert [f.result(timeout=60).partition for f in futures] == [0, 1, 2]
        finally:
            producer.close()
        cluster.down()
    finally:
        cluster.close()
