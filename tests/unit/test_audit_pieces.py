"""The replay in pieces read straight from the files (what the Spark job's tasks run), without
a JVM: any number of pieces gives exactly the events of one replay of the whole history,
and the canonical records' columns are those of the chosen copies' decoded rows."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftka.audit import pieces as pieces_module
from raftka.audit.commits import PROGRESS_BUCKETS, committed_over_time
from raftka.audit.counts import Counts, bucket_ms
from raftka.audit.decode import SNAPSHOT_KIND
from raftka.audit.event_tables import CONFIG_COLUMNS, EVENT_TABLES, TRANSITION_COLUMNS
from raftka.audit.files import SEGMENT, SNAPSHOT, AuditInputError, discover
from raftka.audit.pieces import (
    CANONICAL_COLUMNS,
    EPOCH_COUNTS,
    EVENTS,
    FOLDS,
    OPENED,
    PROGRESS,
    RATE,
    Piece,
    plan,
    replay_piece,
    run_piece,
)
from raftka.audit.plain import PlainAudit, audit_paths, in_chosen
from raftka.audit.replay import BASE, CONFIG, TRANSITION
from raftka.audit.synthetic import Shape, write_history
from raftka.audit.walk import is_head
from raftka.metadata import records
from raftka.raft.batch import Batch, BatchKind
from raftka.raft.snapshot_schedule import SnapshotPolicy
from tests.unit import metadata_support as m
from tests.unit.audit_incident import Incident, build_incident
from tests.unit.commits_reference import combine, unfold
from tests.unit.storage_support import flip_byte, memory_folder

SMALL = Shape(brokers=3, topics=3, partitions=2, groups=2, commit_partitions_max=4)


def _folder() -> AbstractContextManager[Path]:
    return memory_folder("audit-pieces-")


def _plan(root: Path, count: int) -> tuple[PlainAudit, list[Piece]]:
    """The plain audit of ``root``, and the job's plan of ``count`` pieces (more if long)."""
    audited = audit_paths([root])
    pieces = plan(discover([root]), audited.merged.chosen, _snapshots(audited), audited.merged.start_offset or 0,
                  count)  # fmt: skip
    return audited, pieces


def _snapshots(audited: PlainAudit) -> list[tuple[str, int, int]]:
    heads = [r for r in audited.rows if is_head(r) and r.batch_offset is not None]
    return [(r.node, r.file_seq, r.offset) for r in heads if r.kind == SNAPSHOT_KIND]


def _pieces(
    root: Path, out: Path, count: int
) -> tuple[PlainAudit, list[dict[str, Any]], list[tuple[Any, ...]]]:
    """The plain audit of ``root``, and the events and canonical rows of ``count`` pieces
    (whose event tables are checked against their events on the way)."""
    audited, pieces = _plan(root, count)
    events: list[dict[str, Any]] = []
    canonical: list[tuple[Any, ...]] = []
    for piece in pieces:
        run_piece(piece, str(out))
        mine = _read(out / EVENTS, piece)
        _check_event_tables(mine, {table: _read(out / table, piece) for table in EVENT_TABLES})
        events += mine
        canonical += [tuple(r.values()) for _, rows in replay_piece(piece) for r in rows.to_pylist()]
    return audited, events, canonical


def _read(folder: Path, piece: Piece) -> list[dict[str, Any]]:
    """The rows ``piece`` wrote to ``folder``, its chunks' files in order."""
    return [row for path in sorted(folder.glob(f"piece-{piece.index:05d}-*.parquet"))
            for row in pq.read_table(path).to_pylist()]  # fmt: skip


def _check_event_tables(events: list[dict[str, Any]], parts: dict[str, list[dict[str, Any]]]) -> None:
    """A piece's part of each event table is its events of that kind, projected."""
    assert parts["partition_transitions"] == [
        {c: e[c] for c in TRANSITION_COLUMNS} for e in events if e["event"] == TRANSITION
    ]
    assert parts["config_history"] == [
        {c: e[c] for c in CONFIG_COLUMNS} | {"operation": "DELETE" if e["value_after"] is None else "SET"}
        for e in events
        if e["event"] == CONFIG
    ]


def _chosen_rows(audited: PlainAudit) -> list[tuple[Any, ...]]:
    chosen = in_chosen(audited.merged.chosen)
    rows = [r for r in audited.rows if r.source == SEGMENT and r.batch_offset is not None and chosen(r)]
    return [tuple(getattr(r, c) for c in CANONICAL_COLUMNS) for r in sorted(rows, key=lambda r: r.offset)]


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Incident:
    return build_incident(tmp_path_factory.mktemp("incident"))


