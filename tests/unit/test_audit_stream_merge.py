"""The walk and merge the job runs in a task per node and as streams on the driver give what
the walk and merge of every head in memory gave (``audit_reference``, the code they replaced):
the same violations in the same order, the same chosen copy of every batch (as runs), the same
gaps, voters and uncommitted leader changes; on hand-made heads that rewind, diverge, repeat,
leave gaps, hold damage and snapshots, and on histories the controller's code writes."""

from __future__ import annotations

import shutil
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftka.audit.decode import DAMAGED, LEADER_CHANGE, SNAPSHOT_KIND
from raftka.audit.files import discover
from raftka.audit.merge import MergeResult
from raftka.audit.node_walk import merge_walked, node_groups, walk_files, walk_heads
from raftka.audit.plain import walk_and_merge
from raftka.audit.synthetic import Shape, write_history
from raftka.audit.walk import Head, read_heads
from raftka.raft.snapshot_schedule import SnapshotPolicy
from raftka.raft.storage import layout
from tests.unit import audit_reference as reference
from tests.unit.audit_incident import build_incident
from tests.unit.storage_support import flip_byte, memory_folder

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VOTERS = [1, 2, 3]
NODES = ("1", "2", "3", "101")  # 101: an observer
SMALL = Shape(brokers=3, topics=3, partitions=2, groups=2, commit_partitions_max=4)


def _folder() -> AbstractContextManager[Path]:
    return memory_folder("audit-stream-")


@st.composite
def _history(draw: st.DrawFn) -> list[tuple[int, int, int, int | None]]:
    """(base offset, records, epoch, leader of a LeaderChange or None) per batch."""
    batches, offset, epoch = [], draw(st.integers(0, 3)), 0
    for _ in range(draw(st.integers(1, 25))):
        new_epoch = not batches or draw(st.integers(0, 5)) == 0
        epoch += new_epoch
        records = 1 if new_epoch else draw(st.integers(1, 3))
        batches.append((offset, records, epoch, draw(st.sampled_from(VOTERS)) if new_epoch else None))
        offset += records
    return batches


def _head(node: str, seq: int, position: int | None, **fields: Any) -> Head:
    values = dict(node=node, file=f"n{node}-{seq}", file_seq=seq, source="segment", position=position, kind="DATA",
                  batch_offset=None, batch_records=1, batch_crc=None, offset=None, epoch=0, timestamp_ms=0,
                  type="TOPIC_RECORD", leader=None, voters=None, json=None, error=None, torn_tail=False)  # fmt: skip
    return Head(**(values | fields))


def _batch(node: str, seq: int, position: int, batch: tuple[int, int, int, int | None], variant: int) -> Head:
    """A batch of the history, or (``variant`` > 0) a different batch at its offset: another
    epoch, another CRC, another length (an old leader's tail, a diverging copy)."""
    base, records, epoch, leader = batch
    if variant:  # 4: the same epoch, another CRC (equal candidates but for the copies that hold them)
        epoch, records, leader = max(0, epoch + {1: -1, 2: 1, 3: 1, 4: 0}[variant]), records + (variant == 3), None
    voters = ([1, 2, 3] if variant != 2 else [1, 2, 4]) if leader is not None else None
    kind, type_name = ("LEADER_CHANGE", LEADER_CHANGE) if leader is not None else ("DATA", "TOPIC_RECORD")
    return _head(node, seq, position, kind=kind, type=type_name, batch_offset=base, batch_records=records,
                 batch_crc=hash((base, records, epoch, variant)) & 0xFFFF, offset=base, epoch=epoch,
                 timestamp_ms=1_000 + base, leader=leader, voters=voters)  # fmt: skip


@st.composite
def _node_files(
    draw: st.DrawFn, node: str, history: list[tuple[int, int, int, int | None]]
) -> list[list[Head]]:
    """A node's files in history order: slices of the history that overlap (a rewind), leave
    gaps, hold other copies, repeat a batch, hold damage; or a snapshot."""
    files: list[list[Head]] = []
    for seq in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 5)) == 0:
            base, _, epoch, _ = draw(st.sampled_from(history))
            files.append([_head(node, seq, None, source="snapshot", kind=SNAPSHOT_KIND, batch_offset=base,
                                batch_records=3, offset=base, epoch=epoch, type="BROKER_RECORD")])  # fmt: skip
            continue
        start = draw(st.integers(0, len(history) - 1))
        end = draw(st.integers(start, len(history)))
        heads: list[Head] = []
        for index in range(start, end):
            variant = draw(st.sampled_from((0,) * 6 + (1, 2, 3, 4, 4)))
            if draw(st.integers(0, 9)) == 0:
                heads.append(_head(node, seq, len(heads) * 100, type=DAMAGED, kind=None, error="bad crc"))
            heads.append(_batch(node, seq, len(heads) * 100, history[index], variant))
            if draw(st.integers(0, 19)) == 0:  # written again in the same file
                heads.append(_batch(node, seq, len(heads) * 100, history[index], 0))
        files.append(heads)
    return files


