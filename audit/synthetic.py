"""A synthetic but realistic metadata history, written by the project's own code.

Requests (offset commits, ISR changes, broker sessions lapsing and restarting, topics,
configs, producer id blocks, leader failovers) are planned by the controller's own pure
request handlers (``metadata.*_ops``) on the current image, appended as batches through
``FileStorage`` and snapshotted by ``MetadataStateMachine`` when its policy says so, with
an archive: what a long-lived controller leaves on disk. Offset commits dominate, as
they do in a busy cluster (every consumer commits every few seconds); an idle leader's
NoOps come next. One seed, one history.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from raftka.metadata import broker_ops, config_ops, offset_ops, records, topic_ops
from raftka.metadata.image import NO_LEADER, MetadataImage
from raftka.metadata.plan import MetadataRecord
from raftka.metadata.state_machine import MetadataStateMachine
from raftka.raft import control
from raftka.raft.batch import Batch, BatchKind
from raftka.raft.effects import Snapshot, Write
from raftka.raft.snapshot_schedule import SnapshotPolicy
from raftka.raft.storage.file import FileStorage
from raftka.raft.storage.meta import format_storage
from raftka.v1 import controller_pb2 as pb

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: histories do not depend on when they are made
VOTERS = frozenset({1, 2, 3})
FIRST_BROKER = 101
WRITE_BATCHES = 2_000  # batches per storage write: one fsync each
RECORDS_MAX = 4_096  # raft.append_max_records

DEFAULT_SNAPSHOTS = SnapshotPolicy()  # what a controller runs with
# (weight, operation): what a busy cluster's controller appends, in proportion
MIX = (
    (70, "commit"),
    (15, "noop"),
    (7, "isr"),
    (2, "config"),
    (2, "producer_ids"),
    (1, "broker_restart"),
    (1, "topic"),
    (1, "failover"),
)


@dataclass(frozen=True, slots=True)
class Shape:
    """How big the cluster is; the defaults are a small production cluster."""

    brokers: int = 3
    topics: int = 20
    partitions: int = 6
    groups: int = 10
    commit_partitions_max: int = 12  # partitions one commit request carries
    step_ms_max: int = 200  # time between two requests, at most
    mix: tuple[tuple[int, str], ...] = MIX  # leave an operation out to leave its records out


def without(*operations: str) -> tuple[tuple[int, str], ...]:
    """``MIX`` with ``operations`` left out (all of them: a history of LeaderChanges only)."""
    unknown = set(operations) - {name for _, name in MIX}
    assert not unknown, unknown
    return tuple((weight, name) for weight, name in MIX if name not in operations)


@dataclass
class Stats:
    records: int = 0
    batches: int = 0
    snapshots: int = 0
    epochs: int = 1
    operations: dict[str, int] = field(default_factory=dict)


def write_history(
    data_dir: Path,
    records_wanted: int,
    *,
    seed: int = 0,
    node_id: int = 1,
    shape: Shape = Shape(),
    snapshot_policy: SnapshotPolicy = DEFAULT_SNAPSHOTS,
    segment_bytes: int = 8 << 20,
    archive: bool = True,
    mutate: Callable[[Batch], Batch | None] | None = None,
) -> Stats:
    """Write at least ``records_wanted`` records of history into a formatted ``data_dir``.

    ``mutate`` sees each batch before it is written and may change or drop it (``None``):
    the planning goes on from the batch as planned, so a test can damage one spot of an
    otherwise valid history.
    """
    format_storage(data_dir, "synthetic-history-000000", node_id, initial_cluster=True)
    storage = FileStorage(data_dir, segment_bytes=segment_bytes, archive=archive, archive_max_bytes=0)
    storage.load()
    writer = _Writer(storage, snapshot_policy, mutate)
    try:
        _Cluster(writer, random.Random(seed), shape).run(records_wanted)
        writer.flush()
    finally:
        storage.close()
    return writer.stats


class _Writer:
    """Batches appended in order, replayed by the state machine, written in chunks."""

    def __init__(
        self, storage: FileStorage, policy: SnapshotPolicy, mutate: Callable[[Batch], Batch | None] | None
    ) -> None:
        self.storage = storage
        self.stats = Stats()
        self.state = MetadataStateMachine(policy, self._save_snapshot)
        self.mutate = mutate
        self.pending: list[Batch] = []
        self.offset = 0
        self.epoch = 1
        self.time_ms = START_MS
        self._write_id = 0

    @property
    def image(self) -> MetadataImage:
        return self.state.image

    def append(self, kind: BatchKind, raw: tuple[bytes, ...]) -> None:
        batch = Batch(self.offset, self.epoch, self.time_ms, kind, raw)
        self.offset = batch.next_offset
        self.stats.records += len(raw)
        self.stats.batches += 1
        written = self.mutate(batch) if self.mutate is not None else batch
        if written is not None:
            self.pending.append(written)
        if len(self.pending) >= WRITE_BATCHES:
            self.flush()
        self.state.apply(batch)

    def data(self, planned: list[MetadataRecord]) -> None:
        for start in range(0, len(planned), RECORDS_MAX):
            self.append(
                BatchKind.DATA, tuple(records.encode(r) for r in planned[start : start + RECORDS_MAX])
            )

    def leader_change(self, leader: int) -> None:
        self.append(BatchKind.LEADER_CHANGE, (control.encode_leader_change(leader, VOTERS, self.epoch),))

    def flush(self) -> None:
        if self.pending:
            self._write_id += 1
            self.storage.write(Write(write_id=self._write_id, append=tuple(self.pending)))
            self.pending = []

    def _save_snapshot(self, snapshot: Snapshot) -> None:
        self.flush()  # everything the snapshot covers is on disk before segments retire
        self.storage.save_snapshot(snapshot)
        self.stats.snapshots += 1


class _Cluster:
    """The controller's side of a cluster's life: requests planned on the current image."""

    def __init__(self, writer: _Writer, rng: random.Random, shape: Shape) -> None:
        self.w, self.rng, self.shape = writer, rng, shape
        self.limits = topic_ops.Limits(max_partitions=10_000, records_max=RECORDS_MAX)
        self.topic_serial = 0
        self.committed: dict[tuple[str, str, int], int] = {}
        weights, self.operations = zip(*shape.mix, strict=True) if shape.mix else ((), ())
        self.weights = list(weights)

    def run(self, records_wanted: int) -> None:
        self.w.leader_change(1)
        for broker in range(FIRST_BROKER, FIRST_BROKER + self.shape.brokers):
            self._register(broker)
        for _ in range(self.shape.topics):
            self._create_topic()
        stats = self.w.stats
        while stats.records < records_wanted and self.operations:
            operation = self.rng.choices(self.operations, self.weights)[0]
            stats.operations[operation] = stats.operations.get(operation, 0) + 1
            self.w.time_ms += self.rng.randint(1, self.shape.step_ms_max)
            getattr(self, f"_{operation}")()

    # operations ----------------------------------------------------------------------------

    def _noop(self) -> None:
        self.w.append(BatchKind.NOOP, (control.NOOP_RECORD,))

    def _failover(self) -> None:
        self.w.epoch += 1 + (self.rng.random() < 0.1)  # now and then an election that never won
        self.w.time_ms += self.rng.randint(50, 400)  # the leaderless window
        self.w.stats.epochs += 1
        self.w.leader_change(self.rng.choice(sorted(VOTERS)))

    def _commit(self) -> None:
        image = self.w.image
        topics = sorted(image.topic_ids_by_name)
        if not topics:
            return
        group = f"group-{self.rng.randrange(self.shape.groups)}"
        request = pb.OffsetCommitRequest(group=group)
        for name in self.rng.sample(topics, min(2, len(topics))):
            partitions = sorted(image.topic(name).partitions)  # type: ignore[union-attr]
            chosen = self.rng.sample(partitions, min(len(partitions), self.shape.commit_partitions_max // 2))
            entries = []
            for partition in chosen:
                key = (group, name, partition)
                step = self.rng.choice((0, 0, -5)) if self.rng.random() < 0.02 else self.rng.randint(1, 500)
                self.committed[key] = max(0, self.committed.get(key, 0) + step)
                entries.append(pb.OffsetCommitPartition(partition=partition, offset=self.committed[key]))
            request.topics.add(topic=name, partitions=entries)
        self.w.data(offset_ops.commit(image, request, self.w.time_ms).records)

    def _isr(self) -> None:
        """A leader shrinks its ISR (a slow follower) or takes a caught-up replica back."""
        image = self.w.image
        live = {b.broker_id for b in image.unfenced_brokers()}
        candidates = [
            (topic.topic_id, pid, state)
            for topic in image.topics_by_id.values()
            for pid, state in topic.partitions.items()
            if state.leader != NO_LEADER
        ]
        if not candidates:
            return
        topic_id, pid, state = self.rng.choice(sorted(candidates, key=lambda c: (c[0], c[1])))
        missing = [b for b in state.replicas if b not in state.isr and b in live]
        others = [b for b in state.isr if b != state.leader]
        if missing:
            new_isr = [*state.isr, missing[0]]
        elif others:
            new_isr = [b for b in state.isr if b != others[-1]]
        else:
            return
        leader = image.brokers[state.leader]
        request = pb.AlterPartitionRequest(broker_id=leader.broker_id, broker_epoch=leader.epoch)
        data = pb.AlterPartitionData(
            partition=pid,
            leader_epoch=state.leader_epoch,
            new_isr=new_isr,
            partition_epoch=state.partition_epoch,
            new_isr_broker_epochs=[image.brokers[b].epoch for b in new_isr],
        )
        request.topics.add(topic_id=topic_id, partitions=[data])
        self.w.data(broker_ops.alter_partition(image, request).records)

    def _broker_restart(self) -> None:
        """A broker's session lapses: it is fenced step by step, restarts and rejoins."""
        registered = sorted(self.w.image.brokers)
        if not registered:
            return
        broker_id = self.rng.choice(registered)
        while not self.w.image.brokers[broker_id].fenced:
            self.w.data(broker_ops.fence(self.w.image, self.w.image.brokers[broker_id], RECORDS_MAX))
        self.w.time_ms += self.rng.randint(1_000, 9_000)
        self._register(broker_id)

    def _register(self, broker_id: int) -> None:
        request = pb.BrokerRegistrationRequest(
            broker_id=broker_id, incarnation_id=str(uuid.UUID(int=self.rng.getrandbits(128)))
        )
        request.listeners.add(name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id)
        previous = self.w.image.brokers.get(broker_id)
        if previous is not None:  # a clean restart: it stays in the ELRs it is in
            request.previous_broker_epoch = previous.epoch
        self.w.data(broker_ops.register(self.w.image, request, self.w.offset, has_live_session=False).records)
        registration = self.w.image.brokers[broker_id]
        self.w.time_ms += self.rng.randint(100, 2_000)
        beat = pb.BrokerHeartbeatRequest(
            broker_id=broker_id, broker_epoch=registration.epoch, current_metadata_offset=self.w.offset
        )
        self.w.data(broker_ops.heartbeat(self.w.image, beat, (), RECORDS_MAX).records)

    def _topic(self) -> None:
        names = sorted(self.w.image.topic_ids_by_name)
        if names and len(names) >= self.shape.topics and self.rng.random() < 0.5:
            request = pb.DeleteTopicsRequest(names=[self.rng.choice(names)])
            self.w.data(topic_ops.delete_topics(self.w.image, request).records)
        else:
            self._create_topic()

    def _create_topic(self) -> None:
        if not self.shape.topics:
            return
        self.topic_serial += 1
        name = f"topic-{self.rng.randrange(self.shape.topics * 2)}"  # names come back after deletes
        if name in self.w.image.topic_ids_by_name:
            return
        rf = min(3, len(self.w.image.unfenced_brokers()))
        if rf == 0:
            return
        topic = pb.CreatableTopic(name=name, num_partitions=self.shape.partitions, replication_factor=rf)
        topic.configs["min.insync.replicas"] = str(min(2, rf))
        request = pb.CreateTopicsRequest(topics=[topic])
        new_id = uuid.UUID(int=self.rng.getrandbits(128)).bytes
        self.w.data(topic_ops.create_topics(self.w.image, request, self.limits, lambda: new_id).records)

    def _config(self) -> None:
        names = sorted(self.w.image.topic_ids_by_name)
        if not names:
            return
        op = pb.AlterConfigOp(name="retention.ms", value=str(self.rng.randrange(60_000, 10**9)))
        request = pb.AlterConfigsRequest(
            topics=[pb.AlterTopicConfigs(topic=self.rng.choice(names), ops=[op])]
        )
        self.w.data(config_ops.alter(self.w.image, request).records)

    def _producer_ids(self) -> None:
        brokers = self.w.image.unfenced_brokers() or list(self.w.image.brokers.values())
        if not brokers:
            return
        broker = self.rng.choice(brokers)
        request = pb.AllocateProducerIdsRequest(broker_id=broker.broker_id, broker_epoch=broker.epoch)
        self.w.data(broker_ops.allocate_producer_ids(self.w.image, request).records)
