"""Durable file operations: each returns only once the change survives a power cut.

A new, renamed or deleted name is durable only after its directory is fsynced, so every
function that changes a directory fsyncs it (callers that change many names at once fsync
the directory themselves, once).
"""

from __future__ import annotations

import os
from pathlib import Path


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until every byte is written (it may write fewer than asked)."""
    with memoryview(data) as view:
        written = 0
        while written < len(view):
            written += os.write(fd, view[written:])


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """``os.pwrite`` until every byte is written at ``offset``."""
    written = 0
    while written < len(data):
        written += os.pwrite(fd, data[written:], offset + written)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fdatasync_file(path: Path) -> None:
    """Make what any process wrote to ``path`` durable (its data and size)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def truncate_durably(path: Path, size_bytes: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size_bytes)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, *, temp_suffix: str) -> None:
    """Replace ``path`` with ``data``: write a temp file, fsync, rename over, fsync the directory.

    A crash leaves either the old file or the new one, plus at worst a stray temp file.
    """
    temp = path.with_name(path.name + temp_suffix)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_dir(path.parent)