@pytest.mark.parametrize("count", [1, 2, 5])
def test_the_incident_in_pieces(incident: Incident, tmp_path: Path, count: int) -> None:
    audited, events, canonical = _pieces(incident.root, tmp_path, count)
    assert events == audited.events
    assert canonical == _chosen_rows(audited)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32),
    nodes=st.integers(1, 3),
    interval=st.integers(30, 200),
    count=st.integers(1, 8),
)
def test_any_number_of_pieces_gives_the_events_of_one_replay(
    seed: int, nodes: int, interval: int, count: int
) -> None:
    with _folder() as root:
        for node in range(1, nodes + 1):
            write_history(root / f"node-{node}" / "data", 600, seed=seed, node_id=node, shape=SMALL,
                          snapshot_policy=SnapshotPolicy(snapshot_interval_records=interval * node),
                          segment_bytes=3_000, archive=node != 2)  # fmt: skip
        audited, events, canonical = _pieces(root, root / "out", count)
        assert events == audited.events
        assert canonical == _chosen_rows(audited)


def test_a_file_changed_after_the_heads_were_read_is_named(tmp_path: Path) -> None:
    data_dir = tmp_path / "node-1" / "data"
    write_history(
        data_dir, 300, shape=SMALL, snapshot_policy=SnapshotPolicy(snapshot_interval_records=1 << 40)
    )
    audited = audit_paths([tmp_path])
    [piece] = plan(discover([tmp_path]), audited.merged.chosen, [], 0, 4)
    segment = piece.runs[0].file.path
    flip_byte(Path(segment), 40)
    with pytest.raises(AuditInputError, match="changed while it was audited"):
        run_piece(piece, str(tmp_path / "out"))


class _SkipCommits:
    """Every ``every``-th batch of several offset commits ends with a commit to an unknown
    topic: every node skips it, its valid commits with it (they must not be folded)."""

    def __init__(self, every: int) -> None:
        self.every, self.seen = every, 0

    def __call__(self, batch: Batch) -> Batch:
        if batch.kind != BatchKind.DATA or len(batch.records) < 2:
            return batch
        if any(records.decode(raw).WhichOneof("record") != "offset_commit" for raw in batch.records):
            return batch
        self.seen += 1
        if self.seen % self.every:
            return batch
        unknown = records.encode(m.commit("g", m.topic_id(0xDEAD), 0, 1))
        return Batch(
            batch.base_offset, batch.epoch, batch.timestamp_ms, batch.kind, (*batch.records[:-1], unknown)
        )


def _outcome(piece: Piece, out: Path) -> dict[str, Any]:
    """All that ``piece`` hands on, however it was chunked: its files' rows and what the
    driver makes of its folds and counts."""
    done = run_piece(piece, str(out))
    counts = Counts().add(done["bounds"])
    _, _, start_ms, end_ms, _ = counts.bounds()
    folds, progress = ([pq.read_table(path) for path in sorted((out / folder).glob(f"piece-{piece.index:05d}-*"))]
                       for folder in (FOLDS, PROGRESS))  # fmt: skip
    assert len(folds) == len(progress) == len(done["bounds"])  # a fold per chunk
    folded = [unfold(fold, moved) for fold, moved in zip(folds, progress, strict=True)]
    commits = combine(folded, bucket_ms(start_ms, end_ms, PROGRESS_BUCKETS))
    return {
        "files": {folder: _read(out / folder, piece) for folder in (EVENTS, *EVENT_TABLES)},
        "done": {k: done[k] for k in ("records", "events", "skipped")},
        "series": sorted(commits.rows, key=lambda row: row[:3]),  # group_offsets orders them
        "committed": committed_over_time(commits.progress),
        "epochs": _per_epoch(_read(out / EPOCH_COUNTS, piece)),
        "opened": _read(out / OPENED, piece),
        "bounds": counts.bounds(),
        "rate": _rate(_read(out / RATE, piece), bucket_ms(start_ms, end_ms)),
    }


def _rate(chunks: list[dict[str, Any]], width: int) -> dict[tuple[int, str], int]:
    """The chunks' write rates added up at ``width`` as ``raftka.audit.job.per_bucket`` does."""
    rate: dict[tuple[int, str], int] = {}
    for r in chunks:
        key = (r["bucket_ms"] - r["bucket_ms"] % width, r["type"])
        rate[key] = rate.get(key, 0) + r["count"]
    return rate


