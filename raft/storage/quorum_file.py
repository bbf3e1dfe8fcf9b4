"""The ``quorum-state`` file: epoch, vote and known leader, written in place in two slots.

A vote is granted only after this file is durable, so a restarted node can never vote
twice in one epoch. It is written on every election step, so it must be cheap: instead
of a temp file, rename and directory fsync (about 8 ms here), each write overwrites the
older of two fixed 512-byte slots with one ``pwrite`` and one ``fdatasync`` (about
0.25 ms). A slot is a JSON line, its CRC-32C and padding, so ``cat`` still shows it;
a write torn by a crash damages only the slot being written, and the other slot still
holds the previous state, which is all that was promised (the write never returned).

The file is created blank (spaces and newlines, fsynced) by its first write, which then
fills slot 1; later writes alternate, each starting only once the one before it completed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import crc32c
import structlog

from raftka.raft.effects import QuorumStateData
from raftka.raft.storage import fsio
from raftka.raft.storage.base import RESTORE_FROM_PEERS, StorageError

_log = structlog.get_logger(__name__)

DATA_VERSION = 1
INITIAL = QuorumStateData(epoch=0, voted_id=-1, leader_id=-1, recovering=True)
SLOT_BYTES = 512
SLOTS = 2


class QuorumStateFile:
    """An open quorum-state file. ``load`` first; then ``write`` as often as needed."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None
        self._sequence = 0  # of the newest valid slot; the next write goes to the other one

    def load(self) -> QuorumStateData:
        """The stored state; a node whose first write never completed is a new disk, ``INITIAL``.

        While slot 0 holds nothing but the blank fill of the file's creation (or zeros, or
        nothing, where the fill never reached the disk), no write but the first was ever
        started, so an unreadable slot 1 is that first write, torn by a crash before it
        returned: no vote it carried was granted, and the node is where it would be had the
        crash come before the file existed. Treating it as new cannot hide a granted vote
        even if that first write did complete and slot 1 was damaged later: ``INITIAL`` is
        ``recovering``, so the voter grants nothing until it has heard every other voter's
        epoch and then votes only in later ones (raft/core.py), as after a lost disk.
        Once slot 0 was written, slot 1 held a completed write first, so two unreadable
        slots are damage to a completed write: refuse to start.
        """
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return INITIAL
        slots = [raw[i * SLOT_BYTES : (i + 1) * SLOT_BYTES] for i in range(SLOTS)]
        valid = [state for state in map(_parse_slot, slots) if state is not None]
        if valid:
            self._sequence, state = max(valid, key=lambda s: s[0])
            return state
        if _is_blank(slots[0]):
            _log.warning("no quorum-state write ever completed", file=str(self._path))
            return INITIAL
        raise StorageError(
            f"{self._path}: both copies of the quorum state (bytes 0-{SLOT_BYTES - 1} and "
            f"{SLOT_BYTES}-{SLOTS * SLOT_BYTES - 1}) were written and neither is intact. A crash tears "
            "only the copy being written, so this is disk damage; the node will not start. "
            f"{RESTORE_FROM_PEERS}"
        )

    def write(self, state: QuorumStateData) -> None:
        fd = self._open()
        self._sequence += 1
        slot = self._sequence % SLOTS
        fsio.pwrite_all(fd, _encode_slot(self._sequence, state), slot * SLOT_BYTES)
        os.fdatasync(fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> int:
        if self._fd is None:
            created = not self._path.exists()
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            if created:
                fsio.pwrite_all(self._fd, b"\n".rjust(SLOT_BYTES) * SLOTS, 0)
                os.fsync(self._fd)
                fsio.fsync_dir(self._path.parent)
        return self._fd


def _encode_slot(sequence: int, state: QuorumStateData) -> bytes:
    document = json.dumps(
        {
            "epoch": state.epoch,
            "voted_id": state.voted_id,
            "leader_id": state.leader_id,
            "data_version": DATA_VERSION,
            "sequence": sequence,
            "recovering": state.recovering,
        },
        separators=(",", ":"),
    ).encode()
    line = b"%s %08x" % (document, crc32c.crc32c(document))
    assert len(line) < SLOT_BYTES, line
    return line.ljust(SLOT_BYTES - 1) + b"\n"


def _is_blank(slot: bytes) -> bool:
    """Nothing but what creating the file writes (spaces, newlines) or leaves (zeros, no bytes)."""
    return not slot.strip(b" \n\0")


def _parse_slot(slot: bytes) -> tuple[int, QuorumStateData] | None:
    """A slot's (sequence, state), or None when it is blank or torn."""
    document, _, crc = slot.rstrip().rpartition(b" ")
    try:
        if not document or int(crc, 16) != crc32c.crc32c(document):
            return None
        value = json.loads(document)
        fields = (
            value["sequence"],
            value["epoch"],
            value["voted_id"],
            value["leader_id"],
            value["data_version"],
        )
    except (ValueError, TypeError, KeyError):
        return None
    sequence, epoch, voted_id, leader_id, version = fields
    recovering = value.get("recovering", False)
    if not all(type(v) is int for v in fields) or version != DATA_VERSION or type(recovering) is not bool:
        return None
    if sequence < 1 or epoch < 0 or voted_id < -1 or leader_id < -1:
        return None
    return sequence, QuorumStateData(epoch, voted_id, leader_id, recovering)