Cluster = list[tuple[str, list[list[Head]]]]  # each node's files, in the input's order


@st.composite
def _cluster(draw: st.DrawFn) -> Cluster:
    history = draw(_history())
    nodes = draw(st.lists(st.sampled_from(NODES), min_size=1, max_size=4, unique=True))
    return [(node, draw(_node_files(node, history))) for node in nodes]


def _job(cluster: Cluster, folder: Path, rows_per_group: int) -> tuple[list[dict[str, Any]], MergeResult]:
    """The job's walk and merge of these heads: a walk per node (as its task, holding
    ``rows_per_group`` copies at a time), merged as streams."""
    places, place = [], 0
    for _, files in cluster:
        places.append(list(enumerate(files, start=place)))
        place += len(files)
    walked = [walk_heads(mine, folder / f"copies-{node}.parquet", rows_per_group)
              for (node, _), mine in sorted(zip(cluster, places, strict=True))]  # fmt: skip
    violations, _, merged = merge_walked(walked, place)
    return violations, merged


def _same(
    old: tuple[list[dict[str, Any]], Any], new: tuple[list[dict[str, Any]], MergeResult], heads: list[Head]
) -> None:
    (old_violations, old_merged), (violations, merged) = old, new
    assert violations == old_violations
    assert reference.expand(merged.chosen, heads) == old_merged.chosen
    assert merged.uncommitted_leader_changes == old_merged.uncommitted_leader_changes
    assert (merged.start_offset, merged.end_offset, merged.gaps, merged.voters) == (
        old_merged.start_offset,
        old_merged.end_offset,
        old_merged.gaps,
        old_merged.voters,
    )


def _runs_break_at_snapshots(merged: MergeResult, snapshot_offsets: set[int]) -> None:
    """No chosen run holds batches on both sides of a snapshot's offset: a piece of the replay
    starts at any of them."""
    for run in merged.chosen:
        assert not any(run.base_offset < s <= run.last_base for s in snapshot_offsets), run


@SETTINGS
@given(cluster=_cluster(), rows_per_group=st.integers(1, 6))
def test_the_streaming_walk_and_merge_give_what_the_walk_and_merge_in_memory_gave(
    cluster: Cluster, rows_per_group: int
) -> None:
    heads = [h for _, files in cluster for file in files for h in file]
    old = reference.walk_and_merge(heads)
    _same(old, walk_and_merge(heads), heads)
    with _folder() as folder:
        new = _job(cluster, folder, rows_per_group)
    _same(old, new, heads)
    _runs_break_at_snapshots(new[1], {h.batch_offset for h in heads if h.kind == SNAPSHOT_KIND})


def _job_on_files(root: Path, scratch: Path) -> tuple[list[dict[str, Any]], MergeResult]:
    files = discover([root])
    violations, _, merged = merge_walked(
        [walk_files(node, str(scratch)) for node in node_groups(files)], len(files)
    )
    return violations, merged


def _check_files(root: Path, scratch: Path) -> None:
    heads = [Head._make(h) for h in read_heads(discover([root]))]
    _same(reference.walk_and_merge(heads), _job_on_files(root, scratch), heads)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), nodes=st.integers(1, 3), interval=st.integers(30, 300),
       damage=st.booleans(), missing=st.booleans())  # fmt: skip
def test_the_job_walks_and_merges_written_histories_as_before(
    seed: int, nodes: int, interval: int, damage: bool, missing: bool
) -> None:
    """Snapshots, archives, several nodes, a damaged byte, a missing segment."""
    with _folder() as root:
        for node in range(1, nodes + 1):
            write_history(root / f"node-{node}" / "data", 500, seed=seed, node_id=node, shape=SMALL,
                          snapshot_policy=SnapshotPolicy(snapshot_interval_records=interval * node),
                          segment_bytes=2_000, archive=node != 2)  # fmt: skip
        segments = [
            p
            for p in layout.history_files(root / "node-1" / "data")
            if p.name.endswith(layout.SEGMENT_SUFFIX)
        ]
        if damage:
            flip_byte(segments[len(segments) // 2], 60)
        if missing and len(segments) > 2:
            segments[1].unlink()
        _check_files(root, root / "scratch")


def test_the_job_walks_and_merges_the_incident_as_before(tmp_path: Path) -> None:
    """Diverging uncommitted tails, a torn tail, damaged files."""
    incident = build_incident(tmp_path / "incident")
    _check_files(incident.root, tmp_path / "scratch")
    shutil.rmtree(tmp_path / "scratch")
