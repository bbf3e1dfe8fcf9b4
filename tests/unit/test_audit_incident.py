"""The audit's ordered steps on the incident fixture (``audit_incident``), without a JVM:
the exact transitions, broker events and violations the story must produce."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from raftka.audit.decode import DAMAGED, UNREADABLE, decode_file
from raftka.audit.files import AuditInputError, discover, local_path, pack
from raftka.audit.plain import PlainAudit, audit_paths
from raftka.audit.walk import HEAD_COLUMNS, Head, check_readable, is_head, read_heads
from raftka.metadata.records import topic_id_str
from tests.unit import metadata_support as m
from tests.unit.audit_incident import ORDERS, Incident, build_incident


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Incident:
    return build_incident(tmp_path_factory.mktemp("incident"))


@pytest.fixture(scope="module")
def audited(incident: Incident) -> PlainAudit:
    return audit_paths([incident.root])


def _transitions(audited: PlainAudit) -> list[tuple]:
    return [
        (
            e["offset"],
            e["topic"],
            e["partition"],
            e["cause"],
            e["leader_before"],
            e["leader_after"],
            e["isr_after"],
            e["clean"],
        )  # fmt: skip
        for e in audited.events
        if e["event"] == "TRANSITION"
    ]


def test_files_are_found_per_node_archive_first(incident: Incident) -> None:
    files = discover([incident.root])
    assert sorted({f.node for f in files}) == ["1", "2", "3"]
    node1 = [f for f in files if f.node == "1"]
    assert [f.seq for f in node1] == list(range(len(node1)))
    assert node1[0].archived and not node1[-1].archived
    assert [f.source for f in node1 if not f.archived][0] == "snapshot"  # the installed snapshot leads
    assert sum(f.newest_segment for f in node1) == 1


def test_every_partition_transition_of_the_story(incident: Incident, audited: PlainAudit) -> None:
    o = incident.offsets
    assert _transitions(audited) == [
        (o["create-orders"] + 1, "orders", 0, "create", None, 101, [101, 102, 103], None),
        (o["create-orders"] + 2, "orders", 1, "create", None, 102, [102, 103, 101], None),
        (o["create-events"] + 1, "events", 0, "create", None, 103, [103, 101], None),
        (o["fence-101"], "orders", 0, "election", 101, 102, [102, 103], True),
        (o["fence-101"] + 1, "orders", 1, "isr_shrink", 102, 102, [102, 103], None),
        (o["fence-101"] + 2, "events", 0, "isr_shrink", 103, 103, [103], None),
        (o["shrink-orders-1"], "orders", 1, "isr_shrink", 102, 102, [102], None),
        (o["fence-103"], "orders", 0, "isr_shrink", 102, 102, [102], None),
        (o["fence-103"] + 1, "events", 0, "offline", 103, -1, [103], None),
        (o["unfence-103"] + 1, "events", 0, "election", -1, 103, [103], True),
        (o["expand-orders-0"], "orders", 0, "isr_expand", 102, 102, [102, 101], None),
        (o["preferred-orders-0"], "orders", 0, "election", 102, 101, [102, 101], True),
        (o["delete-events"], "events", 0, "delete", 103, None, None, None),
        (o["reuse-events"] + 1, "events", 0, "create", None, 102, [102], None),
    ]


def test_partition_states_after_each_transition(incident: Incident, audited: PlainAudit) -> None:
    flags = {
        (e["offset"], e["topic"], e["partition"]): (
            e["offline"],
            e["under_replicated"],
            e["under_min_isr"],
            e["non_preferred"],
        )
        for e in audited.events
        if e["event"] == "TRANSITION"
    }
    o = incident.offsets
    assert flags[(o["fence-101"], "orders", 0)] == (False, True, False, True)  # led by 102, not preferred 101
    assert flags[(o["shrink-orders-1"], "orders", 1)] == (False, True, True, False)  # ISR 1 < min 2
    assert flags[(o["fence-103"] + 1, "events", 0)] == (True, True, False, False)
    assert flags[(o["preferred-orders-0"], "orders", 0)] == (False, True, False, False)


def test_broker_events_restarts_and_what_fenced_brokers_led(incident: Incident, audited: PlainAudit) -> None:
    o = incident.offsets
    brokers = [(e["offset"], e["broker"], e["cause"], e["fenced"], e["partitions_led"])
               for e in audited.events if e["event"] == "BROKER"]  # fmt: skip
    assert brokers == [
        (o["register-101"], 101, "REGISTER", True, 0),
        (o["register-102"], 102, "REGISTER", True, 0),
        (o["register-103"], 103, "REGISTER", True, 0),
        (o["unfence"], 101, "UNFENCE", False, 0),
        (o["unfence"] + 1, 102, "UNFENCE", False, 0),
        (o["unfence"] + 2, 103, "UNFENCE", False, 0),
        (o["fence-101"] + 3, 101, "FENCE", True, 1),  # it led orders-0 when its fencing batch began
        (o["fence-103"] + 2, 103, "FENCE", True, 1),  # events-0
        (o["restart-101"], 101, "REREGISTER", True, 0),
        (o["unfence-101"], 101, "UNFENCE", False, 0),
        (o["restart-103"], 103, "REREGISTER", True, 0),
        (o["unfence-103"], 103, "UNFENCE", False, 0),
    ]


def test_topics_configs_and_the_reused_name(incident: Incident, audited: PlainAudit) -> None:
    topics = [(e["cause"], e["topic"], e["topic_id"]) for e in audited.events if e["event"] == "TOPIC"]
    assert [t[:2] for t in topics] == [
        ("CREATE", "orders"),
        ("CREATE", "events"),
        ("DELETE", "events"),
        ("CREATE", "events"),
    ]
    assert topics[1][2] != topics[3][2]  # the name came back with a new id
    configs = [
        (e["resource"], e["key"], e["value_before"], e["value_after"])
        for e in audited.events
        if e["event"] == "CONFIG"
    ]
    assert configs == [
        ("orders", "min.insync.replicas", None, "2"),
        ("orders", "retention.ms", None, "1000"),
        ("events", "retention.ms", None, "5000"),
    ]


def test_each_recorded_rebalance_is_an_event_with_its_members(
    incident: Incident, audited: PlainAudit
) -> None:
    rebalances = [
        (
            e["offset"],
            e["resource"],
            e["generation"],
            e["group_leader"],
            e["members"],
            e["count"],
            e["broker"],
        )
        for e in audited.events
        if e["event"] == "REBALANCE"
    ]
    assert rebalances == [
        (incident.offsets["rebalance-g1"], "g1", 1, "a", ["a", "b"], 2, 101),
        (incident.offsets["rebalance-g1-again"], "g1", 3, "a", ["a"], 2, 101),
    ]


def test_exactly_the_expected_violations(incident: Incident, audited: PlainAudit) -> None:
    found = sorted((v["check"], v["severity"], v["node"], v["offset"]) for v in audited.all_violations)
    assert found == [
        ("no_damage", "info", "2", None),  # node 2's torn last write
        ("nodes_agree", "info", None, incident.diverged.base_offset),  # node 1's archived uncommitted tail
    ]
    torn = next(v for v in audited.all_violations if v["check"] == "no_damage")
    assert torn["file"].endswith(".log") and torn["position"] is not None


def test_a_change_bringing_in_an_unregistered_broker_is_skipped(tmp_path: Path) -> None:
    """Orders-0's preferred election replaced by a change that adds broker 104, which never
    registered, to its replicas: every node skips that batch."""
    grow = m.change(ORDERS, 0, replicas=[101, 102, 103, 104])
    incident = build_incident(tmp_path, replace={"preferred-orders-0": (grow,)})
    violations = audit_paths([incident.root]).all_violations
    [skipped] = [v for v in violations if v["check"] == "records_replay"]
    assert (skipped["severity"], skipped["offset"]) == ("error", incident.offsets["preferred-orders-0"])
    problem = f"PartitionChangeRecord for {topic_id_str(ORDERS)}-0: broker 104 is not registered"
    assert problem in skipped["message"]


def test_the_merge_takes_the_committed_history(incident: Incident, audited: PlainAudit) -> None:
    merged = audited.merged
    assert (merged.start_offset, merged.end_offset, merged.gaps) == (0, incident.batches[-1].next_offset, [])
    assert merged.voters == [1, 2, 3]
    assert sum(c.batches for c in merged.chosen) == len(incident.batches)


def test_the_snapshot_equals_the_replay_and_damage_is_a_row(incident: Incident, audited: PlainAudit) -> None:
    assert not [v for v in audited.all_violations if v["check"] == "snapshot_equals_replay"]
    snapshot_rows = [r for r in audited.rows if r.source == "snapshot"]
    assert {r.offset for r in snapshot_rows} == {incident.snapshot_at}
    assert {r.node for r in snapshot_rows} == {"1", "2"}
    [torn] = [r for r in audited.rows if r.type == DAMAGED]
    assert torn.node == "2" and torn.torn_tail and torn.error.startswith(f"byte {torn.position}")


def test_bad_paths_are_named(tmp_path: Path, incident: Incident) -> None:
    with pytest.raises(AuditInputError, match="paths: .*does not exist"):
        discover([tmp_path / "nowhere"])
    with pytest.raises(AuditInputError, match="no __cluster_metadata-0 folder"):
        discover([tmp_path])
    with pytest.raises(AuditInputError, match="are both node 1"):
        discover([incident.node_dir(1), incident.node_dir(1).parent])
    with pytest.raises(AuditInputError, match="node: names one node"):
        discover([incident.root], node="x")


def test_paths_are_made_absolute_against_the_working_directory(
    incident: Incident, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Spark executor runs in a folder of its own (a standalone worker's work/app-.../N):
    every file it is given must be named from the root."""
    monkeypatch.chdir(incident.root / "node-2")
    files = discover([os.path.relpath(incident.root)])
    assert all(Path(f.path).is_absolute() for f in files)
    assert files == discover([incident.root])
    assert discover(["../node-1/../node-3"]) == discover([incident.root / "node-3"])
    assert local_path("a/../b:1", "paths") == incident.root / "node-2" / "b:1"  # ':' in a name is no scheme


