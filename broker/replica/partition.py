"""One partition replica on this broker: its log, its role, and, while it leads, the
state of its followers, the ISR and the high watermark (Kafka's ``Partition``).

Kafka's replication rules, kept here as plain methods with no I/O of their own:

- The leader's high watermark is the smallest log end offset among the maximal ISR
  (the committed ISR plus any member an in-flight AlterPartition adds), and it only
  moves forward. A member whose log end offset is not known in this leader epoch (it
  has not fetched since the election) holds the high watermark where it is.
- A follower's fetch offset counts as its log end offset only when its last fetched
  epoch agrees with the leader's log; otherwise the answer carries the diverging epoch
  and the follower truncates first (KIP-595's fetch validation). A consumer that sends
  its last fetched epoch is checked the same way and moves its position back (KIP-320).
- A new leader's high watermark is its own, which may lag the old leader's: until it
  reaches the start of this leader epoch, offsets that depend on it (ListOffsets for the
  latest offset, or a timestamp past it) are answered OFFSET_NOT_AVAILABLE, so clients
  retry rather than take a stale, lower offset (Kafka's ``fetchOffsetForTimestamp``).
- A follower is caught up when a fetch reaches the leader's log end, or reaches what
  the log end was at its previous fetch (Kafka's lastCaughtUpTime). One not caught up
  for ``replica.lag.time.max.ms`` leaves the ISR; one whose log end reaches the high
  watermark and this epoch's start offset joins it again. Both go through the
  controller (AlterPartition, compare-and-set on the partition epoch); one change is in
  flight at a time, and none while a change waits for the metadata to catch up.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftka.broker.log.partition_log import PartitionLog
from raftka.broker.partitions import PartitionRole, Role
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
UNKNOWN_OFFSET = -1


class PartitionError(Exception):
    """A request this replica cannot serve; ``code`` is the answer's error."""

    def __init__(self, code: int, message: str, leader_id: int = -1, leader_epoch: int = -1) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower in the current leader epoch."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_leader_end: int = UNKNOWN_OFFSET  # the leader's log end at the follower's previous fetch
    last_fetch_ms: int = 0
    broker_epoch: int = -1  # the follower's, as its last fetch named it (KIP-903); -1: none yet


