"""Properties of the audit, without a JVM: histories the controller's own handlers write
audit clean, on one node or several with different snapshots and archives; and each
targeted corruption of such a history trips the check that is about it."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from raftka.audit.checks import ERROR
from raftka.audit.plain import audit_paths, replay_input
from raftka.audit.replay import BASE, replay, replay_order
from raftka.audit.synthetic import Shape, write_history
from raftka.metadata import records
from raftka.metadata.delta import MetadataDelta
from raftka.metadata.records import MetadataRecord
from raftka.metadata.snapshot import decode_image, encode_image
from raftka.raft import control
from raftka.raft.batch import Batch, BatchKind, SnapshotId
from raftka.raft.effects import Snapshot
from raftka.raft.snapshot_schedule import SnapshotPolicy
from raftka.raft.storage import layout, snapshot_file
from tests.unit import metadata_support as m
from tests.unit.storage_support import flip_byte, memory_folder

SMALL = Shape(brokers=3, topics=3, partitions=2, groups=2, commit_partitions_max=4)
NEVER = SnapshotPolicy(
    snapshot_interval_records=1 << 40, snapshot_interval_bytes=1 << 60, snapshot_interval_ms=0
)
RECORDS = 400
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _folder() -> AbstractContextManager[Path]:
    return memory_folder("audit-prop-")


def _errors(root: Path) -> set[str]:
    return {v["check"] for v in audit_paths([root]).all_violations if v["severity"] == ERROR}


@SETTINGS
@given(
    seed=st.integers(0, 2**32),
    nodes=st.integers(1, 3),
    interval=st.integers(30, 400),
    segment=st.integers(300, 4000),
)
def test_histories_the_controller_writes_audit_clean(
    seed: int, nodes: int, interval: int, segment: int
) -> None:
    with _folder() as root:
        for node in range(1, nodes + 1):  # one log, each node with its own snapshots and segments
            policy = SnapshotPolicy(snapshot_interval_records=interval * node)
            write_history(root / f"node-{node}" / "data", RECORDS, seed=seed, node_id=node, shape=SMALL,
                          snapshot_policy=policy, segment_bytes=segment, archive=node != 2)  # fmt: skip
        assert _errors(root) == set()


class _Corrupt:
    """A ``write_history`` mutation: watches the batches go by and changes one of them."""

    def __init__(self, after: int) -> None:
        self.after = after  # batches to let through first
        self.seen = 0
        self.done = False
        self.partitions: dict[tuple[bytes, int], list[int]] = {}
        self.fenced: set[int] = set()
        self.producer_ids = False
        self.last_epoch = -1  # of the batch before

    def __call__(self, batch: Batch) -> Batch | None:
        self.seen += 1
        decoded = [records.decode(r) for r in batch.records] if batch.kind == BatchKind.DATA else []
        if not self.done and self.seen > self.after:
            changed = self.change(batch, decoded)
            if changed is not batch:
                self.done = True
                self.last_epoch = batch.epoch
                return changed
        self._track(decoded)
        self.last_epoch = batch.epoch
        return batch

    def change(self, batch: Batch, decoded: list[MetadataRecord]) -> Batch | None:
        raise NotImplementedError

    def _track(self, decoded: list[MetadataRecord]) -> None:
        for r in decoded:
            kind = r.WhichOneof("record")
            if kind == "partition":
                self.partitions[(r.partition.topic_id, r.partition.partition_id)] = list(r.partition.replicas)
            elif kind == "remove_topic":
                self.partitions = {
                    k: v for k, v in self.partitions.items() if k[0] != r.remove_topic.topic_id
                }
            elif kind == "fence_broker":
                self.fenced.add(r.fence_broker.id)
            elif kind == "register_broker":
                self.fenced.add(r.register_broker.broker_id)
            elif kind == "unfence_broker":
                self.fenced.discard(r.unfence_broker.id)
            elif kind == "producer_ids":
                self.producer_ids = True


def _as(batch: Batch, *recs: MetadataRecord) -> Batch:
    """``batch``'s place in the log (same offsets) holding ``recs`` instead."""
    assert len(recs) == len(batch.records)
    return Batch(
        batch.base_offset, batch.epoch, batch.timestamp_ms, BatchKind.DATA, tuple(map(records.encode, recs))
    )


def _single(test: Callable[[Batch, list[MetadataRecord]], Batch | None]) -> type[_Corrupt]:
    return type("Corruption", (_Corrupt,), {"change": lambda self, b, d: test(b, d)})


