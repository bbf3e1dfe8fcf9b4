"""The simulated disk keeps, on a power cut, exactly what was fsynced: a file's bytes as of
its last fsync, a name only once its folder was fsynced."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from raftka.broker.log.config import LogConfig
from raftka.broker.log.manager import LogManager
from raftka.records.codec import read_records
from tests.datasim.disk import Disks, SimDisk
from tests.unit.test_partition_log import TOPIC_ID, append


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_a_power_cut_keeps_the_bytes_of_the_last_fsync_and_only_synced_names(tmp_path: Path) -> None:
    with Disks().installed() as disks:
        disk = disks.add(SimDisk(tmp_path / "disk"))
        root = disk.root
        (root / "log").write_bytes(b"synced")
        _fsync(root / "log")
        _fsync(root)
        with (root / "log").open("ab") as f:
            f.write(b"+unsynced")
        (root / "named").write_bytes(b"bytes never synced")
        _fsync(root)  # its name, but not its bytes
        (root / "new").write_bytes(b"never named durably")
        _fsync(root / "new")  # its bytes, but not its name
        (root / "log").rename(root / "moved")  # a rename never synced

        disk.power_cut()

        assert sorted(p.name for p in root.iterdir()) == ["log", "named"]
        assert (root / "log").read_bytes() == b"synced"
        assert (root / "named").read_bytes() == b""


def test_a_replaced_file_comes_back_as_its_folder_last_named_it(tmp_path: Path) -> None:
    """A checkpoint's write-fsync-rename-fsync: the old content until the folder is synced."""
    with Disks().installed() as disks:
        disk = disks.add(SimDisk(tmp_path / "disk"))
        root = disk.root
        (root / "cp").write_bytes(b"old")
        _fsync(root / "cp")
        _fsync(root)
        (root / "cp.tmp").write_bytes(b"new")
        _fsync(root / "cp.tmp")
        os.replace(root / "cp.tmp", root / "cp")

        disk.power_cut()
        assert (root / "cp").read_bytes() == b"old"

        (root / "cp.tmp").write_bytes(b"new")
        _fsync(root / "cp.tmp")
        os.replace(root / "cp.tmp", root / "cp")
        _fsync(root)
        disk.power_cut()
        assert sorted(p.name for p in root.iterdir()) == ["cp"]
        assert (root / "cp").read_bytes() == b"new"


def test_a_folder_never_named_durably_is_gone_and_one_named_comes_back_empty(tmp_path: Path) -> None:
    with Disks().installed() as disks:
        disk = disks.add(SimDisk(tmp_path / "disk"))
        (disk.root / "t-0").mkdir()
        _fsync(disk.root)
        (disk.root / "t-0" / "00.log").write_bytes(b"x")
        _fsync(disk.root / "t-0" / "00.log")  # the file's folder is never synced
        (disk.root / "t-1").mkdir()

        disk.power_cut()

        assert [p.name for p in disk.root.iterdir()] == ["t-0"]
        assert list((disk.root / "t-0").iterdir()) == []


def test_a_partition_log_keeps_across_a_power_cut_what_it_flushed_and_across_a_crash_all(
    tmp_path: Path,
) -> None:
    """The model under the real log: a crash (files closed unsynced) keeps every record,
    a power cut only the flushed ones, and the log recovers to exactly those."""
    with Disks().installed() as disks:
        disk = disks.add(SimDisk(tmp_path / "disk"))

        def reopened() -> list[bytes]:
            logs = LogManager(disk.root)
            logs.open_all()
            partition_log = logs.get_or_create("t", 0, TOPIC_ID, LogConfig())
            values = [r.value for r in read_records(partition_log.read(0, 1 << 20).records)]
            partition_log.close_unflushed()
            return values

        logs = LogManager(disk.root)
        logs.open_all()
        partition_log = logs.get_or_create("t", 0, TOPIC_ID, LogConfig())
        append(partition_log, b"flushed")
        partition_log.flush()
        append(partition_log, b"in the page cache")
        partition_log.close_unflushed()

        assert reopened() == [b"flushed", b"in the page cache"]  # a crash: the page cache stays
        disk.power_cut()
        assert reopened() == [b"flushed"]


def test_fsyncs_from_several_threads_keep_the_record_whole(tmp_path: Path) -> None:
    """A broker fsyncs on several threads (its log-recovery threads write each log's
    checkpoints at start): records made at once must neither close a descriptor twice
    (the second close hits whatever file took its number since) nor lose one."""
    threads, rounds = 2, 300
    with Disks().installed() as disks:
        disk = disks.add(SimDisk(tmp_path / "disk"))
        folders = [disk.root / f"t-{i}" for i in range(threads)]
        for folder in folders:
            folder.mkdir()
        _fsync(disk.root)
        errors: list[Exception] = []

        def checkpoint_again_and_again(folder: Path) -> None:
            try:
                for n in range(rounds):  # what checkpoint.write does: the old file goes at each round
                    (folder / "cp.tmp").write_bytes(str(n).encode())
                    _fsync(folder / "cp.tmp")
                    os.replace(folder / "cp.tmp", folder / "cp")
                    _fsync(folder)
            except Exception as e:  # reported below, on the test's thread
                errors.append(e)

        switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # the threads take turns inside the records as often as they can
        try:
            workers = [threading.Thread(target=checkpoint_again_and_again, args=(f,)) for f in folders]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
        finally:
            sys.setswitchinterval(switch_interval)

        assert errors == []
        for inode, fd in disk.held.items():  # each descriptor still open, on its own inode
            assert os.fstat(fd).st_ino == inode
        held = set(disk.held.values())
        leaked = [fd for fd in _open_descriptors() - held if _names_a_file_under(fd, disk.root)]
        assert leaked == []
        disk.power_cut()
        assert [(f / "cp").read_bytes() for f in folders] == [str(rounds - 1).encode()] * threads


def _open_descriptors() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def _names_a_file_under(fd: int, root: Path) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith(f"{root}/")
    except OSError:  # the descriptor listdir itself held
        return False
