"""Kafka's small checkpoint files: a version line, a count line, then one entry per line.

Written whole to a temporary file, fsynced, renamed over the old one and the directory
fsynced, so a crash leaves the old file or the new one, never a mix. A file that does
not parse is an error naming it: the caller decides whether it can do without.

``write_in`` writes through an open descriptor of the directory, so a write queued for
another thread lands in that folder even if it was renamed meanwhile (a partition being
deleted), never in a new folder that took its name.
"""

from __future__ import annotations

import os
from pathlib import Path

from raftka.raft.storage.fsio import write_all

VERSION = 0


class CheckpointError(ValueError):
    pass


def write(path: Path, entries: list[tuple[str | int, int]]) -> None:
    directory_fd = os.open(path.parent, os.O_RDONLY)
    try:
        write_in(directory_fd, path.name, entries)
    finally:
        os.close(directory_fd)


def write_in(directory_fd: int, name: str, entries: list[tuple[str | int, int]]) -> None:
    lines = [str(VERSION), str(len(entries)), *(f"{key} {value}" for key, value in entries)]
    temporary = name + ".tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=directory_fd)
    try:
        write_all(fd, ("\n".join(lines) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, name, src_dir_fd=directory_fd, dst_dir_fd=directory_fd)
    os.fsync(directory_fd)


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
