"""Controllers added, removed and replaced (KIP-853) in a running cluster, real processes,
under the linearizability checker's load (``test_metadata_controller_failover``'s eight
clients creating, deleting and describing topics and committing and fetching offsets).

The cluster's three controllers are formatted as a dynamic quorum
(``raftka storage format --initial-controllers``). One change per round, each through
the operator's commands (``raftka quorum add-controller|remove-controller``): a fourth
controller joins as an observer and is added; the active controller removes itself;
a voter's disk is replaced (a new directory id: an observer that is not the voter it
was), its old entry is removed and it is added again; the removed controller is added
back. Afterwards the histories must be linearizable and the logs hold every
acknowledged write once, and the quorum must be the voter set the changes made.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from raftka.command import local
from raftka.command.local import free_ports
from raftka.node.config import MetricsConfig, load_config, render_toml
from raftka.raft.storage import meta
from tests.integration.metadata_cluster import RAFTKA, Controllers, MetadataCluster
from tests.integration.polling import wait_until
from tests.integration.test_metadata_controller_failover import (
    FIND_TIMEOUT_S,
    KEEP_EVERY_RECORD,
    PROGRESS_OPS,
    Run,
    check_logs,
    scenario,
    wait_progress,
)
from tests.linearizability.checker import check
from tests.linearizability.models import OffsetModel, TopicModel

pytestmark = [pytest.mark.integration, pytest.mark.long]  # make test-long

NEW_CONTROLLER_ID = 10
CHANGE_TIMEOUT_S = 60.0


def test_controllers_added_removed_and_replaced_under_load_stay_linearizable(tmp_path: Path) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up()
        cluster.down()
        cluster.configure("controller", "metadata", **KEEP_EVERY_RECORD)
        format_dynamic(cluster)
        # the fourth controller runs from the start, an observer until it is added: the
        # clients know every controller's address (the active one may be any of them)
        new_address = add_controller_node(cluster, NEW_CONTROLLER_ID)
        cluster.up()
        steps = MembershipSteps(cluster, new_address)
        run = asyncio.run(asyncio.wait_for(scenario(cluster, steps.next), 900))
        final = voters(cluster)
        cluster.down()
    finally:
        cluster.close()
    print(f"outcomes: {dict(run.outcomes)}; steps: {steps.done}")
    assert steps.done == ["add", "remove-leader", "replace-disk", "re-add"]
    assert {v for v, _ in final} == {1, 2, 3, NEW_CONTROLLER_ID}
    assert (steps.replaced, steps.replaced_directory) in final, "re-added with its new directory id"
    for model, history in ((TopicModel(), run.topics), (OffsetModel(), run.offsets)):
        result = check(model, history.operations())
        assert result.ok, result.summary()
    check_logs([Path(node.data_dir) for node in cluster.nodes("controller")], run)


# the steps, one per round of the load -------------------------------------------------------


class MembershipSteps:
    def __init__(self, cluster: MetadataCluster, new_address: str) -> None:
        self.cluster = cluster
        self.new_address = new_address
        self.done: list[str] = []
        self.removed = -1
        self.replaced = -1
        self.replaced_directory = ""

    async def next(self, cluster: MetadataCluster, controllers: Controllers, run: Run) -> None:
        await wait_progress(run, PROGRESS_OPS)
        step = (self.add, self.remove_leader, self.replace_disk, self.re_add)[len(self.done)]
        await asyncio.to_thread(step)
        await wait_progress(run, PROGRESS_OPS)

    def add(self) -> None:
        """A new controller, formatted without voters, fetches as an observer; then it is added."""
        assert NEW_CONTROLLER_ID not in {v for v, _ in voters(self.cluster)}
        add_observer(self.cluster, NEW_CONTROLLER_ID, self.new_address)
        self.done.append("add")

    def remove_leader(self) -> None:
        leader, directory = leader_row(self.cluster)
        quorum(
            self.cluster,
            "remove-controller",
            "--controller-id",
            str(leader),
            "--controller-directory-id",
            directory,
        )
        wait_voters(self.cluster, lambda ids: leader not in ids)
        wait_until(
            lambda: leader_row(self.cluster)[0] != leader,
            timeout_s=CHANGE_TIMEOUT_S,
            what=f"a leader other than the removed {leader}",
        )
        self.removed = leader
        self.done.append("remove-leader")

    def replace_disk(self) -> None:
        """Kill a follower voter, lose its disk, format a new one: it comes back as an
        observer with a new directory id, never counted as the voter it was."""
        leader, _ = leader_row(self.cluster)
        victim, old_directory = next(
            (v, d) for v, d in sorted(voters(self.cluster)) if v not in (leader, NEW_CONTROLLER_ID)
        )
        node = self.cluster.node(victim)
        self.cluster.kill(victim)
        shutil.rmtree(node.data_dir)
        storage_format(node.config, local.load(self.cluster.dir).cluster_id)
        new_directory = meta.read_meta(Path(node.data_dir)).directory_id
        assert new_directory != old_directory
        self.cluster.up()
        wait_until(
            lambda: victim in observers(self.cluster),
            timeout_s=CHANGE_TIMEOUT_S,
            what=f"controller {victim} with its new disk to fetch as an observer",
        )
        assert (victim, old_directory) in voters(self.cluster), "the old voter entry stays until removed"
        quorum(
            self.cluster,
            "remove-controller",
            "--controller-id",
            str(victim),
            "--controller-directory-id",
            old_directory,
        )
        wait_voters(self.cluster, lambda ids: victim not in ids)
        quorum(self.cluster, "add-controller", "--controller", node.address)
        wait_until(
            lambda: (victim, new_directory) in voters(self.cluster),
            timeout_s=CHANGE_TIMEOUT_S,
            what=f"controller {victim} to be a voter with directory {new_directory}",
        )
        self.replaced, self.replaced_directory = victim, new_directory
        self.done.append("replace-disk")

    def re_add(self) -> None:
        """The controller that removed itself kept running as an observer: add it back."""
        quorum(self.cluster, "add-controller", "--controller", self.cluster.node(self.removed).address)
        wait_voters(self.cluster, lambda ids: self.removed in ids)
        self.done.append("re-add")


# the cluster, through the operator's commands -------------------------------------------------


def format_dynamic(cluster: MetadataCluster) -> None:
    """Format every node afresh: the controllers as a dynamic quorum of the three."""
    cluster_id = local.load(cluster.dir).cluster_id
    controllers = cluster.nodes("controller")
    initial = ",".join(f"{n.id}@{n.address}:{meta.new_directory_id()}" for n in controllers)
    for node in cluster.nodes():
        shutil.rmtree(node.data_dir)
        extra = ("--initial-controllers", initial) if node.role == local.CONTROLLER else ()
        storage_format(node.config, cluster_id, *extra)


def add_controller_node(cluster: MetadataCluster, node_id: int) -> str:
    """Write and format one more controller, listed in cluster.json (``cluster up`` starts
    it); its address."""
    template = cluster.nodes("controller")[0]
    (port,) = free_ports(1)
    node_dir = cluster.dir.absolute() / f"node-{node_id}"
    node_dir.mkdir()
    config = dataclasses.replace(
        load_config(template.config),
        node_id=node_id,
        data_dir=node_dir / "data",
        listener=f"127.0.0.1:{port}",
        metrics=MetricsConfig(port=0),
    )
    config_path = node_dir / "server.toml"
    config_path.write_text(render_toml(config), encoding="utf-8")
    storage_format(str(config_path), local.load(cluster.dir).cluster_id)
    state = local.load(cluster.dir)
    state.nodes.append(
        local.NodeRecord(
            id=node_id,
            role=local.CONTROLLER,
            address=config.listener,
            data_dir=str(config.data_dir),
            config=str(config_path),
            log=str(node_dir / "server.log"),
        )
    )
    local.save(state)
    return config.listener


def add_observer(cluster: MetadataCluster, node_id: int, address: str) -> None:
    """Once controller ``node_id`` fetches as an observer, add it as a voter."""
    wait_until(
        lambda: node_id in observers(cluster),
        timeout_s=CHANGE_TIMEOUT_S,
        what=f"controller {node_id} to fetch as an observer",
    )
    quorum(cluster, "add-controller", "--controller", address)
    wait_voters(cluster, lambda ids: node_id in ids)


def storage_format(config: str, cluster_id: str, *extra: str) -> None:
    done = subprocess.run(
        [*RAFTKA, "storage", "format", "--config", config, "--cluster-id", cluster_id, *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"storage format failed: {done.stderr.strip()}"


def quorum(cluster: MetadataCluster, *args: str) -> Any:
    out = cluster.raftka(
        "quorum", *args, "--timeout-s", str(FIND_TIMEOUT_S), "--output", "json", timeout_s=120
    )
    return json.loads(out)


def replication(cluster: MetadataCluster) -> list[dict[str, Any]]:
    return quorum(cluster, "describe", "--replication")


def voters(cluster: MetadataCluster) -> set[tuple[int, str]]:
    return {(r["node_id"], r["directory_id"]) for r in replication(cluster) if r["status"] != "Observer"}


def observers(cluster: MetadataCluster) -> set[int]:
    return {r["node_id"] for r in replication(cluster) if r["status"] == "Observer"}


def leader_row(cluster: MetadataCluster) -> tuple[int, str]:
    (row,) = [r for r in replication(cluster) if r["status"] == "Leader"]
    return row["node_id"], row["directory_id"]


def wait_voters(cluster: MetadataCluster, ok: Any) -> None:
    wait_until(
        lambda: ok({v for v, _ in voters(cluster)}),
        timeout_s=CHANGE_TIMEOUT_S,
        what="the voter set change",
        detail=lambda: voters(cluster),
    )
