"""meta.properties: formatting binds a data dir to one cluster and node, and is checked at start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from raftka.raft.storage import layout
from raftka.raft.storage.base import NotFormattedError, StorageError
from raftka.raft.storage.file import FileStorage
from raftka.raft.storage.meta import (
    MetaProperties,
    check_meta,
    format_storage,
    new_cluster_id,
    read_bootstrap_voters,
    read_meta,
    validate_cluster_id,
)
from raftka.raft.storage.quorum_file import QuorumStateFile
from raftka.raft.voters import Voter, VoterSet

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"


def test_format_writes_kafka_style_properties(tmp_path: Path) -> None:
    data_dir = tmp_path / "node-1"
    assert format_storage(data_dir, CLUSTER, 1) is True
    lines = (data_dir / "meta.properties").read_text().splitlines()
    directory_id = read_meta(data_dir).directory_id
    assert len(directory_id) == 22  # a random Uuid, as Kafka writes directory.id (KIP-858)
    assert [line for line in lines if not line.startswith("#")] == [
        "version=1",
        f"cluster.id={CLUSTER}",
        "node.id=1",
        f"directory.id={directory_id}",
    ]
    assert read_meta(data_dir) == MetaProperties(CLUSTER, 1, directory_id=directory_id)


def test_every_format_gives_the_directory_a_new_id(tmp_path: Path) -> None:
    """A replaced disk, formatted again, is a new replica (KIP-853)."""
    format_storage(tmp_path / "a", CLUSTER, 1)
    format_storage(tmp_path / "b", CLUSTER, 1)
    assert read_meta(tmp_path / "a").directory_id != read_meta(tmp_path / "b").directory_id


def test_a_directory_formatted_before_directory_ids_still_reads(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(f"version=1\ncluster.id={CLUSTER}\nnode.id=1\n")
    assert read_meta(tmp_path) == MetaProperties(CLUSTER, 1)


def test_bootstrap_voters_give_the_node_its_directory_id_and_may_vote_at_once(tmp_path: Path) -> None:
    voters = VoterSet([Voter(1, "AAAAAAAAAAAAAAAAAAAAAA", ("h1:9091",)), Voter(2, "BBBBBBBBBBBBBBBBBBBBBB")])
    assert format_storage(tmp_path, CLUSTER, 2, bootstrap_voters=voters) is True
    assert read_meta(tmp_path).directory_id == "BBBBBBBBBBBBBBBBBBBBBB"
    assert read_bootstrap_voters(tmp_path) == voters
    state = QuorumStateFile(layout.log_dir(tmp_path) / layout.QUORUM_STATE_FILE)
    assert state.load().recovering is False
    state.close()


def test_formatting_again_with_the_same_values_is_a_no_op(tmp_path: Path) -> None:
    format_storage(tmp_path, CLUSTER, 1)
    before = (tmp_path / "meta.properties").stat().st_mtime_ns
    assert format_storage(tmp_path, CLUSTER, 1) is False
    assert (tmp_path / "meta.properties").stat().st_mtime_ns == before


@pytest.mark.parametrize(("cluster_id", "node_id"), [("other-cluster", 1), (CLUSTER, 2)])
def test_reformatting_with_other_values_is_refused(tmp_path: Path, cluster_id: str, node_id: int) -> None:
    format_storage(tmp_path, CLUSTER, 1)
    with pytest.raises(StorageError, match=f"already formatted for cluster.id={CLUSTER} node.id=1"):
        format_storage(tmp_path, cluster_id, node_id)
    assert format_storage(tmp_path, cluster_id, node_id, ignore_formatted=True) is False
    assert read_meta(tmp_path) == MetaProperties(CLUSTER, 1)


@pytest.mark.parametrize("bad", ["", "a" * 65, "has space", "slash/", "dot.ted", "é"])
def test_invalid_cluster_ids_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="invalid cluster id"):
        format_storage(tmp_path, bad, 1)
    assert not (tmp_path / "meta.properties").exists()


def test_negative_node_ids_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid node id"):
        format_storage(tmp_path, CLUSTER, -1)


def test_new_cluster_ids_look_like_kafkas() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id) and not cluster_id.startswith("-")
        validate_cluster_id(cluster_id)


def test_check_meta_on_unformatted_storage_says_how_to_format(tmp_path: Path) -> None:
    with pytest.raises(NotFormattedError) as error:
        check_meta(tmp_path, 1)
    assert str(error.value) == (
        f"storage at {tmp_path} is not formatted: run `raftka storage format --config FILE --cluster-id ID`"
    )


def test_check_meta_refuses_another_nodes_or_clusters_storage(tmp_path: Path) -> None:
    format_storage(tmp_path, CLUSTER, 1)
    assert check_meta(tmp_path, 1) == check_meta(tmp_path, 1, CLUSTER) == MetaProperties(CLUSTER, 1)
    with pytest.raises(StorageError, match="formatted for node.id=1 but this node is node.id=2"):
        check_meta(tmp_path, 2)
    with pytest.raises(StorageError, match=f"belongs to cluster {CLUSTER}, not abc"):
        check_meta(tmp_path, 1, "abc")


def test_reads_what_kafka_writes(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "#\n#Tue Mar 05 10:00:00 UTC 2024\nnode.id = 3\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\n"
        f"! a comment\nversion=1\ncluster.id={CLUSTER}\n"
    )
    assert read_meta(tmp_path) == MetaProperties(CLUSTER, 3)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("version=1\nnode.id=1\n", "damaged"),
        (f"version=1\ncluster.id={CLUSTER}\nnode.id=one\n", "damaged"),
        (f"version=0\ncluster.id={CLUSTER}\nnode.id=1\n", "version 0"),
    ],
)
def test_damaged_meta_properties_are_refused(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "meta.properties").write_text(text)
    with pytest.raises(StorageError, match=problem):
        read_meta(tmp_path)


def test_only_an_initial_cluster_member_may_vote_before_catching_up(tmp_path: Path) -> None:
    format_storage(tmp_path / "new", "cluster-a", 1, initial_cluster=True)
    format_storage(tmp_path / "rejoining", "cluster-a", 2)
    assert FileStorage(tmp_path / "new").load().quorum_state.recovering is False
    assert FileStorage(tmp_path / "rejoining").load().quorum_state.recovering is True
