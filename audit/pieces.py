"""The replay in pieces, each one Spark task that reads its batches straight from the files.

The merge chose one copy of every canonical batch (``raftka.audit.merge``), as runs of
consecutive frames of one file that never cross a snapshot's offset. ``plan`` cuts that
history at snapshots into pieces of about equal size, as many as the job asks for and more
for a long history (``PIECE_RECORDS_MAX``): a piece replays the batches from one snapshot to
the next, starting from a copy of the first (role BASE) and comparing its image with every
snapshot at its end, so each snapshot is checked against the log once, as in one replay
from the start (``raftka.audit.replay``). Where there is no snapshot, there is no cut.

``run_piece`` reads its piece's files itself, decodes each record once with
``raftka.audit.decode`` (the controllers' own code) and replays it through ``MetadataDelta``: no
record crosses into the JVM, which costs more than decoding it. It holds ``CHUNK_RECORDS`` of
its records at a time, so its memory does not grow with the piece: for each chunk it writes
the events (``EVENT_SCHEMA``) as Parquet for the tables, its part of the tables that are
its events filtered (``raftka.audit.event_tables``), its offset commits folded per series
(``raftka.audit.commits``), which Spark joins (``raftka.audit.commit_job``), and its counts
and groups' progress (``raftka.audit.counts``), which Spark adds up; it hands back only each
chunk's bounds. Chunks are finer cuts of the history, joined as the pieces are.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raftka.audit import collector
from raftka.audit.commits import fold, fold_table
from raftka.audit.counts import count
from raftka.audit.decode import (
    CONTROL_TYPES,
    SNAPSHOT_KIND,
    control_columns,
    decode_record,
    snapshot_contents,
)
from raftka.audit.event_tables import event_tables
from raftka.audit.files import SNAPSHOT, AuditInputError, LogFile
from raftka.audit.merge import ChosenRun
from raftka.audit.out import write_whole
from raftka.audit.replay import BASE, EVENT_SCHEMA, SKIPPED, Batch, Record, Replay, Row
from raftka.audit.schema import ROW_SCHEMA, to_batch
from raftka.metadata.snapshot import SnapshotError
from raftka.raft.storage import batch_codec

# The canonical records' columns the tables read, typed as in ``raftka.audit.schema``.
CANONICAL_COLUMNS = ("offset", "batch_offset", "epoch", "timestamp_ms", "type", "leader", "voters", "topic_id",
                     "partition", "group", "committed_offset")  # fmt: skip
CANONICAL_SCHEMA = pa.schema([ROW_SCHEMA.field(name) for name in CANONICAL_COLUMNS])
EVENTS = "events"
FOLDS = "commit_folds"  # a Parquet file of offset-commit folds per chunk (``FOLD_SCHEMA``)
EPOCH_COUNTS = "epoch_counts"  # per chunk: its records counted per epoch (``counts.EPOCH_SCHEMA``)
OPENED = "opened_epochs"  # per chunk: its LeaderChange records (``counts.OPENED_SCHEMA``)
RATE = "write_rate"  # per chunk: its records per time bucket and type (``counts.RATE_SCHEMA``)
PROGRESS = "group_progress"  # per chunk: its groups' progress (``commits.PROGRESS_SCHEMA``)
# Records of a piece at most, where snapshots allow: a task's share of the work, and what its
# retry costs, stay small on a long history.
PIECE_RECORDS_MAX = 2_000_000
# Canonical records a piece holds at once: every this many (to the end of a batch) it writes
# the events so far and folds and counts the records, and keeps only the folds and counts.
CHUNK_RECORDS = 500_000


@dataclass(frozen=True, slots=True)
class Run:
    """Consecutive input of one file: ``batches`` chosen batches in consecutive frames from
    ``position`` to ``last_position``, or a whole snapshot (no batches)."""

    file: LogFile
    position: int = -1
    last_position: int = -1
    batches: int = 0
    role: str | None = None


@dataclass(frozen=True, slots=True)
class Piece:
    index: int
    runs: tuple[Run, ...]


def plan(
    files: Sequence[LogFile],
    chosen: Sequence[ChosenRun],
    snapshots: Sequence[tuple[str, int, int]],
    start: int,
    pieces: int,
) -> list[Piece]:
    """``pieces`` pieces, more for a long history (about ``PIECE_RECORDS_MAX`` records each at
    most), fewer where snapshots are too few: cut at the snapshot offsets above ``start`` (the
    history's first offset) nearest to equal shares of it, so they hold about as many records
    each (offsets count records). ``snapshots``: (node, file_seq, offset) of readable snapshot
    files, at whose offsets the merge cut its runs (``merge_streams``'s ``cuts``)."""
    by_key = {(f.node, f.seq): f for f in files}
    offsets = sorted({offset for _, _, offset in snapshots if offset > start})
    span = chosen[-1].last_base - start if chosen else 0  # the history's records, to a batch
    count = max(1, min(max(pieces, -(-span // PIECE_RECORDS_MAX)), len(offsets) + 1))
    boundaries = sorted({_nearest(offsets, start + span * k // count) for k in range(1, count)})
    # (offset, is_log, node, file_seq, position, run): replay order is the tuple's first five;
    # a chosen run is on one side of every snapshot's offset, so it goes whole to one piece
    items: list[list[tuple[Any, ...]]] = [[] for _ in range(len(boundaries) + 1)]
    for c in chosen:
        run = Run(by_key[(c.node, c.file_seq)], c.position, c.last_position, c.batches)
        items[bisect.bisect_right(boundaries, c.base_offset)].append(
            (c.base_offset, 1, c.node, c.file_seq, c.position, run)
        )
    for node, seq, offset in snapshots:
        # a snapshot at S holds the log below S: the piece that replays up to S checks it
        upto = offset - 1 if offset > start else offset
        items[bisect.bisect_right(boundaries, upto)].append(
            (offset, 0, node, seq, -1, Run(by_key[(node, seq)]))
        )
    for k, boundary in enumerate(boundaries, start=1):
        node, seq = min(((n, s) for n, s, o in snapshots if o == boundary), key=lambda k: by_key[k].path)
        items[k].append((boundary, 0, node, seq, -1, Run(by_key[(node, seq)], role=BASE)))
    return [Piece(k, tuple(i[5] for i in sorted(mine, key=lambda i: i[:5]))) for k, mine in enumerate(items)]


def _nearest(offsets: Sequence[int], target: int) -> int:
    """The offset in sorted ``offsets`` nearest to ``target`` (the lower on a tie)."""
    i = bisect.bisect_left(offsets, target)
    return min(offsets[max(0, i - 1) : i + 1], key=lambda offset: abs(offset - target))


def run_piece(piece: Piece, folder: str) -> dict[str, Any]:
    """Replay ``piece`` into ``folder``/events (and the event tables, the offset commits
    folded, ``raftka.audit.commits``, and the counts, ``raftka.audit.counts``), a file per
    chunk; what it did, with each chunk's bounds (``counts.count``) in chunk order."""
    started = time.monotonic()
    with collector.paused():
        # its millions of objects are freed on return, before the collector is on again:
        # left alive, the first collection after it would walk them all
        done = _replay_piece(piece, folder)
    return done | {"seconds": round(time.monotonic() - started, 3)}


def replay_piece(piece: Piece) -> Iterator[tuple[pa.RecordBatch, pa.RecordBatch]]:
    """The events of ``piece`` (``EVENT_SCHEMA``) and the columns of its canonical records
    (``CANONICAL_SCHEMA``), a chunk at a time: a chunk ends with the batch that brings its
    records to ``CHUNK_RECORDS``, so it holds its batches' events and records whole (its fold
    knows which of its batches were skipped), and the replay's image carries on to the next."""
    canonical: list[tuple[Any, ...]] = []
    batches = _batches(piece, canonical)
    replay = Replay()
    while True:
        events = to_batch(list(replay.run(_chunk(batches, canonical))), EVENT_SCHEMA)
        yield events, to_batch(canonical, CANONICAL_SCHEMA)
        if len(canonical) < CHUNK_RECORDS:
            return  # the batches ran out
        canonical.clear()


def _chunk(batches: Iterator[Batch], canonical: list[tuple[Any, ...]]) -> Iterator[Batch]:
    """``batches`` until ``canonical`` holds ``CHUNK_RECORDS`` records, looked at when the replay
    asks for the next batch: by then it has given every event of the batches before."""
    for batch in batches:
        yield batch
        if len(canonical) >= CHUNK_RECORDS:
            return


def _replay_piece(piece: Piece, folder: str) -> dict[str, Any]:
    done: dict[str, Any] = {"piece": piece.index, "records": 0, "events": 0, "skipped": 0}
    bounds: list[tuple[int, int, int, int, int] | None] = []
    for chunk, (events, rows) in enumerate(replay_piece(piece)):
        name = f"piece-{piece.index:05d}-{chunk:05d}.parquet"
        write_whole(pa.Table.from_batches([events]), Path(folder) / EVENTS, name)
        for table_name, table in event_tables(events).items():
            write_whole(table, Path(folder) / table_name, name)
        skipped = pc.filter(events["offset"], pc.equal(events["event"], SKIPPED)).to_pylist()  # batch offsets
        done["records"] += rows.num_rows
        done["events"] += events.num_rows
        done["skipped"] += len(skipped)
        folded = fold(rows, set(skipped))
        write_whole(fold_table(folded.series, piece.index, chunk), Path(folder) / FOLDS, name)
        write_whole(folded.progress, Path(folder) / PROGRESS, name)
        counted = count(rows)
        for table_name, key in ((EPOCH_COUNTS, "epochs"), (OPENED, "opened"), (RATE, "rate")):
            write_whole(counted[key], Path(folder) / table_name, name)
        bounds.append(counted["bounds"])  # the driver's share
    return done | {"bounds": bounds}


def _batches(piece: Piece, canonical: list[tuple[Any, ...]]) -> Iterator[Batch]:
    """The piece's input for the replay; each log record's canonical columns go to
    ``canonical`` as it is read."""
    for run in piece.runs:
        data = Path(run.file.path).read_bytes()
        if run.file.source == SNAPSHOT:
            yield _snapshot(run, data)
        else:
            position = run.position
            for _ in range(run.batches - 1):
                batch, position = _batch(run.file, data, position, canonical)
                yield batch
            if position != run.last_position:  # the frames between are not those the heads read
                raise _changed(
                    run.file, f"byte {position}: a frame where the heads had one at {run.last_position}"
                )
            yield _batch(run.file, data, position, canonical)[0]


def _snapshot(run: Run, data: bytes) -> Batch:
    file = run.file
    try:
        sid, contents = snapshot_contents(file, data)
    except SnapshotError as exc:
        raise _changed(file, str(exc)) from None
    if not contents.records:
        raise _changed(file, "the snapshot is empty now")
    timestamp = contents.timestamp_ms if contents.timestamp_ms >= 0 else None
    first = Row(file.node, file.path, file.seq, None, SNAPSHOT_KIND, sid.offset, 0, len(contents.records), sid.offset,
                sid.epoch, timestamp, None, None, contents.records[0], run.role)  # fmt: skip
    return Batch(first, [(None, None, raw, None) for raw in contents.records])


def _batch(file: LogFile, data: bytes, position: int, canonical: list[tuple[Any, ...]]) -> tuple[Batch, int]:
    """The batch at ``position``, and where the next frame starts."""
    frame = batch_codec.decode_frame(data, position)
    batch = frame.batch
    if batch is None or frame.end is None:
        raise _changed(file, f"byte {position}: {frame.error}")
    base, epoch, timestamp = batch.base_offset, batch.epoch, batch.timestamp_ms
    control = CONTROL_TYPES.get(batch.kind)
    found: list[Record] = []
    for index, raw in enumerate(batch.records):
        if control:
            type_name, leader, voters, _, error = control_columns(control, raw)
            found.append((type_name, error, raw, None))
            canonical.append(
                (base + index, base, epoch, timestamp, type_name, leader, voters, None, None, None, None)
            )
        else:
            type_name, typed, record, error = decode_record(raw)
            found.append((type_name, error, raw, record))
            topic_id, _, partition, _, _, leader, _, _, group, committed = typed
            canonical.append((base + index, base, epoch, timestamp, type_name, leader, None, topic_id, partition, group,
                              committed))  # fmt: skip
    type_name, error, raw, _ = found[0]
    first = Row(file.node, file.path, file.seq, position, batch.kind.name, base, 0, len(found), base, epoch, timestamp,
                type_name, error, raw, None)  # fmt: skip
    return Batch(first, found), frame.end


def _changed(file: LogFile, what: str) -> AuditInputError:
    return AuditInputError(f"{file.path} changed while it was audited: {what}")