class Partition:
    def __init__(self, topic: str, partition: int, topic_id: bytes, log: PartitionLog, local_id: int) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.log = log
        self.local_id = local_id
        self.role: Role | None = None
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.pending_isr: tuple[int, ...] | None = None  # an AlterPartition in flight
        self.isr_change_waits_for_epoch = -1  # a refused change: no new one before this partition epoch
        self.high_watermark = 0
        self.epoch_start_offset = 0  # the log end when this broker became leader in this epoch
        self.followers: dict[int, FollowerState] = {}

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    # role changes ----------------------------------------------------------------------

    def become_leader(self, role: PartitionRole, now_ms: int) -> bool:
        """Lead at ``role.leader_epoch``; False when that epoch is not newer than ours
        (the same epoch with a newer partition epoch only updates the ISR)."""
        if role.leader_epoch < self.leader_epoch:
            return False
        new_epoch = not self.is_leader or role.leader_epoch > self.leader_epoch
        self._adopt(role)
        if new_epoch:
            self.epoch_start_offset = self.log.log_end_offset
            self.high_watermark = min(
                max(self.high_watermark, self.log.log_start_offset), self.log.log_end_offset
            )
        # Within an epoch a reassignment may change the replicas: track the ones it adds from
        # scratch, keep what the others fetched, forget the ones it removed.
        known = {} if new_epoch else self.followers
        self.followers = {
            r: known.get(r) or FollowerState(last_caught_up_ms=now_ms if r in self.isr else 0)
            for r in self.replicas
            if r != self.local_id
        }
        return new_epoch

    def become_follower(self, role: PartitionRole) -> bool:
        """Follow ``role.leader`` at its epoch; False when the epoch is older than ours."""
        if role.leader_epoch < self.leader_epoch:
            return False
        changed = self.role is not Role.FOLLOWER or role.leader_epoch != self.leader_epoch
        self._adopt(role)
        self.followers = {}
        return changed

    def _adopt(self, role: PartitionRole) -> None:
        if role.leader_epoch != self.leader_epoch:  # a change asked in an older epoch is void
            self.pending_isr = None
        self.role = role.role
        self.leader_id = role.leader
        self.leader_epoch = role.leader_epoch
        if role.partition_epoch >= self.partition_epoch:
            self.partition_epoch = role.partition_epoch
            self.replicas = role.replicas
            self.isr = role.isr
            if self.pending_isr is not None and self.pending_isr == role.isr:
                self.pending_isr = None
            if role.partition_epoch >= self.isr_change_waits_for_epoch:
                self.isr_change_waits_for_epoch = -1
        if self.role is not Role.LEADER:
            self.pending_isr = None

    # requests ---------------------------------------------------------------------------

    def check_leader(self, current_leader_epoch: int) -> None:
        """PartitionError unless this replica leads at the epoch the client knows (-1: any)."""
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise self._error(
                    E.FENCED_LEADER_EPOCH,
                    f"leader epoch {current_leader_epoch} is older than {self.leader_epoch}",
                )
            if current_leader_epoch > self.leader_epoch:
                raise self._error(
                    E.UNKNOWN_LEADER_EPOCH,
                    f"leader epoch {current_leader_epoch} is newer than {self.leader_epoch}",
                )
        if not self.is_leader:
            raise self._error(E.NOT_LEADER_OR_FOLLOWER, f"broker {self.local_id} does not lead {self.name}")

    def check_high_watermark_caught_up(self) -> None:
        """PartitionError while this leader's high watermark is below its epoch's start offset."""
        if self.high_watermark < self.epoch_start_offset:
            raise self._error(
                E.OFFSET_NOT_AVAILABLE,
                f"{self.name}: the high watermark {self.high_watermark} has not reached leader epoch "
                f"{self.leader_epoch}'s start offset {self.epoch_start_offset} yet: retry",
            )

    def _error(self, code: int, message: str) -> PartitionError:
        return PartitionError(code, message, self.leader_id, self.leader_epoch)

    def diverging_epoch(self, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
        """(epoch, end offset) a fetcher must go back to, or None when what it read agrees."""
        if last_fetched_epoch < 0:
            return None
        epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch != last_fetched_epoch or fetch_offset > end:
            return epoch, end
        return None

    def update_follower(self, replica_id: int, fetch_offset: int, now_ms: int, broker_epoch: int) -> None:
        """Record a follower's fetch (its log agrees with ours up to ``fetch_offset``), made by
        its incarnation at ``broker_epoch`` (the leader checked it is the current one)."""
        state = self.followers.get(replica_id)
        if state is None:
            return
        state.broker_epoch = broker_epoch
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = now_ms
        elif fetch_offset >= state.last_fetch_leader_end >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.last_fetch_leader_end = leader_end
        state.last_fetch_ms = now_ms
        state.log_end_offset = fetch_offset

    def maximal_isr(self) -> frozenset[int]:
        return frozenset(self.isr) | frozenset(self.pending_isr or ())

    def maybe_advance_high_watermark(self) -> bool:
        """Move the high watermark to the ISR's smallest log end offset; True if it moved."""
        if not self.is_leader:
            return False
        new = self.log.log_end_offset
        for replica in self.maximal_isr():
            if replica == self.local_id:
                continue
            state = self.followers.get(replica)
            if state is None or state.log_end_offset == UNKNOWN_OFFSET:
                return False
            new = min(new, state.log_end_offset)
        if new <= self.high_watermark:
            return False
        self.high_watermark = new
        self.log.producers.transactions.high_watermark_moved(new)
        return True

    @property
    def last_stable_offset(self) -> int:
        """Below it no transaction is open and every record is committed (leader and followers alike)."""
        return self.log.last_stable_offset(self.high_watermark)

    def follow_high_watermark(self, leader_high_watermark: int) -> None:
        """A follower's high watermark: the leader's, as far as this log reaches; never back."""
        self.high_watermark = max(self.high_watermark, min(leader_high_watermark, self.log.log_end_offset))
        self.log.producers.transactions.high_watermark_moved(self.high_watermark)

    # ISR changes ------------------------------------------------------------------------

    def _can_change_isr(self) -> bool:
        return self.is_leader and self.pending_isr is None and self.isr_change_waits_for_epoch < 0

    def isr_to_shrink(self, now_ms: int, lag_max_ms: int) -> tuple[int, ...] | None:
        """The ISR without followers not caught up for ``lag_max_ms``, if any are."""
        if not self._can_change_isr():
            return None
        lagging = {
            r
            for r in self.isr
            if r != self.local_id
            and now_ms - self.followers.get(r, FollowerState()).last_caught_up_ms > lag_max_ms
        }
        return tuple(r for r in self.isr if r not in lagging) if lagging else None

    def isr_to_expand(self, replica_id: int) -> tuple[int, ...] | None:
        """The ISR with ``replica_id`` back in, once it holds everything committed and has
        fetched in this epoch."""
        if not self._can_change_isr() or replica_id in self.isr or replica_id not in self.replicas:
            return None
        state = self.followers.get(replica_id)
        if state is None or state.log_end_offset < max(self.high_watermark, self.epoch_start_offset):
            return None
        return tuple(r for r in self.replicas if r in self.isr or r == replica_id)

    def broker_epochs(self, isr: tuple[int, ...], own_epoch: int) -> list[int]:
        """The broker epoch of each member of ``isr`` as this leader knows it (-1: not heard
        from in this leader epoch), for AlterPartition (KIP-903)."""
        return [
            own_epoch if r == self.local_id else self.followers.get(r, FollowerState()).broker_epoch
            for r in isr
        ]

    def isr_change_sent(self, new_isr: tuple[int, ...]) -> None:
        self.pending_isr = new_isr

    def isr_change_committed(self, isr: tuple[int, ...], partition_epoch: int) -> None:
        """The controller's answer to our change (the metadata log brings it too)."""
        if partition_epoch > self.partition_epoch:
            self.isr = isr
            self.partition_epoch = partition_epoch
        self.pending_isr = None

    def isr_change_superseded(self, wait_for_partition_epoch: int) -> None:
        """Our change committed but elected another leader: it stays pending (the maximal
        ISR still counts it) until the metadata reaches ``wait_for_partition_epoch``, whose
        role change clears it."""
        self.isr_change_waits_for_epoch = max(self.isr_change_waits_for_epoch, wait_for_partition_epoch)

    def isr_change_refused(self, wait_for_partition_epoch: int) -> None:
        """No new change until the metadata reaches ``wait_for_partition_epoch`` (-1: none)."""
        self.pending_isr = None
        if wait_for_partition_epoch > self.partition_epoch:
            self.isr_change_waits_for_epoch = wait_for_partition_epoch
