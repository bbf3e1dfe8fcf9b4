"""A trivial stand-in core for testing the harness itself: a fixed leader, no elections.

Node ``min(voters)`` leads epoch 1 forever; everyone else fetches from it. The leader
serves only what it holds durably, so no follower ever holds a record the leader could
lose, and its high watermark is the majority of voters' durable fetch positions. It
speaks the real contract (Ready, one write at a time, rpc ids), which is what the
harness needs to exercise its disks, network, state machines and invariants.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from raftka.raft.batch import Batch, BatchKind, OffsetAndEpoch
from raftka.raft.config import RaftConfig
from raftka.raft.core import NotLeaderError
from raftka.raft.effects import QuorumStateData, Ready, Snapshot, Write
from raftka.raft.messages import Envelope, Error, FetchRequest, FetchResponse
from raftka.raft.storage.base import LoadedState

EPOCH = 1
FETCH_RETRY_MS = 50


class FakeCore:
    def __init__(
        self,
        node_id: int,
        voters: frozenset[int],
        cluster_id: str,
        config: RaftConfig,
        loaded: LoadedState,
        rng: random.Random,
        now_ms: int,
    ) -> None:
        self.node_id = node_id
        self.voters = voters
        self.cluster_id = cluster_id
        self.leader_id = min(voters)
        self.epoch = EPOCH
        self.is_leader = node_id == self.leader_id
        self.role = "leader" if self.is_leader else ("follower" if node_id in voters else "observer")
        self.high_watermark = -1
        self.log_start_offset = 0
        self._log: list[Batch] = list(loaded.batches)
        self._durable_end = self.log_end_offset
        self._applied = 0
        self._out = Ready()
        self._write_id = 0
        self._writing: int | None = None  # log end the write in flight makes durable
        self._fetch_due_ms = now_ms
        self._fetching = False
        self._match: dict[int, int] = {}
        if self.is_leader and loaded.quorum_state.epoch != EPOCH:
            if not self._log:
                self._log.append(Batch(0, EPOCH, now_ms, BatchKind.LEADER_CHANGE, (b"leader",)))
            self._flush(QuorumStateData(EPOCH, -1, self.node_id))

    @property
    def log_end_offset(self) -> int:
        return self._log[-1].next_offset if self._log else 0

    # events ----------------------------------------------------------------------------
    def step(self, envelope: Envelope, now_ms: int) -> None:
        msg = envelope.msg
        if isinstance(msg, FetchRequest) and self.is_leader:
            if msg.replica_id in self.voters:
                self._match[msg.replica_id] = msg.fetch_offset
            self._advance_hw()
            batches = tuple(b for b in self._log if msg.fetch_offset <= b.base_offset < self._durable_end)
            resp = FetchResponse(Error.NONE, EPOCH, self.leader_id, self.high_watermark, 0, batches)
            self._out.send.append(Envelope(self.node_id, envelope.src, resp, envelope.rpc_id))
        elif isinstance(msg, FetchResponse) and not self.is_leader:
            self._fetching = False
            self._fetch_due_ms = now_ms + (0 if msg.batches else 5)
            for batch in msg.batches:
                if batch.base_offset == self.log_end_offset:
                    self._log.append(batch)
            self._flush(None)
            self.high_watermark = max(self.high_watermark, min(msg.high_watermark, self.log_end_offset))
            self._commit()

    def unreachable(self, peer_id: int, now_ms: int) -> None:
        self._fetching = False
        self._fetch_due_ms = now_ms + FETCH_RETRY_MS

    def poll(self, now_ms: int) -> int:
        if self.is_leader:
            return 1000
        if not self._fetching and self._writing is None and now_ms >= self._fetch_due_ms:
            last_epoch = self._log[-1].epoch if self._log else 0
            req = FetchRequest(self.cluster_id, self.node_id, EPOCH, self._durable_end, last_epoch, 0)
            self._out.send.append(Envelope(self.node_id, self.leader_id, req))
            self._fetching = True
            self._fetch_due_ms = now_ms + FETCH_RETRY_MS
        if self._fetching:  # a lost request or response: fetch again after a while
            if now_ms >= self._fetch_due_ms:
                self._fetching = False
                return 0
            return self._fetch_due_ms - now_ms
        return max(1, self._fetch_due_ms - now_ms)

    def propose(self, records: Sequence[bytes], now_ms: int) -> OffsetAndEpoch:
        if not self.is_leader:
            raise NotLeaderError(self.leader_id, EPOCH)
        batch = Batch(self.log_end_offset, EPOCH, now_ms, BatchKind.DATA, tuple(records))
        self._log.append(batch)
        self._flush(None)
        return OffsetAndEpoch(batch.base_offset, EPOCH)

    def persisted(self, write_id: int, now_ms: int) -> None:
        assert write_id == self._write_id and self._writing is not None
        self._durable_end, self._writing = self._writing, None
        if self.is_leader:
            self._advance_hw()
        self._flush(None)

    def snapshot_saved(self, snapshot: Snapshot) -> None:
        pass

    def resign(self, now_ms: int) -> None:
        pass

    def ready(self) -> Ready:
        out, self._out = self._out, Ready()
        return out

    # internals ---------------------------------------------------------------------------
    def _flush(self, quorum_state: QuorumStateData | None) -> None:
        if self._writing is not None or (quorum_state is None and self._durable_end == self.log_end_offset):
            return
        self._write_id += 1
        tail = tuple(b for b in self._log if b.base_offset >= self._durable_end)
        self._out.write = Write(self._write_id, quorum_state=quorum_state, append=tail)
        self._writing = self.log_end_offset

    def _advance_hw(self) -> None:
        positions = sorted(
            (self._durable_end if v == self.node_id else self._match.get(v, 0) for v in self.voters),
            reverse=True,
        )
        hw = positions[len(self.voters) // 2]
        if hw > self.high_watermark and hw > 0:
            self.high_watermark = hw
        self._commit()

    def _commit(self) -> None:
        for batch in self._log:
            if batch.base_offset >= self._applied and batch.next_offset <= self.high_watermark:
                self._out.committed.append(batch)
                self._applied = batch.next_offset