class _EpochBack(_Corrupt):
    """A batch in the middle of an epoch written with the epoch before. (Not an epoch's
    first batch: one epoch lower there equals the batch before, and what the audit sees
    is an epoch begun without its LeaderChange, a different check.)"""

    def change(self, batch: Batch, decoded: list[MetadataRecord]) -> Batch | None:
        return (
            Batch(batch.base_offset, batch.epoch - 1, batch.timestamp_ms, batch.kind, batch.records)
            if batch.epoch and batch.epoch == self.last_epoch
            else batch
        )


class _EpochWithoutLeaderChange(_Corrupt):
    def change(self, batch: Batch, decoded: list[MetadataRecord]) -> Batch | None:
        return (
            Batch(batch.base_offset, batch.epoch + 1, batch.timestamp_ms, batch.kind, batch.records)
            if decoded
            else batch
        )


class _LeaderNotVoter(_Corrupt):
    def change(self, batch: Batch, decoded: list[MetadataRecord]) -> Batch | None:
        if batch.kind != BatchKind.LEADER_CHANGE:
            return batch
        record = control.encode_leader_change(7, frozenset({1, 2, 3}), batch.epoch)
        return Batch(batch.base_offset, batch.epoch, batch.timestamp_ms, batch.kind, (record,))


class _VotersChanged(_Corrupt):
    """A leader that names itself a voter: raftka's voter set is static, so it is no voter."""

    def change(self, batch: Batch, decoded: list[MetadataRecord]) -> Batch | None:
        if batch.kind != BatchKind.LEADER_CHANGE:
            return batch
        record = control.encode_leader_change(7, frozenset({1, 2, 3, 7}), batch.epoch)
        return Batch(batch.base_offset, batch.epoch, batch.timestamp_ms, batch.kind, (record,))


class _UnknownTopic(_Corrupt):
    def change(self, batch: Batch, decoded: list[MetadataRecord]) -> Batch | None:
        if len(decoded) != 1:
            return batch
        return _as(batch, m.commit("g", m.topic_id(0xDEAD), 0, 1))


class _IsrOutsideReplicas(_Corrupt):
    def change(self, batch: Batch, decoded: list[MetadataRecord]) -> Batch | None:
        if len(decoded) != 1 or not self.partitions:
            return batch
        (tid, p) = sorted(self.partitions)[0]
        return _as(batch, m.change(tid, p, isr=[999]))


class _UnregisteredBroker(_Corrupt):
    """A partition's replicas grow by broker 999, which never registered; nothing else is wrong."""

    def change(self, batch: Batch, decoded: list[MetadataRecord]) -> Batch | None:
        if len(decoded) != 1 or not self.partitions:
            return batch
        (tid, p), replicas = sorted(self.partitions.items())[0]
        return _as(batch, m.change(tid, p, replicas=[*replicas, 999]))


class _BrokerEpoch(_Corrupt):
    def change(self, batch: Batch, decoded: list[MetadataRecord]) -> Batch | None:
        if len(decoded) != 1:
            return batch
        return _as(batch, m.register(150, batch.base_offset + 7))


class _ProducerIdsBack(_Corrupt):
    def change(self, batch: Batch, decoded: list[MetadataRecord]) -> Batch | None:
        if len(decoded) != 1 or not self.producer_ids:
            return batch
        return _as(batch, m.producer_ids(1))


class _FencedLeader(_Corrupt):
    """Where a fenced broker re-registers, it is made a partition's leader instead."""

    def change(self, batch: Batch, decoded: list[MetadataRecord]) -> Batch | None:
        if len(decoded) != 1 or decoded[0].WhichOneof("record") != "register_broker":
            return batch
        broker = decoded[0].register_broker.broker_id
        replicated = sorted(k for k, replicas in self.partitions.items() if broker in replicas)
        if broker not in self.fenced or not replicated:
            return batch
        tid, p = replicated[0]
        return _as(batch, m.change(tid, p, leader=broker, isr=[broker]))


class _PartitionEpochBack(_Corrupt):
    """A second PartitionRecord for a partition that has moved on, with its epochs at 0."""

    def change(self, batch: Batch, decoded: list[MetadataRecord]) -> Batch | None:
        if len(decoded) != 1 or decoded[0].WhichOneof("record") != "partition_change" or not self.partitions:
            return batch
        r = decoded[0].partition_change
        replicas = self.partitions.get((r.topic_id, r.partition_id))
        if replicas is None:
            return batch
        return _as(batch, m.partition(r.topic_id, r.partition_id, replicas, isr=replicas[:1]))


