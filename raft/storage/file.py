"""FileStorage: the quorum's log, snapshots and quorum-state in a KRaft-style directory.

Every call that changes the disk returns only once the change is durable, and orders its
steps so that a crash at any point leaves something ``load()`` recovers without losing an
acknowledged byte: new data is written and fsynced before old data is removed, files are
removed one at a time, oldest first, and small files are replaced by rename. The one
exception is a write with ``sync`` False (an observer's appends): written, not fsynced, until
the next synced write fsyncs every segment left dirty. A power cut may lose such a tail,
never more: a segment is fsynced before the log rolls to the next, and ``load()`` fsyncs
what it recovers, so nothing a previous process left in the page cache is acknowledged
before it is durable.

A failed call leaves the instance unusable (fail-stop): after a failed fsync the kernel may
have dropped the dirty pages, so retrying could report data durable that is not. Restart
and ``load()`` again.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import structlog

from raftka.raft.batch import Batch, SnapshotId
from raftka.raft.effects import Snapshot, Write
from raftka.raft.storage import batch_codec, fsio, layout, snapshot_file
from raftka.raft.storage.base import (
    RESTORE_FROM_PEERS,
    CorruptLogError,
    LoadedState,
    StorageError,
    covered_by_snapshot,
)
from raftka.raft.storage.batch_codec import Frame
from raftka.raft.storage.quorum_file import QuorumStateFile

_log = structlog.get_logger(__name__)


@dataclass(slots=True)
class _Segment:
    base_offset: int
    path: Path
    size_bytes: int


class FileStorage:
    """The ``Storage`` protocol on local disk; see ``raftka.raft.storage.layout`` for the file names."""

    def __init__(
        self,
        data_dir: Path,
        *,
        segment_bytes: int = 8 << 20,
        archive: bool = False,
        archive_max_bytes: int = 0,
    ) -> None:
        assert segment_bytes > 0, segment_bytes
        assert archive_max_bytes >= 0, archive_max_bytes
        self._dir = layout.log_dir(data_dir)
        self._archive_dir = self._dir / layout.ARCHIVE_DIR if archive else None
        self._archive_max_bytes = archive_max_bytes  # 0: the archive is never pruned
        self._segment_bytes = segment_bytes
        self._segments: list[_Segment] = []
        self._snapshot_id: SnapshotId | None = None
        self._log_end = 0
        self._unusable: str | None = "load() has not run"
        self._quorum_state = QuorumStateFile(self._dir / layout.QUORUM_STATE_FILE)
        self._active: tuple[Path, int] | None = None  # the active segment's open descriptor
        self._dirty: set[Path] = set()  # segments holding appends not yet fsynced

    def load(self) -> LoadedState:
        self._dir.mkdir(parents=True, exist_ok=True)
        if self._archive_dir is not None:
            self._archive_dir.mkdir(exist_ok=True)
        self._remove_temp_files()
        quorum_state = self._quorum_state.load()
        snapshot = self._load_newest_snapshot()
        self._segments = []
        self._snapshot_id = snapshot.id if snapshot is not None else None
        batches = self._recover_segments()
        self._check_log_start(snapshot)
        batches = self._complete_snapshot_work(snapshot, batches)
        for segment in self._segments:  # an earlier process's unsynced appends are durable from here on
            fsio.fdatasync_file(segment.path)
        self._unusable = None
        return LoadedState(quorum_state, snapshot, batches)

    def write(self, write: Write) -> None:
        with self._fail_stop():
            if write.install_snapshot is not None:
                self._install_snapshot(write.install_snapshot)
            if write.truncate_to is not None:
                self._truncate(write.truncate_to)
            batches = covered_by_snapshot(write.append, self._snapshot_id)
            if batches:
                self._append(batches, sync=write.sync)
            if write.sync:
                self._sync_dirty()
            if write.quorum_state is not None:
                self._quorum_state.write(write.quorum_state)

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` unless the current one is as new; then retire what it covers."""
        with self._fail_stop():
            offset = snapshot.id.offset
            if self._snapshot_id is not None and offset <= self._snapshot_id.offset:
                _log.debug("ignoring snapshot no newer than the current one", snapshot=str(snapshot.id))
                return
            path = snapshot_file.write_snapshot(self._dir, snapshot)
            below = self._count_segments_below(offset)
            retired = [s.path for s in self._segments[:below]]
            del self._segments[:below]
            self._retire([*retired, *(p for _, p in layout.list_snapshots(self._dir) if p != path)])
            self._snapshot_id = snapshot.id
            self._log_end = max(self._log_end, offset)
            _log.info("saved snapshot", offset=offset, epoch=snapshot.id.epoch, retired_segments=len(retired))

    def close(self) -> None:
        self._unusable = "it is closed"
        self._quorum_state.close()
        self._close_active()

    # -- load ------------------------------------------------------------------------------

    def _remove_temp_files(self) -> None:
        """Drop what a crash left half-written: ``.part`` snapshots and ``.tmp`` replacements."""
        leftovers = [*self._dir.glob(f"*{layout.PART_SUFFIX}"), *self._dir.glob(f"*{layout.TMP_SUFFIX}")]
        for path in leftovers:
            _log.info("removing interrupted write", file=str(path))
            path.unlink()
        if leftovers:
            fsio.fsync_dir(self._dir)

    def _load_newest_snapshot(self) -> Snapshot | None:
        """The newest snapshot; older ones are left by a crash before they were retired.

        A snapshot gets its name only once it is complete (``.part`` leftovers are gone by
        now), so one that fails its checks was damaged afterwards. It may hold the only copy
        of committed records: the segments below it are gone, and after an install or a
        snapshot at the log end no segment is left at all. Falling back to an older snapshot
        or an empty log would let this voter grant votes with data missing, so stop instead
        and keep the file for the operator.
        """
        snapshots = layout.list_snapshots(self._dir)
        if not snapshots:
            return None
        path = snapshots[-1][1]
        try:
            return snapshot_file.read_snapshot(path)
        except snapshot_file.SnapshotFileError as exc:
            raise CorruptLogError(
                f"{path}: {exc}. A snapshot is renamed into place only once it is complete, so this is "
                "damage, not an interrupted write, and the committed records it holds may exist nowhere "
                f"else on this node; the node will not start and the file is left as it is. "
                f"{RESTORE_FROM_PEERS}"
            ) from exc

    def _recover_segments(self) -> list[Batch]:
        """Read every segment, truncate a torn tail of the last one, and check the log's order."""
        found = layout.list_segments(self._dir)
        batches: list[Batch] = []
        for index, (base_offset, path) in enumerate(found):
            size = self._recover_segment(base_offset, path, index == len(found) - 1, batches)
            if size == 0:
                _log.warning("removing empty segment", file=str(path))
                path.unlink()
                fsio.fsync_dir(self._dir)
            else:
                self._segments.append(_Segment(base_offset, path, size))
        self._log_end = batches[-1].next_offset if batches else 0
        return batches

    def _recover_segment(self, base_offset: int, path: Path, is_last: bool, batches: list[Batch]) -> int:
        """Append the segment's batches to ``batches``; return how many of its bytes are valid."""
        data = path.read_bytes()
        for frame in batch_codec.iter_frames(data):
            if frame.batch is None:
                return self._recover_damage(path, data, frame, is_last)
            _check_order(path, frame, base_offset, batches[-1] if batches else None)
            batches.append(frame.batch)
        return len(data)

    def _recover_damage(self, path: Path, data: bytes, frame: Frame, is_last: bool) -> int:
        """Truncate a torn tail; refuse any other damage, since it may hit acknowledged data."""
        later = batch_codec.find_valid_frame(data, frame.position + 1)
        if later is not None:
            evidence = f"a valid batch follows at byte {later}"
        elif not is_last:
            evidence = "later segments follow"
        elif frame.crc_valid:
            evidence = "its CRC matches"
        else:
            evidence = None
        if evidence is not None:
            raise CorruptLogError(
                f"{path}: the batch at byte {frame.position} is corrupt ({frame.error}) and {evidence}, so "
                f"this is not a torn write but damage to data that may have been acknowledged; the node will "
                f"not start. {RESTORE_FROM_PEERS}"
            )
        _log.warning(
            "truncating torn log tail",
            file=str(path),
            position=frame.position,
            dropped_bytes=len(data) - frame.position,
            error=frame.error,
        )
        fsio.truncate_durably(path, frame.position)
        return frame.position

    def _check_log_start(self, snapshot: Snapshot | None) -> None:
        if self._segments and self._segments[0].base_offset > self._log_start:
            covered = (
                f"the newest snapshot covers offsets below {self._log_start}" if snapshot else "no snapshot"
            )
            raise CorruptLogError(
                f"{self._segments[0].path}: the log starts at offset {self._segments[0].base_offset} but "
                f"there is {covered}: the records in between are missing. {RESTORE_FROM_PEERS}"
            )

    def _complete_snapshot_work(self, snapshot: Snapshot | None, batches: list[Batch]) -> list[Batch]:
        """Finish what a crash interrupted after a snapshot was written, as KRaft does at start.

        A log whose last epoch is older than the snapshot's cannot continue it (an install
        was cut short): drop all of it. Otherwise drop the segments wholly below the snapshot.
        Returns the batches after the snapshot.
        """
        if snapshot is None:
            return batches
        if batches and batches[-1].epoch < snapshot.id.epoch:
            _log.warning(
                "dropping log older than the snapshot", snapshot=str(snapshot.id), log_end=self._log_end
            )
            below = len(self._segments)
        else:
            below = self._count_segments_below(snapshot.id.offset)
        self._retire([s.path for s in self._segments[:below]])
        del self._segments[:below]
        if not self._segments:
            self._log_end = self._log_start
            return []
        return [b for b in batches if b.next_offset > self._log_start]

    # -- write -----------------------------------------------------------------------------

    @contextmanager
    def _fail_stop(self) -> Iterator[None]:
        if self._unusable is not None:
            raise StorageError(f"storage at {self._dir} cannot be used: {self._unusable}")
        try:
            yield
        except BaseException as exc:
            self._unusable = f"an earlier write failed ({exc!r}); restart the node to recover from disk"
            raise

    def _install_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log by ``snapshot``: write it first, so a crash loses nothing."""
        self._close_active()
        path = snapshot_file.write_snapshot(self._dir, snapshot)
        self._retire(
            [
                *(s.path for s in self._segments),
                *(p for _, p in layout.list_snapshots(self._dir) if p != path),
            ]
        )
        self._segments.clear()
        self._snapshot_id = snapshot.id
        self._log_end = snapshot.id.offset
        _log.info("installed snapshot", offset=snapshot.id.offset, epoch=snapshot.id.epoch)

    def _truncate(self, offset: int) -> None:
        """Drop every record at or after ``offset``, newest segment first so a crash leaves a prefix."""
        self._close_active()
        assert offset >= self._log_start, f"truncating to {offset}, below the snapshot at {self._log_start}"
        if offset >= self._log_end:
            return
        while self._segments and self._segments[-1].base_offset >= offset:
            self._segments.pop().path.unlink()
            fsio.fsync_dir(self._dir)
        if self._segments:
            segment = self._segments[-1]
            position = _position_of(segment.path, offset)
            if position < segment.size_bytes:
                fsio.truncate_durably(segment.path, position)
                segment.size_bytes = position
        self._log_end = offset

    def _append(self, batches: tuple[Batch, ...], *, sync: bool) -> None:
        """Encode every batch into one buffer per segment: one write and (``sync``) one fsync each.

        A segment is always fsynced before the log rolls past it, so what a power cut keeps
        of unsynced appends is a prefix of the log, never a later segment without an earlier one.
        """
        chunk = bytearray()
        for batch in batches:
            assert batch.base_offset == self._log_end, (
                f"appending offset {batch.base_offset} at {self._log_end}"
            )
            if self._must_roll(len(chunk), batch_codec.frame_bytes(batch)):
                self._flush(chunk, sync=sync)
                chunk.clear()
                self._sync_dirty()
                path = self._dir / layout.segment_name(batch.base_offset)
                assert not path.exists(), f"{path} exists beyond the log end"
                self._segments.append(_Segment(batch.base_offset, path, 0))
                _log.debug("rolled segment", file=str(path))
            batch_codec.encode_into(chunk, batch)
            self._log_end = batch.next_offset
        self._flush(chunk, sync=sync)

    def _must_roll(self, pending_bytes: int, frame_bytes: int) -> bool:
        if not self._segments:
            return True
        used = self._segments[-1].size_bytes + pending_bytes
        return used > 0 and used + frame_bytes > self._segment_bytes

    def _flush(self, chunk: bytearray, *, sync: bool) -> None:
        """Append to the active segment through a descriptor kept open, then fdatasync
        (``sync``) or leave it dirty for the next synced write.

        fdatasync also flushes the file size, which reading the data back needs, and skips
        timestamps: about half the cost of fsync for an append, on every commit.
        """
        if not chunk:
            return
        segment = self._segments[-1]
        if self._active is None or self._active[0] != segment.path:
            self._close_active()
            created = not segment.path.exists()
            self._active = (
                segment.path,
                os.open(segment.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644),
            )
            if created:
                fsio.fsync_dir(segment.path.parent)
        fd = self._active[1]
        fsio.write_all(fd, chunk)
        if sync:
            os.fdatasync(fd)
            self._dirty.discard(segment.path)
        else:
            self._dirty.add(segment.path)
        segment.size_bytes += len(chunk)

    def _sync_dirty(self) -> None:
        """fdatasync every segment that unsynced appends left dirty (and still exists)."""
        live = {s.path for s in self._segments}
        for path in sorted(self._dirty & live):
            if self._active is not None and self._active[0] == path:
                os.fdatasync(self._active[1])
            else:
                fsio.fdatasync_file(path)
        self._dirty.clear()

    def _close_active(self) -> None:
        if self._active is not None:
            os.close(self._active[1])
            self._active = None

    # -- shared ----------------------------------------------------------------------------

    @property
    def _log_start(self) -> int:
        """The newest snapshot's offset: nothing below it may change."""
        return self._snapshot_id.offset if self._snapshot_id is not None else 0

    def _count_segments_below(self, offset: int) -> int:
        """How many leading segments hold only records below ``offset``."""
        ends = [s.base_offset for s in self._segments[1:]] + [self._log_end]
        return sum(1 for end in ends if end <= offset)  # ends increase, so these are a prefix

    def _retire(self, paths: Iterable[Path]) -> None:
        """Delete files the log no longer needs, or move them to ``archive/``.

        One at a time, each durable before the next, so a crash cannot leave a hole in the log.
        """
        self._close_active()
        for path in paths:
            if self._archive_dir is None:
                path.unlink()
            else:
                os.replace(path, layout.free_archive_path(self._archive_dir, path.name))
                fsio.fsync_dir(self._archive_dir)
            fsio.fsync_dir(self._dir)
        if self._archive_dir is not None and self._archive_max_bytes:
            self._prune_archive(self._archive_dir)

    def _prune_archive(self, archive: Path) -> None:
        """Delete the oldest archived files while the archive holds more than its bound.

        The oldest go first, so what stays is one stretch of history reaching up to the
        live log; then leading segments go too until a snapshot leads (if one is left),
        because records without the state below them cannot be replayed by an audit.
        """
        files = layout.log_files(archive)
        sizes = [p.stat().st_size for p in files]
        total = sum(sizes)
        drop = 0
        while drop < len(files) and total > self._archive_max_bytes:
            total -= sizes[drop]
            drop += 1
        snapshots = [i for i, p in enumerate(files) if p.name.endswith(layout.SNAPSHOT_SUFFIX)]
        if drop and any(i >= drop for i in snapshots):
            for _ in range(drop, min(i for i in snapshots if i >= drop)):
                total -= sizes[drop]
                drop += 1
        for path in files[:drop]:
            path.unlink()
        if drop:
            fsio.fsync_dir(archive)
            _log.info("pruned archive", files=drop, archive_bytes=total, max_bytes=self._archive_max_bytes)


