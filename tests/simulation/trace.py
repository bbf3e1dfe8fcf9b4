"""A bounded, lazily formatted event trace: one line per event.

Lines are stored as tuples and formatted only when printed, so tracing every event
costs little when nothing fails.
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any, TextIO

from raftka.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
)

# (time_ms, node_id, what, detail, role, epoch, hw, leo); node_id -1 for the simulator itself.
Line = tuple[int, int, str, Any, str, int, int, int]


def describe_message(msg: Message) -> str:
    """A short, human summary of one RPC."""
    if isinstance(msg, VoteRequest):
        kind = "PreVote" if msg.pre_vote else "Vote"
        return f"{kind}Req(e={msg.candidate_epoch} last=({msg.log_end_offset},{msg.last_epoch}))"
    if isinstance(msg, VoteResponse):
        kind = "PreVote" if msg.pre_vote else "Vote"
        return f"{kind}Resp(e={msg.epoch} granted={msg.vote_granted} err={msg.error.name} L={msg.leader_id})"
    if isinstance(msg, BeginQuorumEpochRequest):
        return f"BeginQuorumReq(e={msg.epoch} L={msg.leader_id})"
    if isinstance(msg, BeginQuorumEpochResponse):
        return f"BeginQuorumResp(e={msg.epoch} err={msg.error.name})"
    if isinstance(msg, EndQuorumEpochRequest):
        return f"EndQuorumReq(e={msg.epoch} L={msg.leader_id} pref={list(msg.preferred_successors)})"
    if isinstance(msg, EndQuorumEpochResponse):
        return f"EndQuorumResp(e={msg.epoch} err={msg.error.name})"
    if isinstance(msg, FetchRequest):
        return f"FetchReq(e={msg.epoch} off={msg.fetch_offset} last_e={msg.last_fetched_epoch})"
    if isinstance(msg, FetchResponse):
        parts = [f"FetchResp(e={msg.epoch} L={msg.leader_id} hw={msg.high_watermark} err={msg.error.name}"]
        if msg.batches:
            parts.append(f" batches=[{msg.batches[0].base_offset},{msg.batches[-1].next_offset})")
            parts.append(f"@e{msg.batches[-1].epoch}")
        if msg.diverging is not None:
            parts.append(f" diverging=({msg.diverging.offset},{msg.diverging.epoch})")
        if msg.snapshot_id is not None:
            parts.append(f" snapshot=({msg.snapshot_id.offset},{msg.snapshot_id.epoch})")
        return "".join(parts) + ")"
    if isinstance(msg, FetchSnapshotRequest):
        return f"FetchSnapReq(e={msg.epoch} id=({msg.snapshot_id.offset},{msg.snapshot_id.epoch}) pos={msg.position})"
    if isinstance(msg, FetchSnapshotResponse):
        return (
            f"FetchSnapResp(e={msg.epoch} err={msg.error.name} id=({msg.snapshot_id.offset},"
            f"{msg.snapshot_id.epoch}) pos={msg.position}/{msg.size})"
        )
    return repr(msg)


def describe_envelope(env: Envelope) -> str:
    return f"{env.src}->{env.dst} #{env.rpc_id} {describe_message(env.msg)}"


def _format_detail(detail: Any) -> str:
    if detail is None:
        return ""
    if isinstance(detail, Envelope):
        return describe_envelope(detail)
    return str(detail)


def format_line(line: Line) -> str:
    time_ms, node_id, what, detail, role, epoch, hw, leo = line
    who = "sim" if node_id < 0 else f"n{node_id}"
    text = f"{time_ms:>7} {who:<4} {what:<10} {_format_detail(detail)}"
    if role:
        text += f"  -> {role} e={epoch} hw={hw} leo={leo}"
    return text


class Trace:
    """Keeps the last ``lines_max`` lines; with ``echo`` it also prints every line as it happens."""

    def __init__(self, lines_max: int, echo: TextIO | None = None) -> None:
        self.lines_max = lines_max
        self._lines: deque[Line] = deque(maxlen=lines_max)
        self._echo = echo

    def add(self, line: Line) -> None:
        self._lines.append(line)
        if self._echo is not None:
            print(format_line(line), file=self._echo)

    def dump(self, out: TextIO = sys.stdout) -> None:
        for line in self._lines:
            print(format_line(line), file=out)

    def lines(self) -> list[str]:
        return [format_line(line) for line in self._lines]
