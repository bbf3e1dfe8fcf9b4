"""``metadata collect`` on a running node: files the node archives or deletes between the
listing and the read, a collect that fails or is killed, and what it leaves behind.

The node's moves are made inside the listing (``layout.history_files``), so each race
happens at the same point on every run. File contents are opaque to collect, so the
segments here are plain bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from raftka.audit.files import discover
from raftka.raft.storage import layout
from raftka.raft.storage.base import StorageError
from raftka.raft.storage.collect import LISTINGS_MAX, MANIFEST, collect
from raftka.raft.storage.meta import format_storage

NODE_ID = 1


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Node 1 with one archived segment and two live ones."""
    data = tmp_path / "node" / "data"
    format_storage(data, "collect-test", NODE_ID, initial_cluster=True)
    (layout.log_dir(data) / layout.ARCHIVE_DIR).mkdir(parents=True)
    _segment(data, 0, archived=True).write_bytes(b"archived at 0")
    _segment(data, 100).write_bytes(b"live at 100")
    _segment(data, 200).write_bytes(b"live at 200")
    return data


def test_a_segment_archived_between_listing_and_reading_is_collected_once(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_listing = layout.history_files
    listings = 0

    def node_archives_while_listed(path: Path, *, include_archive: bool = True) -> list[Path]:
        nonlocal listings
        listings += 1
        if listings == 2:  # 100 was read at its live name before the node archived it
            _archive(_segment(data_dir, 100))
        listed = real_listing(path, include_archive=include_archive)
        if listings == 1:  # 200 moves before it is read
            _archive(_segment(data_dir, 200))
        return listed

    monkeypatch.setattr(layout, "history_files", node_archives_while_listed)
    out = tmp_path / "out"
    manifest = collect(data_dir, out)
    copied = {entry["path"]: (out / "node-1" / entry["path"]).read_bytes() for entry in manifest["files"]}
    log = f"data/{layout.METADATA_LOG_DIR}"
    assert copied == {
        "data/meta.properties": (data_dir / "meta.properties").read_bytes(),
        f"{log}/archive/{layout.segment_name(0)}": b"archived at 0",
        f"{log}/{layout.segment_name(100)}": b"live at 100",
        f"{log}/archive/{layout.segment_name(200)}": b"live at 200",
    }
    _assert_manifest_is_the_copy(out / "node-1")
    assert os.listdir(out) == ["node-1"]


def test_a_file_that_keeps_vanishing_is_named_and_nothing_is_left_behind(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listings = _keep_deleting_after_listing(data_dir, monkeypatch)
    out = tmp_path / "out"
    with pytest.raises(StorageError, match=f"{layout.segment_name(300)} vanished before it could be read"):
        collect(data_dir, out)
    assert listings() == LISTINGS_MAX
    assert os.listdir(out) == []


def test_a_failed_or_killed_collect_does_not_block_the_next(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    killed = out / f".node-{NODE_ID}.partial-999-left"  # a killed run's staging folder
    (killed / "data").mkdir(parents=True)
    with monkeypatch.context() as node_running:
        _keep_deleting_after_listing(data_dir, node_running)
        with pytest.raises(StorageError):
            collect(data_dir, out)
    manifest = collect(data_dir, out)
    assert [entry["path"] for entry in manifest["files"]][1:] == [
        f"data/{layout.METADATA_LOG_DIR}/archive/{layout.segment_name(0)}",
        f"data/{layout.METADATA_LOG_DIR}/{layout.segment_name(100)}",
        f"data/{layout.METADATA_LOG_DIR}/{layout.segment_name(200)}",
    ]
    _assert_manifest_is_the_copy(out / "node-1")
    assert sorted(os.listdir(out)) == [killed.name, "node-1"]


def test_the_audit_skips_a_staging_folder_left_by_a_killed_collect(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    killed = out / f".node-{NODE_ID}.partial-999-left" / "data"  # as far as a killed run got
    format_storage(killed, "collect-test", NODE_ID, initial_cluster=True)
    collect(data_dir, out)
    assert {(f.node, Path(f.path).name) for f in discover([out])} == {
        ("1", layout.segment_name(offset)) for offset in (0, 100, 200)
    }


def _keep_deleting_after_listing(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """A node that writes segment 300 before each listing and deletes it right after;
    returns how many listings were made."""
    real_listing = layout.history_files
    listings = 0

    def node_deletes_while_listed(path: Path, *, include_archive: bool = True) -> list[Path]:
        nonlocal listings
        listings += 1
        _segment(data_dir, 300).write_bytes(b"gone before it is read")
        listed = real_listing(path, include_archive=include_archive)
        _segment(data_dir, 300).unlink()
        return listed

    monkeypatch.setattr(layout, "history_files", node_deletes_while_listed)
    return lambda: listings


def _assert_manifest_is_the_copy(target: Path) -> None:
    """The manifest lists exactly the files copied, each once, with their sizes and SHA-256."""
    manifest = json.loads((target / MANIFEST).read_text())
    on_disk = sorted(
        p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file() and p.name != MANIFEST
    )
    assert sorted(entry["path"] for entry in manifest["files"]) == on_disk
    for entry in manifest["files"]:
        copy = target / entry["path"]
        data = copy.read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["bytes"], entry["sha256"])
        assert stat.S_IMODE(copy.stat().st_mode) == 0o444


def _segment(data_dir: Path, base_offset: int, *, archived: bool = False) -> Path:
    log = layout.log_dir(data_dir)
    return (log / layout.ARCHIVE_DIR if archived else log) / layout.segment_name(base_offset)


def _archive(path: Path) -> None:
    """As the node retires a file: renamed into ``archive/`` under its own name."""
    os.replace(path, layout.free_archive_path(path.parent / layout.ARCHIVE_DIR, path.name))
