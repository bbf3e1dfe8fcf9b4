"""Five controllers, through the operator's own commands: ``cluster up --controllers 5``
forms the quorum; ``chaos kill-leader`` SIGKILLs the active controller twice and each time
a survivor is elected in a higher epoch; what was committed before the kills is still
there; and ``perf stability --rate`` commits offsets through the active controller."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.metadata_cluster import UP_TIMEOUT_S, MetadataCluster

pytestmark = pytest.mark.integration

COMMAND_TIMEOUT_S = 120.0
TOPIC = "committed-before-the-kills"


def as_json(cluster: MetadataCluster, *args: str) -> Any:
    return json.loads(cluster.raftka(*args, "--output", "json", timeout_s=COMMAND_TIMEOUT_S))


def test_five_controllers_fail_over_and_keep_what_was_committed(tmp_path: Path) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.raftka("cluster", "up", "--controllers", "5", "--brokers", "1", timeout_s=UP_TIMEOUT_S)
        assert len(cluster.nodes("controller")) == 5
        cluster.raftka(
            "topics", "create", TOPIC, "--partitions", "1", "--replication-factor", "1",
            timeout_s=COMMAND_TIMEOUT_S,
        )  # fmt: skip

        chaos = as_json(cluster, "chaos", "kill-leader", "--rounds", "2")
        for failover in chaos["rounds"]:
            assert failover["new_leader"] != failover["victim"], failover
            assert failover["new_epoch"] > failover["old_epoch"], failover
            assert failover["elected_ms"] <= failover["failover_ms"], failover

        topics = [topic["name"] for topic in as_json(cluster, "topics", "list")]
        assert TOPIC in topics, f"a topic committed before two controller kills is gone: {topics}"

        load = as_json(cluster, "perf", "stability", "--duration", "2", "--rate", "20")
        assert load["appends_ok"] > 0, load
    finally:
        cluster.close()