@pytest.mark.parametrize(
    "uri", ["file:///data/node%201", "file:/data/node%201", "file://localhost/data/node%201"]
)
def test_file_uris_are_their_paths(uri: str) -> None:
    assert local_path(uri, "paths") == Path("/data/node 1")


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("hdfs://namenode:8020/raftka/collected", "local paths only"),
        ("s3a://bucket/raftka/collected", "local paths only"),
        ("file://otherhost/data", "not a local file URI"),
        ("file:data", "not a local file URI"),
    ],
)
def test_other_uris_are_refused_by_name(uri: str, why: str) -> None:
    with pytest.raises(AuditInputError, match=f"--out: {uri}.*{why}"):
        local_path(uri, "--out")
    with pytest.raises(AuditInputError, match=f"paths: {uri}"):
        discover([uri])


def test_an_unreadable_file_is_an_unreadable_row_not_damage(incident: Incident) -> None:
    [first, *_] = discover([incident.node_dir(3)])
    gone = type(first)(first.node, first.path + ".missing", 0, first.source, False, False)
    [row] = list(decode_file(gone))
    assert row.type == UNREADABLE and "cannot read" in row.error and row.file.endswith(".missing")
    assert is_head(row)


def test_a_file_that_cannot_be_read_stops_the_audit_and_is_not_damage(incident: Incident, tmp_path: Path) -> None:
    """Listed on the driver, gone (or elsewhere) where a task reads it: the audit cannot run."""
    copy = tmp_path / "copy"
    shutil.copytree(incident.root, copy)
    files = discover([copy])
    gone = Path(files[-1].path)
    gone.unlink()
    heads = [Head._make(h) for h in read_heads(files)]
    assert not [h for h in heads if h.type == DAMAGED and not h.torn_tail]
    with pytest.raises(AuditInputError, match=rf"paths: could not read 1 of the {len(files)} files \({gone}: cannot read"):
        check_readable(heads, len(files))
    shutil.rmtree(copy)
    with pytest.raises(AuditInputError, match=rf"paths: could not read any of the {len(files)} files"):
        check_readable([Head._make(h) for h in read_heads(files)], len(files))


def test_reading_heads_only_gives_the_heads_of_a_full_read(incident: Incident) -> None:
    """What the Spark job reads for the walk and the merge: each batch's first record and all
    damage (the incident has a torn tail and damaged files), as the full read finds them."""
    files = discover([incident.root])
    for file in files:
        heads = [r for r in decode_file(file, with_json=False) if is_head(r)]
        assert list(decode_file(file, with_json=False, heads_only=True)) == heads, file.path
    full = [r for f in files for r in decode_file(f, with_json=False) if is_head(r)]
    assert [Head._make(h) for h in read_heads(files)] == [
        Head(*(getattr(r, c) for c in HEAD_COLUMNS)) for r in full
    ]


def test_files_are_packed_in_order_into_partitions_of_a_byte_budget(incident: Incident) -> None:
    files = discover([incident.root])
    biggest = max(Path(f.path).stat().st_size for f in files)
    packed = pack(files, biggest)
    assert [f for group in packed for f in group] == files
    assert all(sum(Path(f.path).stat().st_size for f in group) <= biggest for group in packed)
    assert pack(files, 1) == [[f] for f in files]  # a file bigger than the budget is alone
