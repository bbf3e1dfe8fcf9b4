"""The audit's voter-set check (KIP-853): the voter set changes only through VotersRecords,
by one member at a time, and every LeaderChange names the set in effect."""

from __future__ import annotations

from pathlib import Path

from raftka.audit.decode import VOTERS, decode_file
from raftka.audit.files import discover
from raftka.audit.walk import is_head, walk_node
from raftka.raft import control
from raftka.raft.batch import Batch, BatchKind
from raftka.raft.effects import Write
from raftka.raft.storage.file import FileStorage
from raftka.raft.storage.meta import format_storage
from raftka.raft.voters import Voter, VoterSet, encode_kraft_version

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"


def voters(*ids: int) -> VoterSet:
    return VoterSet(Voter(i, f"dir{i}aaaaaaaaaaaaaaaaaa") for i in ids)


class Log:
    def __init__(self) -> None:
        self.batches: list[Batch] = []

    def add(self, epoch: int, kind: BatchKind, *records: bytes) -> None:
        base = self.batches[-1].next_offset if self.batches else 0
        self.batches.append(Batch(base, epoch, 1_700_000_000_000, kind, records))

    def leader_change(self, epoch: int, leader: int, ids: set[int]) -> None:
        self.add(epoch, BatchKind.LEADER_CHANGE, control.encode_leader_change(leader, frozenset(ids), epoch))

    def change(self, epoch: int, voter_set: VoterSet) -> None:
        self.add(epoch, BatchKind.VOTERS, encode_kraft_version(1), voter_set.encode())

    def audit(self, data_dir: Path) -> list[dict]:
        format_storage(data_dir, CLUSTER, 1, initial_cluster=True)
        storage = FileStorage(data_dir)
        storage.load()
        storage.write(Write(write_id=1, append=tuple(self.batches)))
        storage.close()
        heads = [r for f in discover([data_dir]) for r in decode_file(f) if is_head(r)]
        return walk_node(heads).violations


def checks_failed(violations: list[dict]) -> list[str]:
    return sorted(v["check"] for v in violations)


def test_changes_one_member_at_a_time_pass(tmp_path: Path) -> None:
    log = Log()
    log.leader_change(1, 1, {1, 2, 3})
    log.change(1, voters(1, 2, 3))  # the bootstrap set, written by the first leader
    log.change(1, voters(1, 2, 3, 4))
    log.change(1, voters(2, 3, 4))  # the leader removed itself
    log.leader_change(2, 2, {2, 3, 4})
    assert checks_failed(log.audit(tmp_path)) == []


def test_a_change_of_two_members_is_an_error(tmp_path: Path) -> None:
    log = Log()
    log.leader_change(1, 1, {1, 2, 3})
    log.change(1, voters(1, 4, 5))
    (violation,) = log.audit(tmp_path)
    assert violation["check"] == "voter_changes_one_at_a_time"
    assert "[1, 2, 3] to [1, 4, 5]" in violation["message"]


def test_a_voter_set_changed_without_a_record_is_an_error(tmp_path: Path) -> None:
    log = Log()
    log.leader_change(1, 1, {1, 2, 3})
    log.leader_change(2, 2, {2, 3, 4})
    (violation,) = log.audit(tmp_path)
    assert violation["check"] == "epoch_starts_with_leader_change"
    assert "it changes only through a VotersRecord" in violation["message"]


def test_every_row_of_a_voter_change_carries_its_voters(tmp_path: Path) -> None:
    log = Log()
    log.leader_change(1, 1, {1, 2, 3})
    log.change(1, voters(1, 2, 3, 4))
    log.audit(tmp_path)
    rows = [r for f in discover([tmp_path]) for r in decode_file(f) if r.kind == BatchKind.VOTERS.name]
    assert [(r.type, r.voters) for r in rows] == [("KRAFT_VERSION", [1, 2, 3, 4]), (VOTERS, [1, 2, 3, 4])]
