"""Raft's own control records: the LeaderChange that opens every epoch, and NoOp.

Encoded as small JSON documents so ``raftka log dump`` shows them as they are.
"""

from __future__ import annotations

import json

NOOP_RECORD = b"{}"


def encode_leader_change(leader_id: int, voters: frozenset[int], epoch: int) -> bytes:
    return json.dumps(
        {"type": "LeaderChange", "leader_id": leader_id, "epoch": epoch, "voters": sorted(voters)},
        separators=(",", ":"),
    ).encode()


def decode_control(record: bytes) -> dict:
    try:
        value = json.loads(record)
    except ValueError:
        return {"type": "Unknown", "raw": record.hex()}
    return value if isinstance(value, dict) else {"type": "Unknown", "raw": record.hex()}
