"""Putting cleaned segments in place of the ones they replace, so that a crash at any
step leaves a log that loading completes or rolls back (Kafka's ``replaceSegments`` and
``LogLoader``'s swap handling).

1. The pass wrote ``<base>.log.cleaned`` and its indexes, fsynced (``recopy``).
2. Each is renamed ``.swap``, the log file last, and the folder fsynced: from here the
   cleaned segment is the truth.
3. The replaced segments are deleted, the folder fsynced.
4. Each ``.swap`` is renamed to its plain name, the log file last, the folder fsynced.

Loading (``finish_interrupted_swaps``, before the segments are opened): every
``.cleaned`` file goes (a pass that never reached step 2: the old segments are whole),
and so does every ``.swap`` file but a ``.log.swap``'s indexes (step 2 cut short is step 1).
A ``<base>.log.swap`` is scanned for its end; every plain segment file with a base in
[base, end) is deleted (a cleaned segment ends where its group ended, ``recopy``), and the
swap files are renamed. An index lost on the way is rebuilt when the segment loads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import structlog

from raftka.broker.log.cleaner.recopy import CLEANED_SUFFIX, CleanedGroup
from raftka.broker.log.segment import LogSegment
from raftka.raft.storage.fsio import fsync_dir

log = structlog.get_logger("raftka.broker.log.cleaner")
SWAP_SUFFIX = ".swap"
Step = Callable[[str], None]  # told each step's name before it runs (tests crash there)


def swap(
    directory: Path,
    segments: list[LogSegment],
    group: CleanedGroup,
    index_interval_bytes: int,
    step: Step | None = None,
) -> bool:
    """Replace ``group.replaced`` within ``segments`` (the log's list, changed in place)
    by the cleaned segment; False, the cleaned files deleted, when the log no longer holds
    them all (retention or a truncation took some meanwhile)."""
    step = step or (lambda _: None)
    cleaned = _paths(directory, group.base_offset, CLEANED_SUFFIX)
    at = _position(segments, group.replaced)
    if at is None:
        discard(directory, group)
        return False
    step("rename to swap")
    for path in cleaned:
        if path.exists():  # a segment without aborted transactions has no transaction index
            step(f"rename {path.name}")
            os.replace(path, _with_suffix(path, CLEANED_SUFFIX, SWAP_SUFFIX))
    fsync_dir(directory)
    for old in group.replaced:
        step(f"delete {old.path.name}")
        old.delete()
    fsync_dir(directory)
    for path in _paths(directory, group.base_offset, SWAP_SUFFIX):
        if path.exists():
            step(f"rename {path.name}")
            os.replace(path, _with_suffix(path, SWAP_SUFFIX, ""))
    fsync_dir(directory)
    step("open")
    new = LogSegment(directory, group.base_offset, index_interval_bytes, group.created_ms)
    new.load(trust_indexes=True)
    segments[at : at + len(group.replaced)] = [new]
    return True


def discard(directory: Path, group: CleanedGroup) -> None:
    for path in _paths(directory, group.base_offset, CLEANED_SUFFIX):
        path.unlink(missing_ok=True)


def finish_interrupted_swaps(directory: Path, index_interval_bytes: int, created_ms: int) -> None:
    """Complete or roll back swaps a crash cut short (the module's docstring)."""
    swapped_bases = sorted(int(p.name.split(".")[0]) for p in directory.glob(f"*.log{SWAP_SUFFIX}"))
    for stray in [*directory.glob(f"*{CLEANED_SUFFIX}"), *directory.glob(f"*{SWAP_SUFFIX}")]:
        if int(stray.name.split(".")[0]) not in swapped_bases:
            stray.unlink()
    if not swapped_bases:
        return
    for base in swapped_bases:
        swapped = LogSegment(directory, base, index_interval_bytes, created_ms, SWAP_SUFFIX)
        swapped.recover()
        end = swapped.next_offset
        swapped.close()
        for plain in list(directory.glob("*.log")):
            old_base = int(plain.stem)
            if base <= old_base < end:
                log.info("deleting a segment a cleaned one replaced", segment=plain.name)
                for path in _paths(directory, old_base, ""):
                    path.unlink(missing_ok=True)
        fsync_dir(directory)
        for path in _paths(directory, base, SWAP_SUFFIX):
            if path.exists():
                os.replace(path, _with_suffix(path, SWAP_SUFFIX, ""))
        log.info("completed an interrupted swap of cleaned segments", base_offset=base, end_offset=end)
    fsync_dir(directory)


def _position(segments: list[LogSegment], replaced: list[LogSegment]) -> int | None:
    for at, segment in enumerate(segments):
        if segment is replaced[0]:
            window = segments[at : at + len(replaced)]
            if len(window) == len(replaced) and all(a is b for a, b in zip(window, replaced, strict=True)):
                return at
            return None
    return None


def _paths(directory: Path, base_offset: int, suffix: str) -> list[Path]:
    """A segment's files, the log last (``LogSegment.paths``' order)."""
    return [
        directory / f"{base_offset:020d}{name}{suffix}"
        for name in (".index", ".timeindex", ".txnindex", ".log")
    ]


def _with_suffix(path: Path, old: str, new: str) -> Path:
    return path.with_name(path.name.removesuffix(old) + new)
