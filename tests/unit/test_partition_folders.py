"""Partition folders for every topic name Kafka allows, on a real file system: created,
written, deleted (the ``-delete`` rename must fit in 255 bytes), and a restart that
finds ``-delete`` folders removes them and never takes them for partitions."""

from __future__ import annotations

import re
import string
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.broker.log.config import LogConfig
from raftka.broker.log.directory_id import DIRECTORY_ID_FILE
from raftka.broker.log.folder_names import (
    NAME_MAX_BYTES,
    delete_folder,
    is_delete_folder,
    parse_partition_folder,
    partition_folder,
)
from raftka.broker.log.manager import LogManager
from raftka.broker.log.partition_log import METADATA_FILE
from raftka.metadata.validation import TOPIC_NAME_MAX_CHARS, validate_topic_name
from raftka.node.config import PARTITIONS_PER_TOPIC_MAX
from tests.unit.test_partition_log import append

TOPIC_ID = uuid.UUID(int=5).bytes
PARTITION_MAX = PARTITIONS_PER_TOPIC_MAX - 1  # the largest partition id a controller can be configured for
TOPIC_CHARS = string.ascii_letters + string.digits + "._-"
legal_topics = st.integers(1, TOPIC_NAME_MAX_CHARS).flatmap(
    lambda n: st.text(TOPIC_CHARS, min_size=n, max_size=n).filter(lambda t: t not in (".", ".."))
)


def write_one_record(manager: LogManager, topic: str, partition: int) -> None:
    append(manager.get_or_create(topic, partition, TOPIC_ID, LogConfig()), b"v")


def create_and_delete(root: Path, topic: str, partition: int) -> None:
    manager = LogManager(root)
    manager.open_all()
    write_one_record(manager, topic, partition)
    name = partition_folder(topic, partition)
    assert (root / name / METADATA_FILE).exists()
    manager.remove(name)
    left = sorted(p.name for p in root.iterdir())
    assert left == [DIRECTORY_ID_FILE], "the folder and its -delete rename are gone"
    manager.close()


@pytest.mark.parametrize(
    ("length", "partition"), [(249, 0), (236, 0), (230, 0), (214, 0), (213, 0), (1, 0), (249, PARTITION_MAX)]
)
def test_a_partition_log_of_a_topic_of_any_legal_length_is_created_and_deleted(
    tmp_path: Path, length: int, partition: int
) -> None:
    create_and_delete(tmp_path, "t" * length, partition)


@settings(max_examples=60, deadline=None)
@given(topic=legal_topics, partition=st.integers(0, PARTITION_MAX))
def test_every_legal_topic_name_and_partition_creates_and_deletes(topic: str, partition: int) -> None:
    validate_topic_name(topic)  # the strategy makes only names the controller accepts
    with tempfile.TemporaryDirectory() as root:
        create_and_delete(Path(root), topic, partition)


@settings(max_examples=300)
@given(topic=legal_topics, partition=st.integers(0, PARTITION_MAX))
def test_a_delete_folder_fits_a_file_name_and_is_never_read_as_a_partition(
    topic: str, partition: int
) -> None:
    live = partition_folder(topic, partition)
    assert len(live.encode()) <= NAME_MAX_BYTES
    assert parse_partition_folder(live) == (topic, partition)
    doomed = delete_folder(live)
    assert len(doomed.encode()) <= NAME_MAX_BYTES
    shape = re.fullmatch(rf"(.+)-{partition}\.[0-9a-f]{{32}}-delete", doomed)
    assert shape is not None and topic.startswith(shape[1]) and is_delete_folder(doomed)
    assert parse_partition_folder(doomed) is None
    assert delete_folder(live) != doomed, "unique: a topic deleted twice leaves two folders"


def test_a_restart_removes_delete_folders_and_opens_only_partition_folders(tmp_path: Path) -> None:
    """A crash between the rename and the removal leaves a ``-delete`` folder with a whole
    log inside; the next start removes it and does not open it as a partition."""
    topic = "x" * 240
    first = LogManager(tmp_path)
    first.open_all()
    write_one_record(first, topic, 3)
    write_one_record(first, "kept", 0)
    first.close()
    doomed = tmp_path / delete_folder(partition_folder(topic, 3))
    (tmp_path / partition_folder(topic, 3)).rename(doomed)  # renamed, then the crash
    not_a_partition = tmp_path / "lost+found"
    not_a_partition.mkdir()
    (not_a_partition / METADATA_FILE).write_text(f"version: 0\ntopic_id: {TOPIC_ID.hex()}\n")

    again = LogManager(tmp_path)
    again.open_all()
    assert not doomed.exists()
    assert again.names() == ["kept-0"]
    assert again.remove_strays({"kept-0"}) == [], "nothing but partition folders is a stray"
    assert not_a_partition.exists(), "a folder that is no partition's is left alone"
    again.close()