def _per_epoch(chunks: list[dict[str, Any]]) -> dict[int, tuple[int, ...]]:
    """The chunks' counts per epoch added up as ``raftka.audit.tables.per_epoch`` does."""
    merged: dict[int, tuple[int, ...]] = {}
    for c in chunks:
        was = merged.get(c["epoch"])
        now = (c["start_offset"], c["end_offset"], c["first_ms"], c["last_ms"], c["records"])
        merged[c["epoch"]] = now if was is None else (
            min(was[0], now[0]), max(was[1], now[1]), min(was[2], now[2]), max(was[3], now[3]), was[4] + now[4]
        )  # fmt: skip
    return merged


@pytest.mark.parametrize("chunk", [1, 37, 400])
def test_a_piece_in_chunks_gives_what_it_gives_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Chunks are finer cuts of the history: the events, event tables, commit folds and counts
    of a piece are those of the piece replayed whole, skipped batches' commits left out and
    the snapshots at its end compared across the chunks."""
    root = tmp_path / "history"
    for node in (1, 2):
        write_history(root / f"node-{node}" / "data", 2_000, seed=7, node_id=node, shape=SMALL,
                      snapshot_policy=SnapshotPolicy(snapshot_interval_records=300 * node), segment_bytes=3_000,
                      mutate=_SkipCommits(4))  # fmt: skip
    _, pieces = _plan(root, 3)
    whole = [_outcome(piece, tmp_path / "whole") for piece in pieces]
    assert sum(w["done"]["skipped"] for w in whole) > 1
    assert any(w["series"] for w in whole)
    monkeypatch.setattr(pieces_module, "CHUNK_RECORDS", chunk)
    assert [_outcome(piece, tmp_path / "chunked") for piece in pieces] == whole
    assert len(list((tmp_path / "chunked" / EVENTS).glob("*.parquet"))) > len(pieces)
    for piece in pieces:  # a chunk ends with the batch that brings it to ``chunk`` records
        offsets = [rows.column("batch_offset").to_pylist() for _, rows in replay_piece(piece)]
        assert all(mine.index(mine[-1]) < chunk <= len(mine) for mine in offsets[:-1])


def test_a_long_history_is_cut_into_more_pieces_at_its_snapshots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No more than about ``PIECE_RECORDS_MAX`` records a piece, about equal, each cut at a
    snapshot (the next piece starts from it), and still the events of one replay."""
    write_history(tmp_path / "node-1" / "data", 3_000, shape=SMALL,
                  snapshot_policy=SnapshotPolicy(snapshot_interval_records=100))  # fmt: skip
    monkeypatch.setattr(pieces_module, "PIECE_RECORDS_MAX", 500)
    audited, pieces = _plan(tmp_path, 2)
    snapshot_at = {(node, seq): offset for node, seq, offset in _snapshots(audited)}
    offsets = sorted(set(snapshot_at.values()))
    spacing = max(b - a for a, b in zip(offsets, offsets[1:], strict=False))
    starts = [0]
    for piece in pieces[1:]:
        base = piece.runs[0]
        assert base.role == BASE and base.file.source == SNAPSHOT
        starts.append(snapshot_at[(base.file.node, base.file.seq)])
    sizes = [b - a for a, b in zip(starts, [*starts[1:], audited.merged.end_offset], strict=True)]
    assert len(pieces) >= audited.merged.end_offset // 500 and max(sizes) <= 500 + spacing
    assert min(sizes) >= audited.merged.end_offset // len(pieces) - spacing
    _, events, _ = _pieces(tmp_path, tmp_path / "out", 2)
    assert events == audited.events


def test_no_cut_where_there_is_no_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the last snapshot a long stretch stays one piece (its chunks bound what it holds);
    without snapshots the whole history is one piece."""
    write_history(tmp_path / "node-1" / "data", 3_000, shape=SMALL,
                  snapshot_policy=SnapshotPolicy(snapshot_interval_records=100))  # fmt: skip
    monkeypatch.setattr(pieces_module, "PIECE_RECORDS_MAX", 500)
    audited = audit_paths([tmp_path])
    files, chosen = discover([tmp_path]), audited.merged.chosen
    early = [s for s in _snapshots(audited) if s[2] < 1_000]
    pieces = plan(files, chosen, early, 0, 2)
    assert 1 < len(pieces) <= len(early) + 1
    last, at = pieces[-1].runs[0], max(offset for _, _, offset in early)
    assert last.role == BASE and (last.file.node, last.file.seq, at) in early
    assert sum(run.batches for run in pieces[-1].runs) == sum(
        c.batches for c in chosen if c.base_offset >= at
    )
    [whole] = plan(files, chosen, [], 0, 2)
    assert sum(run.batches for run in whole.runs) == sum(c.batches for c in chosen)