CORRUPTIONS = {
    "epochs_monotonic": _EpochBack,
    "epoch_starts_with_leader_change": _EpochWithoutLeaderChange,
    "records_replay": _UnknownTopic,
    "partition_epochs_increase": _PartitionEpochBack,
    "broker_epochs": _BrokerEpoch,
    "fenced_brokers_hold_nothing": _FencedLeader,
    "producer_ids_increase": _ProducerIdsBack,
}


@SETTINGS
@given(seed=st.integers(0, 2**32), after=st.integers(40, 150), check=st.sampled_from(sorted(CORRUPTIONS)))
def test_each_corruption_trips_its_check(seed: int, after: int, check: str) -> None:
    corruption = CORRUPTIONS[check](after)
    with _folder() as root:
        write_history(
            root / "node-1" / "data", 1_500, seed=seed, shape=SMALL, snapshot_policy=NEVER, mutate=corruption
        )
        # A rare history offers no place for a corruption (seed 184 never re-registers a
        # fenced broker that holds a replica); the test below makes sure each has one.
        assume(corruption.done)
        assert check in _errors(root)


@pytest.mark.parametrize("check", sorted(CORRUPTIONS))
def test_every_corruption_finds_its_place_in_a_standard_history(check: str) -> None:
    """So that no corruption goes untested by the property above."""
    corruption = CORRUPTIONS[check](40)
    with _folder() as root:
        write_history(
            root / "node-1" / "data", 1_500, seed=0, shape=SMALL, snapshot_policy=NEVER, mutate=corruption
        )
        assert corruption.done, "the history offered no place for the corruption"
        assert check in _errors(root)


@SETTINGS
@given(seed=st.integers(0, 2**32), where=st.floats(0.1, 0.9))
def test_a_missing_segment_is_a_gap(seed: int, where: float) -> None:
    with _folder() as root:
        data_dir = root / "node-1" / "data"
        write_history(data_dir, RECORDS, seed=seed, shape=SMALL, snapshot_policy=NEVER, segment_bytes=1_000)
        segments = [p for p in layout.history_files(data_dir) if p.name.endswith(layout.SEGMENT_SUFFIX)]
        segments[1 + int(where * (len(segments) - 2))].unlink()
        assert "offsets_contiguous" in _errors(root)


@SETTINGS
@given(seed=st.integers(0, 2**32), after=st.integers(40, 150))
def test_a_replayable_bad_isr_is_refused_by_replay(seed: int, after: int) -> None:
    corruption = _IsrOutsideReplicas(after)
    with _folder() as root:
        write_history(
            root / "node-1" / "data", 1_500, seed=seed, shape=SMALL, snapshot_policy=NEVER, mutate=corruption
        )
        assert corruption.done
        assert "records_replay" in _errors(root)


@SETTINGS
@given(seed=st.integers(0, 2**32), after=st.integers(40, 150))
def test_a_partition_change_bringing_in_an_unregistered_broker_is_refused_by_replay(
    seed: int, after: int
) -> None:
    corruption = _UnregisteredBroker(after)
    with _folder() as root:
        write_history(
            root / "node-1" / "data", 1_500, seed=seed, shape=SMALL, snapshot_policy=NEVER, mutate=corruption
        )
        assert corruption.done
        assert any(
            (v["check"], v["severity"]) == ("records_replay", ERROR)
            and "broker 999 is not registered" in v["message"]
            for v in audit_paths([root]).all_violations
        )


@SETTINGS
@given(seed=st.integers(0, 2**32), later=st.booleans())
def test_a_leader_change_naming_no_voter_is_caught(seed: int, later: bool) -> None:
    """The first epoch's LeaderChange, or a later failover's."""
    corruption = _LeaderNotVoter(1 if later else 0)
    with _folder() as root:
        write_history(
            root / "node-1" / "data", 3_000, seed=seed, shape=SMALL, snapshot_policy=NEVER, mutate=corruption
        )
        assert corruption.done
        assert "epoch_starts_with_leader_change" in _errors(root)


@SETTINGS
@given(seed=st.integers(0, 2**32))
def test_a_leader_change_naming_a_voter_set_of_its_own_is_caught(seed: int) -> None:
    """A later failover's LeaderChange: the first epoch's names the voter set."""
    corruption = _VotersChanged(1)
    with _folder() as root:
        write_history(
            root / "node-1" / "data", 3_000, seed=seed, shape=SMALL, snapshot_policy=NEVER, mutate=corruption
        )
        assert corruption.done
        assert "epoch_starts_with_leader_change" in _errors(root)


