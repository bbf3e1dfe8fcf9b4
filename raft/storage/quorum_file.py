"""The ``quorum-state`` file: epoch, vote and known leader, as JSON replaced atomically.

A vote is granted only after this file is durable, so a restarted node can never vote
twice in one epoch.
"""

from __future__ import annotations

import json
from pathlib import Path

from raft.effects import QuorumStateData
from raft.storage import fsio, layout
from raft.storage.base import StorageError

DATA_VERSION = 1
INITIAL = QuorumStateData(epoch=0, voted_id=-1, leader_id=-1)


def write_quorum_state(path: Path, state: QuorumStateData) -> None:
    document = {
        "epoch": state.epoch,
        "voted_id": state.voted_id,
        "leader_id": state.leader_id,
        "data_version": DATA_VERSION,
    }
    fsio.write_atomically(path, json.dumps(document).encode(), temp_suffix=layout.TMP_SUFFIX)


def read_quorum_state(path: Path) -> QuorumStateData:
    """The stored state; a node that never wrote one is in epoch 0 with no vote and no leader."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return INITIAL
    try:
        document = json.loads(raw)
        fields = (document["epoch"], document["voted_id"], document["leader_id"], document["data_version"])
    except (ValueError, TypeError, KeyError) as exc:
        raise _damaged(path, f"it is not a quorum-state document ({exc})") from exc
    epoch, voted_id, leader_id, version = fields
    if version != DATA_VERSION:
        raise _damaged(path, f"data_version {version!r} is not {DATA_VERSION}")
    if not all(type(v) is int for v in fields) or epoch < 0 or voted_id < -1 or leader_id < -1:
        raise _damaged(path, f"its values are out of range: {document}")
    return QuorumStateData(epoch=epoch, voted_id=voted_id, leader_id=leader_id)


def _damaged(path: Path, why: str) -> StorageError:
    return StorageError(
        f"cannot read {path}: {why}. The file is replaced atomically, so this is disk damage: "
        "restore the node from a peer (wipe its data dir and reformat it)"
    )
