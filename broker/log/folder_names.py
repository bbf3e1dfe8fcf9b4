"""The names of partition folders in a log dir (Kafka's ``LocalLog`` naming).

A live partition's folder is ``<topic>-<partition>``: with topic names of at most 249
characters and fewer than 100,000 partitions it fits a file name's 255 bytes. A removed
one is first renamed to ``<topic>-<partition>.<32 hex>-delete``, which would not fit for
a topic of more than about 213 characters, so the topic part is shortened to make room
for the suffix, as Kafka's ``logDeleteDirName`` does; the name is only ever read back by
its suffix. A folder is taken for a live partition only if its name parses as one.
"""

from __future__ import annotations

import uuid

from raftka.metadata.validation import ValidationError, validate_topic_name

NAME_MAX_BYTES = 255  # NAME_MAX on Linux and most file systems
DELETE_SUFFIX = "-delete"


def partition_folder(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def delete_folder(folder: str) -> str:
    """A unique name for removing the live folder ``folder`` that fits in a file name."""
    topic, _, partition = folder.rpartition("-")
    suffix = f"-{partition}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
    return topic[: NAME_MAX_BYTES - len(suffix)] + suffix


def is_delete_folder(folder: str) -> bool:
    return folder.endswith(DELETE_SUFFIX)


def parse_partition_folder(folder: str) -> tuple[str, int] | None:
    """(topic, partition) of a live partition's folder; None for any other name."""
    topic, dash, partition = folder.rpartition("-")
    if not dash or not (partition.isascii() and partition.isdigit()):
        return None
    try:
        validate_topic_name(topic)
    except ValidationError:
        return None
    return topic, int(partition)
