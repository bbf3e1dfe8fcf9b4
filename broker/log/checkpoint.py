"""Kafka's small checkpoint files: a version line, a count line, then one entry per line.

Written whole to a temporary file, fsynced, renamed over the old one and the directory
fsynced, so a crash leaves the old file or the new one, never a mix. A file that does
not parse is an error naming it: the caller decides whether it can do without.
"""

from __future__ import annotations

import os
from pathlib import Path

from raftka.raft.storage.fsio import fsync_dir

VERSION = 0


class CheckpointError(ValueError):
    pass


def write(path: Path, entries: list[tuple[str | int, int]]) -> None:
    lines = [str(VERSION), str(len(entries)), *(f"{key} {value}" for key, value in entries)]
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    fsync_dir(path.parent)


def read(path: Path) -> list[tuple[str, int]]:
    """The entries, or [] when there is no file yet."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    try:
        if int(lines[0]) != VERSION:
            raise CheckpointError(f"{path}: version {lines[0]} is not {VERSION}")
        count = int(lines[1])
        entries = [(key, int(value)) for key, value in (line.rsplit(" ", 1) for line in lines[2 : 2 + count])]
    except (IndexError, ValueError) as e:
        raise CheckpointError(f"{path}: not a checkpoint file ({e})") from None
    if len(entries) != count:
        raise CheckpointError(f"{path}: {count} entries announced, {len(entries)} found")
    return entries
