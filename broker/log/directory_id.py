"""The log directory's id (KIP-858's ``directory.id``): a UUID written the first time the
directory is used, and registered with the controller.

A broker that crashed (SIGKILL, power cut) finds its directory, and this id, as it left
them: its logs hold what they held up to their last flush. A wiped or replaced directory
has no id, so it gets a new one, and the controller, seeing another id than the one
registered last, knows the broker holds none of its old data
(``raftka.metadata.broker_ops.restart_kind``).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import structlog

from raftka.raft.storage.fsio import write_atomically

DIRECTORY_ID_FILE = "directory.id"

log = structlog.get_logger("raftka.broker.log.directory_id")


def load_or_create(directory: Path) -> bytes:
    """The 16-byte id of ``directory``; a new one, written durably, if it has none (or an
    unreadable one: the directory cannot be vouched for)."""
    path = directory / DIRECTORY_ID_FILE
    try:
        return uuid.UUID(path.read_text().strip()).bytes
    except FileNotFoundError:
        pass
    except ValueError as e:
        log.warning("unreadable log directory id; writing a new one", path=str(path), error=str(e))
    new = uuid.uuid4()
    write_atomically(path, f"{new}\n".encode(), temp_suffix=".tmp")
    log.info("new log directory id", directory=str(directory), directory_id=str(new))
    return new.bytes
