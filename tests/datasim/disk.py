"""Simulated power cuts on a real file system: only what was fsynced survives.

The brokers' logs run on real files, each broker in its own folder. While a simulation
runs, ``os.fsync`` is replaced by a recorder (``fsync_recorded``) that, for a file under a
simulated disk, keeps the file's bytes as they are at that fsync, and for a folder, its
names (a new, renamed or deleted name is durable only once its folder is fsynced). A
*crash* (the process dies, the machine stays up) changes nothing on disk: the page cache
survives. A *power cut* rebuilds the disk from the record alone, which is POSIX's strict
promise and the harshest one a file system makes: a file whose name was synced but whose
bytes never were comes back empty, a name never synced is gone, an unlink or rename never
synced is undone.

Files and folders are known by inode, so renames and ``dir_fd`` writes are followed. The
disk holds an open descriptor on every inode it has a record of, so no inode number is
reused for another file while a record could still name it; a descriptor is let go once
its inode is unlinked and no synced folder names it.

A broker fsyncs on more than one thread (its log-recovery threads write each log's
checkpoints at start), so a disk records one fsync at a time: two records letting go of
the same inode at once would close its descriptor twice, the second time closing whatever
file had taken its number since.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

_real_fsync = os.fsync


@dataclass(slots=True)
class _Folder:
    names: dict[str, int]  # name -> inode, as of the folder's last fsync


@dataclass(slots=True)
class SimDisk:
    """One broker's disk: a folder and what of it is durable."""

    root: Path
    contents: dict[int, bytes] = field(default_factory=dict)  # inode -> bytes at its last fsync
    folders: dict[int, _Folder] = field(default_factory=dict)  # folder inode -> synced names
    held: dict[int, int] = field(default_factory=dict)  # inode -> a descriptor keeping it alive
    fsyncs: int = 0
    _recording: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._record_tree()

    # recording --------------------------------------------------------------------------

    def synced(self, fd: int) -> None:
        """``fd`` (under this disk) was fsynced, on any thread: record its bytes or its names."""
        with self._recording:
            self._record(fd)

    def _record(self, fd: int) -> None:
        self.fsyncs += 1
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            names = {}
            with os.scandir(f"/proc/self/fd/{fd}") as entries:
                for entry in entries:
                    inode = entry.inode()
                    names[entry.name] = inode
                    self._hold(inode, os.path.join(f"/proc/self/fd/{fd}", entry.name))
            self._hold(info.st_ino, f"/proc/self/fd/{fd}")
            self.folders[info.st_ino] = _Folder(names)
            self._let_go()
        else:
            self._hold(info.st_ino, f"/proc/self/fd/{fd}")
            self.contents[info.st_ino] = os.pread(self.held[info.st_ino], info.st_size, 0)

    def _hold(self, inode: int, path: str) -> None:
        if inode not in self.held:
            self.held[inode] = os.open(path, os.O_RDONLY)

    def _let_go(self) -> None:
        named = {self._root_inode()} | {i for f in self.folders.values() for i in f.names.values()}
        for inode, fd in list(self.held.items()):
            if inode not in named and os.fstat(fd).st_nlink == 0:
                os.close(fd)
                del self.held[inode]
                self.contents.pop(inode, None)
                self.folders.pop(inode, None)

    def _root_inode(self) -> int:
        return os.stat(self.root).st_ino

    def _record_tree(self) -> None:
        """Everything on the disk now is durable (a fresh disk, or one just rebuilt)."""
        for folder, _, files in os.walk(self.root):
            for name in files:
                fd = os.open(os.path.join(folder, name), os.O_RDONLY)
                try:
                    self.synced(fd)
                finally:
                    os.close(fd)
            fd = os.open(folder, os.O_RDONLY)
            try:
                self.synced(fd)
            finally:
                os.close(fd)

    # faults -----------------------------------------------------------------------------

    def power_cut(self) -> None:
        """Leave on disk only what was synced (call once the broker's files are closed)."""
        tree = self._durable_tree(self._root_inode())
        self.release()
        for child in self.root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        _write_tree(self.root, tree)
        self._record_tree()

    def wipe(self) -> None:
        """The disk is replaced by an empty one."""
        self.release()
        shutil.rmtree(self.root)
        self.root.mkdir()
        self._record_tree()

    def release(self) -> None:
        with self._recording:
            for fd in self.held.values():
                os.close(fd)
            self.held.clear()
            self.contents.clear()
            self.folders.clear()

    def _durable_tree(self, inode: int) -> dict[str, bytes | dict]:
        folder = self.folders.get(inode)
        tree: dict[str, bytes | dict] = {}
        for name, child in ({} if folder is None else folder.names).items():
            fd = self.held.get(child)
            if fd is not None and stat.S_ISDIR(os.fstat(fd).st_mode):
                tree[name] = self._durable_tree(child)
            else:
                tree[name] = self.contents.get(child, b"")
        return tree

    def describe(self) -> str:
        return f"{self.root.name}: {len(self.contents)} synced files, {self.fsyncs} fsyncs"


def _write_tree(folder: Path, tree: dict[str, bytes | dict]) -> None:
    for name, node in tree.items():
        path = folder / name
        if isinstance(node, dict):
            path.mkdir()
            _write_tree(path, node)
        else:
            path.write_bytes(node)


class Disks:
    """Routes every fsync under a simulated disk to it; others go to the real fsync."""

    def __init__(self) -> None:
        self.disks: list[SimDisk] = []

    def add(self, disk: SimDisk) -> SimDisk:
        self.disks.append(disk)
        return disk

    def fsync_recorded(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        for disk in self.disks:
            if path == str(disk.root) or path.startswith(f"{disk.root}/"):
                disk.synced(fd)  # the simulation's disks need no real fsync: only the record
                return
        _real_fsync(fd)

    def release(self) -> None:
        for disk in self.disks:
            disk.release()

    @contextmanager
    def installed(self) -> Iterator[Disks]:
        """``os.fsync`` records while the simulation runs (the brokers call ``os.fsync``)."""
        os.fsync = self.fsync_recorded
        try:
            yield self
        finally:
            os.fsync = _real_fsync
            self.release()