@SETTINGS
@given(seed=st.integers(0, 2**32), which=st.integers(0, 50))
def test_a_snapshot_that_is_not_the_replayed_image_is_caught(seed: int, which: int) -> None:
    with _folder() as root:
        data_dir = root / "node-1" / "data"
        write_history(
            data_dir,
            RECORDS,
            seed=seed,
            shape=SMALL,
            snapshot_policy=SnapshotPolicy(snapshot_interval_records=60),
        )
        snapshots = [p for p in layout.history_files(data_dir) if p.name.endswith(layout.SNAPSHOT_SUFFIX)]
        path = snapshots[which % len(snapshots)]
        snapshot = snapshot_file.read_snapshot(path)
        delta = MetadataDelta(decode_image(snapshot.data))
        delta.replay(m.config("", "log.retention.ms", "1", resource_type=4))
        image = delta.apply(snapshot.id.offset)
        forged = Snapshot(SnapshotId(snapshot.id.offset, snapshot.id.epoch), encode_image(image))
        path.write_bytes(snapshot_file.encode_snapshot(forged))  # valid CRCs, wrong contents
        assert "snapshot_equals_replay" in _errors(root)


@SETTINGS
@given(seed=st.integers(0, 2**32), where=st.floats(0.0, 0.95))
def test_damage_before_the_last_batch_is_an_error_a_torn_tail_is_not(seed: int, where: float) -> None:
    with _folder() as root:
        data_dir = root / "node-1" / "data"
        write_history(data_dir, RECORDS, seed=seed, shape=SMALL, snapshot_policy=NEVER, segment_bytes=2_000)
        segments = [p for p in layout.history_files(data_dir) if p.name.endswith(layout.SEGMENT_SUFFIX)]
        newest = segments[-1]
        with newest.open("ab") as f:
            f.write(b"\x00\x00\x00\x40torn")  # a write cut short at the very end
        assert _errors(root) == set()
        middle = segments[int(where * (len(segments) - 1))]
        flip_byte(middle, int(where * (middle.stat().st_size - 1)))
        assert "no_damage" in _errors(root)


@SETTINGS
@given(seed=st.integers(0, 2**32), after=st.integers(5, 40))
def test_two_committed_copies_of_one_offset_disagree(seed: int, after: int) -> None:
    """Voters 1 and 2 (a majority) hold one batch; observer 101 (committed batches only) another."""
    with _folder() as root:
        for node in (1, 2):
            write_history(
                root / f"node-{node}" / "data",
                RECORDS,
                seed=seed,
                node_id=node,
                shape=SMALL,
                snapshot_policy=NEVER,
            )
        corruption = _single(
            lambda b, d: _as(b, m.commit("other", m.topic_id(5), 0, 1)) if len(d) == 1 else b
        )(after)
        write_history(root / "node-101" / "data", RECORDS, seed=seed, node_id=101, shape=SMALL, snapshot_policy=NEVER,
                      mutate=corruption)  # fmt: skip
        assert corruption.done
        assert "nodes_agree" in _errors(root)
        shutil.rmtree(root / "node-101")  # one voter alone holding it: an uncommitted copy, no error
        write_history(root / "node-3" / "data", RECORDS, seed=seed, node_id=3, shape=SMALL, snapshot_policy=NEVER,
                      mutate=_single(lambda b, d: _as(b, m.commit("other", m.topic_id(5), 0, 1)) if len(d) == 1 else b)(after))  # fmt: skip
        assert "nodes_agree" not in _errors(root)


@SETTINGS
@given(seed=st.integers(0, 2**32), cut=st.integers(0, 1_000))
def test_a_history_replayed_in_pieces_cut_at_a_snapshot_gives_the_same_events(seed: int, cut: int) -> None:
    """What the Spark job does to replay in parallel: the piece after the cut starts from
    a copy of the snapshot there (role BASE), the snapshot itself is checked by the piece before."""
    with _folder() as root:
        write_history(root / "node-1" / "data", RECORDS, seed=seed, shape=SMALL,
                      snapshot_policy=SnapshotPolicy(snapshot_interval_records=50))  # fmt: skip
        audited = audit_paths([root])
        plain = sorted(replay_input(audited.rows, audited.merged), key=replay_order)
        boundaries = sorted({r.offset for r in plain if r.kind == "SNAPSHOT" and r.offset > 0})
        at = boundaries[cut % len(boundaries)]
        before = [r for r in plain if (r.batch_offset - (r.kind == "SNAPSHOT")) < at]
        base = [r._replace(role=BASE) for r in plain if r.kind == "SNAPSHOT" and r.offset == at]
        after = base + [r for r in plain if (r.batch_offset - (r.kind == "SNAPSHOT")) >= at]
        assert [*replay(before), *replay(after)] == list(replay(plain))
