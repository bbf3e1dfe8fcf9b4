"""An incident, written to disk with the project's own writers, for the audit tests.

Three controllers (1, 2, 3) and three brokers (101-103). The story, in epochs:

- epoch 1, leader 1: brokers register and are unfenced; topics ``orders`` (2 partitions,
  min.insync.replicas 2) and ``events`` (1 partition) are created; configs, commits. Its
  last batch (an offset commit at ``DIVERGED_AT``) reached only node 1, which then died.
- epoch 2: an election that never committed a leader (no batch carries it).
- epoch 3, leader 2, ``GAP_MS`` after epoch 1's last batch: broker 101 is fenced (orders-0
  elects 102 cleanly, every ISR drops 101); orders-1's ISR shrinks below its minimum;
  broker 103 is fenced and events-0, whose last ISR member it was, goes offline; 101 and
  103 restart (re-register) and are unfenced, events-0 elects 103 again; orders-0 takes
  101 back into its ISR and then back as its preferred leader; commits rewind and stall;
  ``events`` is deleted and its name reused; producer id blocks.
- epoch 4, leader 3, after ``SECOND_GAP_MS``: a config change, a commit.

On disk: node 1 holds epoch 1 with its uncommitted tail in ``archive/`` (the node was
later handed a snapshot, which archives its old log) and the rest after that snapshot;
node 2 snapshotted at ``SNAPSHOT_AT`` without an archive (segments below it deleted) and
its newest segment ends in a torn write; node 3 holds the whole log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from raftka.metadata import records
from raftka.metadata.image import EMPTY
from raftka.metadata.snapshot import encode_image
from raftka.metadata.state_machine import MetadataStateMachine
from raftka.raft import control
from raftka.raft.batch import Batch, BatchKind, SnapshotId
from raftka.raft.effects import Snapshot, Write
from raftka.raft.snapshot_schedule import SnapshotPolicy
from raftka.raft.storage import layout
from raftka.raft.storage.file import FileStorage
from raftka.raft.storage.meta import format_storage
from tests.unit import metadata_support as m

ORDERS, EVENTS, EVENTS_AGAIN = m.topic_id(1), m.topic_id(2), m.topic_id(3)
T0 = 1_700_000_000_000
GAP_MS = 3_000
SECOND_GAP_MS = 700
STEP_MS = 100
VOTERS = frozenset({1, 2, 3})
CLUSTER_ID = "incident-cluster-0000000"
NEVER = SnapshotPolicy(
    snapshot_interval_records=1 << 40, snapshot_interval_bytes=1 << 60, snapshot_interval_ms=0
)


@dataclass
class Incident:
    root: Path
    batches: list[Batch]  # the committed history
    diverged: Batch  # node 1's uncommitted tail
    offsets: dict[str, int]  # where each step of the story starts
    snapshot_at: int

    def node_dir(self, node: int) -> Path:
        return self.root / f"node-{node}" / "data"


class _Log:
    """Batches in the order the story writes them, offsets and timestamps assigned;
    ``replace``: steps written with other records (a corruption), by name."""

    def __init__(self, replace: Mapping[str, tuple[m.Record, ...]]) -> None:
        self.replace = replace
        self.batches: list[Batch] = []
        self.offsets: dict[str, int] = {}
        self.epoch = 0
        self.time_ms = T0

    @property
    def next_offset(self) -> int:
        return self.batches[-1].next_offset if self.batches else 0

    def leader(self, leader: int, epoch: int, after_ms: int = STEP_MS) -> None:
        self.epoch = epoch
        self.time_ms += after_ms
        record = control.encode_leader_change(leader, VOTERS, epoch)
        self.batches.append(Batch(self.next_offset, epoch, self.time_ms, BatchKind.LEADER_CHANGE, (record,)))

    def data(self, name: str, *recs: m.Record) -> Batch:
        recs = self.replace.get(name, recs)
        self.offsets[name] = self.next_offset
        self.time_ms += STEP_MS
        batch = Batch(
            self.next_offset, self.epoch, self.time_ms, BatchKind.DATA, tuple(map(records.encode, recs))
        )
        self.batches.append(batch)
        return batch

    def register(self, name: str, broker: int) -> int:
        epoch = self.next_offset
        self.data(name, m.register(broker, epoch))
        return epoch


def _story(replace: Mapping[str, tuple[m.Record, ...]]) -> tuple[_Log, Batch]:
    log = _Log(replace)
    log.leader(1, 1)
    b101, b102, b103 = (log.register(f"register-{b}", b) for b in (101, 102, 103))
    log.data("unfence", m.unfence(101, b101), m.unfence(102, b102), m.unfence(103, b103))
    log.data(
        "create-orders",
        m.topic("orders", ORDERS),
        m.partition(ORDERS, 0, [101, 102, 103]),
        m.partition(ORDERS, 1, [102, 103, 101]),
        m.config("orders", "min.insync.replicas", "2"),
    )
    log.data("create-events", m.topic("events", EVENTS), m.partition(EVENTS, 0, [103, 101]))
    log.data("config-retention", m.config("orders", "retention.ms", "1000"))
    log.data("commits", m.commit("g1", ORDERS, 0, 10), m.commit("g1", ORDERS, 0, 20))
    diverged = Batch(
        log.next_offset,
        1,
        log.time_ms + STEP_MS,
        BatchKind.DATA,
        (records.encode(m.commit("g1", ORDERS, 0, 99)),),
    )

    log.leader(2, 3, after_ms=GAP_MS)  # epoch 2 never committed a leader
    log.data(
        "fence-101",
        m.change(ORDERS, 0, leader=102, isr=[102, 103]),
        m.change(ORDERS, 1, isr=[102, 103]),
        m.change(EVENTS, 0, isr=[103]),
        m.fence(101, b101),
    )
    log.data("shrink-orders-1", m.change(ORDERS, 1, isr=[102]))
    log.data("fence-103", m.change(ORDERS, 0, isr=[102]), m.change(EVENTS, 0, leader=-1), m.fence(103, b103))
    b101 = log.register("restart-101", 101)
    log.data("unfence-101", m.unfence(101, b101))
    b103 = log.register("restart-103", 103)
    log.data("unfence-103", m.unfence(103, b103), m.change(EVENTS, 0, leader=103))
    log.data("expand-orders-0", m.change(ORDERS, 0, isr=[102, 101]))
    log.data("preferred-orders-0", m.change(ORDERS, 0, leader=101))
    log.data("rewind", m.commit("g1", ORDERS, 0, 30), m.commit("g1", ORDERS, 0, 15))
    log.data("stall", m.commit("g1", ORDERS, 0, 15))
    log.data("advance", m.commit("g1", ORDERS, 0, 40), m.commit("g2", ORDERS, 1, 5))
    log.data("rebalance-g1", m.group_rebalance("g1", 1, ["a", "b"], assignment=[("orders", [0, 1])]))
    log.data("rebalance-g1-again", m.group_rebalance("g1", 3, ["a"], assignment=[("orders", [0, 1])]))
    log.data("delete-events", m.remove(EVENTS))
    log.data("reuse-events", m.topic("events", EVENTS_AGAIN), m.partition(EVENTS_AGAIN, 0, [102]))
    log.data("producer-ids", m.producer_ids(1000, 102, b102), m.producer_ids(2000, 102, b102))
    log.leader(3, 4, after_ms=SECOND_GAP_MS)
    log.data("config-events", m.config("events", "retention.ms", "5000"))
    log.data("last-commit", m.commit("g2", ORDERS, 1, 9))
    return log, diverged


def build_incident(root: Path, replace: Mapping[str, tuple[m.Record, ...]] | None = None) -> Incident:
    """``replace``: steps of the story written with other records, by name (see ``_Log``)."""
    log, diverged = _story(replace or {})
    snapshot_at = log.offsets["restart-103"]  # mid-epoch 3
    incident = Incident(root, log.batches, diverged, log.offsets, snapshot_at)
    snapshot = _snapshot(log.batches, snapshot_at)
    for node in (1, 2, 3):
        format_storage(incident.node_dir(node), CLUSTER_ID, node, initial_cluster=True)
    before = [b for b in log.batches if b.base_offset < diverged.base_offset]
    after = [b for b in log.batches if b.base_offset >= snapshot_at]

    node1 = FileStorage(incident.node_dir(1), archive=True, segment_bytes=512)
    node1.load()
    node1.write(Write(write_id=1, append=(*before, diverged)))
    node1.write(Write(write_id=2, install_snapshot=snapshot, append=tuple(after)))
    node1.close()

    node2 = FileStorage(incident.node_dir(2), segment_bytes=512)
    node2.load()
    node2.write(Write(write_id=1, append=tuple(log.batches)))
    node2.save_snapshot(snapshot)
    node2.close()
    newest = layout.list_segments(layout.log_dir(incident.node_dir(2)))[-1][1]
    with newest.open("ab") as f:  # a write cut short: a header claiming more bytes than follow
        f.write(b"\x00\x00\x01\x00" + b"\x07" * 20)

    node3 = FileStorage(incident.node_dir(3), segment_bytes=512)
    node3.load()
    node3.write(Write(write_id=1, append=tuple(log.batches)))
    node3.close()
    return incident


def _snapshot(batches: list[Batch], offset: int) -> Snapshot:
    """The image at ``offset`` as every controller's state machine would snapshot it."""
    state = MetadataStateMachine(NEVER, lambda _: None)
    for batch in batches:
        if batch.base_offset < offset:
            state.apply(batch)
    last = max((b for b in batches if b.base_offset < offset), key=lambda b: b.base_offset)
    assert state.image.offset == offset and state.image is not EMPTY
    data = encode_image(state.image, timestamp_ms=last.timestamp_ms)
    return Snapshot(SnapshotId(offset, last.epoch), data)