def _check_order(path: Path, frame: Frame, base_offset: int, previous: Batch | None) -> None:
    """Offsets must follow on from the file name and the previous batch; epochs never go back."""
    batch = frame.batch
    assert batch is not None
    problem = None
    if frame.position == 0 and batch.base_offset != base_offset:
        problem = f"the first batch has offset {batch.base_offset} but the file name says {base_offset}"
    elif previous is not None and batch.base_offset != previous.next_offset:
        problem = f"offset {batch.base_offset} follows a batch ending at {previous.next_offset}"
    elif previous is not None and batch.epoch < previous.epoch:
        problem = f"epoch {batch.epoch} follows epoch {previous.epoch}"
    if problem:
        raise CorruptLogError(f"{path}: at byte {frame.position}, {problem}. {RESTORE_FROM_PEERS}")


def _position_of(path: Path, offset: int) -> int:
    """The byte position in the segment at ``path`` where the batch at ``offset`` starts (or its end)."""
    data = path.read_bytes()
    for frame in batch_codec.iter_frames(data):
        if frame.batch is None:
            raise CorruptLogError(
                f"{path}: damaged at byte {frame.position} ({frame.error}). {RESTORE_FROM_PEERS}"
            )
        if frame.batch.next_offset > offset:
            assert frame.batch.base_offset == offset, (
                f"offset {offset} is inside the batch at {frame.batch.base_offset}"
            )
            return frame.position
    return len(data)
