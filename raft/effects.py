"""What the core asks its driver to do.

The core never performs I/O. After each event the driver takes a ``Ready``: make
``write`` durable, send ``send``, hand ``committed`` batches to the layer above and,
if ``restore`` is set, reset the layer above to that snapshot. Messages that promise
durability (a granted vote, a fetch offset, a leader's first epoch message) are held
inside the core and appear in ``send`` only after the driver reports the write that
they depend on with ``RaftCore.persisted(write_id)``: persist-before-acknowledge is a
property of this type, not of the driver's discipline.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftka.raft.batch import Batch, SnapshotId
from raftka.raft.messages import Envelope


@dataclass(frozen=True, slots=True)
class QuorumStateData:
    """The ``quorum-state`` file: fsynced before a vote is granted."""

    epoch: int
    voted_id: int  # -1: no vote in this epoch
    leader_id: int  # -1: no known leader in this epoch
    # Storage that never held a vote or a log (new or wiped disk): the node must not vote
    # until it has caught up. Persisted so a restart in the middle keeps it.
    recovering: bool = False


@dataclass(frozen=True, slots=True)
class Snapshot:
    id: SnapshotId
    data: bytes = field(repr=False)
    # The VotersRecord in effect at ``id.offset`` (raftka.raft.voters), b"" for the
    # configured static set: raft's own header, which the layer above never reads.
    voters: bytes = field(default=b"", repr=False)


@dataclass(frozen=True, slots=True)
class Write:
    """One durable step, applied in this order: snapshot, truncation, appends, quorum state.

    ``install_snapshot`` replaces the whole log (a follower that fetched a snapshot);
    ``truncate_to`` drops every record at or after that offset, always at a batch
    boundary. Appended batches that end at or below the storage's snapshot are skipped:
    an offset commits once a majority holds it, so the layer above may snapshot past
    what this node itself has written yet.

    ``sync`` True: the storage makes everything durable before reporting the write done,
    appends of earlier writes with ``sync`` False included. False (only an observer's pure
    appends): it may report the appends done once written, not fsynced. An observer holds
    only committed records and acknowledges nothing, so a power cut that loses them costs
    a refetch (``RaftCore._must_sync`` says when a node may skip the fsync, and why).
    """

    write_id: int
    quorum_state: QuorumStateData | None = None
    install_snapshot: Snapshot | None = None
    truncate_to: int | None = None
    append: tuple[Batch, ...] = ()
    sync: bool = True


@dataclass(slots=True)
class Ready:
    write: Write | None = None
    send: list[Envelope] = field(default_factory=list)
    committed: list[Batch] = field(default_factory=list)
    restore: Snapshot | None = None

    def __bool__(self) -> bool:
        return bool(self.write or self.send or self.committed or self.restore)
