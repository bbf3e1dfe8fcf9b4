"""One consumer group under Kafka's classic group protocol, with no I/O and no clock.

The coordinator (``raftka.broker.groups.coordinator``) feeds a ``Group`` requests and the time,
and carries out what comes back: an answer now, or ``PARKED`` for a JoinGroup or
SyncGroup that waits for the rest of the group, later answered through ``Delivery``s
returned by the call that completes the phase, and ``Rebalanced`` when a generation's
assignment must be recorded in the metadata log before anyone hears it. Same state and
same inputs give the same outputs, so the protocol is tested without sockets or sleeps.

States and transitions (Kafka's GroupMetadata)::

    Empty --join--> PreparingRebalance --every member joined, or the rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup, recorded--> Stable
    Stable / CompletingRebalance --a member joins anew, leaves, expires or changes its protocols--> PreparingRebalance
    PreparingRebalance --the last member gone--> Empty
    any --group deleted or coordinator moved--> Dead
    (a coordinator taking a group over) --the last recorded rebalance--> Stable (``carried_on``)

The rules, as Kafka applies them:

- A new member (empty member id) gets MEMBER_ID_REQUIRED with its id and joins again
  with it (KIP-394); until then it is pending and counts as not joined. A static member
  (``group.instance.id``, KIP-345) that comes back with a new process takes over its
  old id's place; in a Stable group with the same protocols that causes no rebalance.
- A rebalance waits for every member to join again, at most the longest rebalance
  timeout of its members; those that did not are removed. The first rebalance of an
  empty group waits ``initial_rebalance_delay_ms`` more (extended as members keep
  coming, up to the rebalance timeout) so a group that starts together balances once.
- A join completes a generation: the generation increases, the protocol is the one the
  members rank highest among those all of them support (Kafka's vote), the leader stays
  if it rejoined (else the first member), and only the leader receives the members'
  metadata. The leader's SyncGroup carries every member's assignment; it is recorded,
  then every member waiting in SyncGroup gets its own. A leader that does not sync
  within the rebalance timeout is removed.
- Every request from a member refreshes its session; a member silent for its session
  timeout is removed (a rebalance follows).
- Offsets may be committed by a member of the current generation in any state but
  CompletingRebalance; by anyone else only while the group has no members.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from raftka.metadata.image import GroupGeneration
from raftka.v1 import broker_pb2, controller_pb2

E = controller_pb2.ErrorCode
Pb = broker_pb2
# Protocol metadata (a consumer's subscription) is held for every member until it leaves,
# and the leader's JoinGroup answer carries all of it. Kafka bounds it only through the
# group's record in __consumer_offsets (message.max.bytes, 1 MiB by default); raftka does
# not record it, so it is bounded here: 20 members once held 10 MiB each.
MEMBER_METADATA_MAX_BYTES = 1 << 20  # a member's protocol names and metadata
GROUP_METADATA_MAX_BYTES = 16 << 20  # all members' together


class State(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupLimits:
    """The broker's group settings (Kafka's names without the ``group.`` prefix)."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_size: int = 1_000


class _Parked:
    """The answer to a JoinGroup or SyncGroup comes later, in a Delivery."""

    def __repr__(self) -> str:
        return "PARKED"


PARKED = _Parked()


@dataclass(frozen=True, slots=True)
class Delivery:
    """An answer owed to a member's parked request (``kind``: "join" or "sync")."""

    member_id: str
    kind: str
    response: Pb.JoinGroupResponse | Pb.SyncGroupResponse


@dataclass(frozen=True, slots=True)
class Rebalanced:
    """A generation's assignment, to be recorded before the members hear it
    (``Group.recorded`` with the outcome)."""

    generation_id: int
    protocol_type: str
    protocol_name: str
    leader: str
    # (member id, instance id, client id, host, session timeout ms, rebalance timeout ms, assignment)
    members: tuple[tuple[str, str, str, str, int, int, bytes], ...]


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str  # "": dynamic
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_deadline_ms: int
    awaiting_join: bool = False
    awaiting_sync: bool = False
    assignment: bytes = b""

    @property
    def waiting(self) -> bool:
        """A member parked in JoinGroup or SyncGroup is alive: its session does not run."""
        return self.awaiting_join or self.awaiting_sync

    def metadata_for(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass(slots=True)
class Outcome:
    """What a call produced: the answer to the caller (or PARKED), answers owed to others,
    and a rebalance to record."""

    answer: object
    deliveries: list[Delivery] = field(default_factory=list)
    rebalanced: Rebalanced | None = None
    new_member_id: str = ""  # a join that added a member under a new id: its answer waits under that id


class Group:
    def __init__(self, group_id: str, limits: GroupLimits, *, generation_floor: int = 0) -> None:
        self.group_id = group_id
        self.limits = limits
        self.state = State.EMPTY
        self.generation_id = generation_floor  # the next generation is above any recorded one
        self.protocol_type = ""
        self.protocol_name = ""
        self.leader_id = ""
        self.members: dict[str, Member] = {}  # in join order
        self.pending: dict[str, int] = {}  # member ids handed out by MEMBER_ID_REQUIRED -> deadline
        self.static: dict[str, str] = {}  # group.instance.id -> member id
        self._join_deadline_ms: int | None = None  # PreparingRebalance: when joining stops
        self._initial_delay_ms: int | None = None  # the initial delay in force, if any
        self._longest_join_ms = 0  # the initial delay extends up to here (the rebalance timeout)
        self._sync_deadline_ms: int | None = None  # CompletingRebalance: when the leader must have synced
        self._recording: int | None = None  # the generation whose record is being written

    @classmethod
    def carried_on(
        cls,
        group_id: str,
        limits: GroupLimits,
        recorded: GroupGeneration,
        assignments: Mapping[str, bytes],
        now_ms: int,
    ) -> Group:
        """The group as its last recorded rebalance left it: Stable at that generation with
        its members and their assignments (``assignments``: member id -> bytes), whose
        sessions start now. A coordinator that takes a group over so carries on without a
        rebalance, as Kafka's loads the group metadata it persisted. The members' protocols
        are not recorded, only the one chosen, which each supports: a new member offering
        it is let in, and a member that joins again is taken as having changed its metadata,
        so a rebalance follows, as it does when the leader joins."""
        group = cls(group_id, limits, generation_floor=recorded.generation_id)
        group.state = State.STABLE if recorded.members else State.EMPTY
        group.protocol_type, group.protocol_name = recorded.protocol_type, recorded.protocol_name
        group.leader_id = recorded.leader
        for m in recorded.members:
            group.members[m.member_id] = Member(
                member_id=m.member_id,
                instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                protocol_type=recorded.protocol_type,
                protocols=[(recorded.protocol_name, b"")],  # chosen, so supported by every member
                session_deadline_ms=now_ms + m.session_timeout_ms,
                assignment=assignments.get(m.member_id, b""),
            )
            if m.group_instance_id:
                group.static[m.group_instance_id] = m.member_id
        return group

    # requests ---------------------------------------------------------------------------

    def join(self, request: Pb.JoinGroupRequest, now_ms: int) -> Outcome:
        problem = self._join_problem(request)
        if problem is not None:
            return Outcome(_join_error(request.member_id, *problem))
        instance = request.group_instance_id if request.HasField("group_instance_id") else ""
        if not request.member_id:
            return self._join_new(request, instance, now_ms)
        if request.member_id in self.pending:
            del self.pending[request.member_id]
            return self._add_and_rebalance(request, request.member_id, instance, now_ms)
        member = self.members.get(request.member_id)
        if member is None:
            return Outcome(
                _join_error(
                    request.member_id,
                    E.UNKNOWN_MEMBER_ID,
                    f"{self._name()} has no member {request.member_id!r}",
                )
            )
        if instance and self.static.get(instance) != request.member_id:
            return Outcome(
                _join_error(
                    request.member_id, E.FENCED_INSTANCE_ID, f"{instance!r} belongs to a newer member"
                )
            )
        return self._join_known(member, request, now_ms)

    def sync(self, request: Pb.SyncGroupRequest, now_ms: int) -> Outcome:
        member, problem = self._member_of_generation(request.member_id, request, request.generation_id)
        if problem is not None:
            return Outcome(_sync_error(*problem))
        assert member is not None
        if (
            request.protocol_type
            and request.protocol_type != self.protocol_type
            or (request.protocol_name and request.protocol_name != self.protocol_name)
        ):
            return Outcome(
                _sync_error(E.INCONSISTENT_GROUP_PROTOCOL, "protocol type or name differ from the group's")
            )
        self._touch(member, now_ms)
        if self.state is State.PREPARING_REBALANCE:
            return Outcome(_sync_error(E.REBALANCE_IN_PROGRESS, f"{self._name()} is rebalancing: join again"))
        if self.state is State.STABLE:
            return Outcome(self._sync_answer(member))
        member.awaiting_sync = True
        if member.member_id != self.leader_id or self._recording is not None:
            return Outcome(PARKED)
        assignments = {a.member_id: a.assignment for a in request.assignments}
        self._recording = self.generation_id
        members = tuple(
            (
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                assignments.get(m.member_id, b""),
            )
            for m in self.members.values()
        )
        for member_id, *_, assignment in members:
            self.members[member_id].assignment = assignment
        rebalanced = Rebalanced(
            self.generation_id, self.protocol_type, self.protocol_name, self.leader_id, members
        )
        return Outcome(PARKED, rebalanced=rebalanced)

    def recorded(self, generation_id: int, error: int, message: str, now_ms: int) -> list[Delivery]:
        """The rebalance record of ``generation_id`` was written (``error`` NONE) or not."""
        if self._recording != generation_id:
            return []
        self._recording = None
        if self.state is not State.COMPLETING_REBALANCE or generation_id != self.generation_id:
            return []  # the group moved on meanwhile; its waiters were answered then
        waiting = [m for m in self.members.values() if m.awaiting_sync]
        for member in waiting:
            member.awaiting_sync = False
            self._touch(member, now_ms)  # its session runs again from its answer
        if error != E.NONE:
            for member in self.members.values():
                member.assignment = b""
            deliveries = [Delivery(m.member_id, "sync", _sync_error(error, message)) for m in waiting]
            return deliveries + self._prepare_rebalance(now_ms)
        self.state = State.STABLE
        self._sync_deadline_ms = None
        return [Delivery(m.member_id, "sync", self._sync_answer(m)) for m in waiting]

    def heartbeat(self, request: Pb.HeartbeatRequest, now_ms: int) -> Pb.HeartbeatResponse:
        member, problem = self._member_of_generation(request.member_id, request, request.generation_id)
        if problem is not None:
            return with_status(Pb.HeartbeatResponse(), *problem)
        assert member is not None
        self._touch(member, now_ms)
        if self.state is State.PREPARING_REBALANCE:
            return with_status(
                Pb.HeartbeatResponse(), E.REBALANCE_IN_PROGRESS, f"{self._name()} is rebalancing: join again"
            )
        return Pb.HeartbeatResponse()

    def leave(self, leaving: Sequence[Pb.LeavingMember], now_ms: int) -> Outcome:
        response = Pb.LeaveGroupResponse()
        deliveries: list[Delivery] = []
        for entry in leaving:
            result = response.members.add(member_id=entry.member_id)
            instance = entry.group_instance_id if entry.HasField("group_instance_id") else ""
            if instance:
                result.group_instance_id = instance
            member_id = entry.member_id or self.static.get(instance, "")
            member = self.members.get(member_id)
            if member_id in self.pending:
                del self.pending[member_id]
                continue
            if member is None:
                result.error, result.message = (
                    E.UNKNOWN_MEMBER_ID,
                    f"{self._name()} has no member {member_id!r}",
                )
                continue
            if instance and member.instance_id != instance:
                result.error, result.message = E.FENCED_INSTANCE_ID, f"{instance!r} belongs to another member"
                continue
            deliveries += self._remove(member, now_ms)
        return Outcome(response, deliveries)

    def commit_problem(
        self, generation_id: int | None, member_id: str, instance_id: str
    ) -> tuple[int, str] | None:
        """Why an OffsetCommit may not go ahead (None: it may); Kafka's checks."""
        if generation_id is None or generation_id < 0:
            if not self.members:
                return None
            return E.UNKNOWN_MEMBER_ID, f"{self._name()} has members: commits must come from one of them"
        member = self.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID, f"{self._name()} has no member {member_id!r}"
        if instance_id and member.instance_id != instance_id:
            return E.FENCED_INSTANCE_ID, f"{instance_id!r} belongs to another member"
        if generation_id != self.generation_id:
            return (
                E.ILLEGAL_GENERATION,
                f"generation {generation_id} is not {self._name()}'s {self.generation_id}",
            )
        if self.state is State.COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS, f"{self._name()} is completing a rebalance"
        return None

    def touch(self, member_id: str, now_ms: int) -> None:
        """A member's commit counts as a sign of life, as in Kafka."""
        member = self.members.get(member_id)
        if member is not None:
            self._touch(member, now_ms)

    def dead(self) -> list[Delivery]:
        """The group is deleted or moves to another coordinator: answer every waiter."""
        deliveries = [
            *(
                Delivery(
                    m.member_id, "join", _join_error(m.member_id, E.NOT_COORDINATOR, "the coordinator moved")
                )
                for m in self.members.values()
                if m.awaiting_join
            ),
            *(
                Delivery(m.member_id, "sync", _sync_error(E.NOT_COORDINATOR, "the coordinator moved"))
                for m in self.members.values()
                if m.awaiting_sync
            ),
        ]
        self.state = State.DEAD
        self.members.clear()
        self.pending.clear()
        self.static.clear()
        return deliveries

    # time --------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> list[Delivery]:
        """Expire sessions and end phases whose time is up."""
        deliveries: list[Delivery] = []
        for member_id, deadline in list(self.pending.items()):
            if deadline <= now_ms:
                del self.pending[member_id]
                deliveries += self._maybe_complete_join(now_ms)
        for member in list(self.members.values()):
            if (
                member.session_deadline_ms <= now_ms
                and not member.waiting
                and member.member_id in self.members
            ):
                deliveries += self._remove(member, now_ms)
        if (
            self.state is State.PREPARING_REBALANCE
            and self._join_deadline_ms is not None
            and self._join_deadline_ms <= now_ms
        ):
            deliveries += self._complete_join(now_ms)
        leader_late = (
            self.state is State.COMPLETING_REBALANCE
            and self._recording is None
            and self._sync_deadline_ms is not None
            and self._sync_deadline_ms <= now_ms
        )
        if leader_late:
            for member in [m for m in self.members.values() if not m.awaiting_sync]:
                deliveries += self._remove(member, now_ms)
        return deliveries

    def next_deadline_ms(self) -> int | None:
        deadlines = [
            *self.pending.values(),
            *(m.session_deadline_ms for m in self.members.values() if not m.waiting),
        ]
        if self.state is State.PREPARING_REBALANCE and self._join_deadline_ms is not None:
            deadlines.append(self._join_deadline_ms)
        if self.state is State.COMPLETING_REBALANCE and self._sync_deadline_ms is not None:
            deadlines.append(self._sync_deadline_ms)
        return min(deadlines, default=None)

    # describing --------------------------------------------------------------------------

    def describe(self, coordinator: int) -> Pb.DescribedGroup:
        described = Pb.DescribedGroup(
            group_id=self.group_id,
            state=self.state.value,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name if self.state is State.STABLE else "",
            generation_id=self.generation_id,
            leader=self.leader_id,
            coordinator=coordinator,
        )
        for m in self.members.values():
            entry = described.members.add(
                member_id=m.member_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata_for(self.protocol_name),
                assignment=m.assignment if self.state is State.STABLE else b"",
            )
            if m.instance_id:
                entry.group_instance_id = m.instance_id
        return described

    # joining ---------------------------------------------------------------------------

    def _join_problem(self, request: Pb.JoinGroupRequest) -> tuple[int, str] | None:
        limits = self.limits
        if self.state is State.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE, f"{self._name()} is being removed; find the coordinator again"
        if not limits.min_session_timeout_ms <= request.session_timeout_ms <= limits.max_session_timeout_ms:
            return E.INVALID_SESSION_TIMEOUT, (
                f"session_timeout_ms: {request.session_timeout_ms} is outside "
                f"[{limits.min_session_timeout_ms}, {limits.max_session_timeout_ms}] (group.min/max.session.timeout.ms)"
            )
        if request.rebalance_timeout_ms <= 0:
            return E.INVALID_REQUEST, f"rebalance_timeout_ms: {request.rebalance_timeout_ms} is not positive"
        if not request.protocol_type or not request.protocols:
            return E.INCONSISTENT_GROUP_PROTOCOL, "protocol_type and at least one protocol are required"
        if self.members and request.protocol_type != self.protocol_type:
            return E.INCONSISTENT_GROUP_PROTOCOL, (
                f"protocol type {request.protocol_type!r} is not {self._name()}'s {self.protocol_type!r}"
            )
        offered = {p.name for p in request.protocols}
        others = [m for m in self.members.values() if m.member_id != request.member_id]
        size = _metadata_bytes((p.name, p.metadata) for p in request.protocols)
        if size > MEMBER_METADATA_MAX_BYTES:
            return E.INVALID_REQUEST, (
                f"protocols: {size} bytes of names and metadata, at most {MEMBER_METADATA_MAX_BYTES} per member"
            )
        held = sum(_metadata_bytes(m.protocols) for m in others)
        if held + size > GROUP_METADATA_MAX_BYTES:
            return E.GROUP_MAX_SIZE_REACHED, (
                f"{self._name()}'s other members hold {held} bytes of protocol metadata; with this "
                f"member's {size} it would pass {GROUP_METADATA_MAX_BYTES}"
            )
        if others and not any(all(name in {n for n, _ in m.protocols} for m in others) for name in offered):
            return E.INCONSISTENT_GROUP_PROTOCOL, f"none of {sorted(offered)} is supported by every member"
        return None

    def _join_new(self, request: Pb.JoinGroupRequest, instance: str, now_ms: int) -> Outcome:
        member_id = f"{request.client_id or 'member'}-{uuid.uuid4()}"
        if instance and instance in self.static:
            return self._replace_static(self.members[self.static[instance]], member_id, request, now_ms)
        if len(self.members) + len(self.pending) >= self.limits.max_size:
            return Outcome(
                _join_error(
                    "",
                    E.GROUP_MAX_SIZE_REACHED,
                    f"{self._name()} has {self.limits.max_size} members (group.max.size)",
                )
            )
        if instance or request.add_new_member_at_once:
            return self._add_and_rebalance(request, member_id, instance, now_ms)
        self.pending[member_id] = now_ms + request.session_timeout_ms
        return Outcome(_join_error(member_id, E.MEMBER_ID_REQUIRED, "join again with this member id"))

    def _replace_static(
        self, old: Member, member_id: str, request: Pb.JoinGroupRequest, now_ms: int
    ) -> Outcome:
        """A static member's new process takes its old id's place (KIP-345)."""
        deliveries = []
        if old.awaiting_join:
            deliveries.append(
                Delivery(
                    old.member_id,
                    "join",
                    _join_error(old.member_id, E.FENCED_INSTANCE_ID, "a newer member took over"),
                )
            )
        if old.awaiting_sync:
            deliveries.append(
                Delivery(old.member_id, "sync", _sync_error(E.FENCED_INSTANCE_ID, "a newer member took over"))
            )
        del self.members[old.member_id]
        member = _member(request, member_id, old.instance_id, now_ms)
        member.assignment = old.assignment
        self.members[member_id] = member
        self.static[old.instance_id] = member_id
        if self.leader_id == old.member_id:
            self.leader_id = member_id
        same_protocols = [n for n, _ in old.protocols] == [p.name for p in request.protocols]
        if self.state is State.STABLE and same_protocols:
            answer = self._join_answer(member, include_members=False)
            answer.skip_assignment = member_id == self.leader_id
            return Outcome(answer, deliveries)
        outcome = self._rebalance_with(member, now_ms)
        outcome.deliveries[:0] = deliveries
        outcome.new_member_id = member_id
        return outcome

    def _add_and_rebalance(
        self, request: Pb.JoinGroupRequest, member_id: str, instance: str, now_ms: int
    ) -> Outcome:
        member = _member(request, member_id, instance, now_ms)
        self.members[member_id] = member
        if instance:
            self.static[instance] = member_id
        if not self.protocol_type:
            self.protocol_type = request.protocol_type
        outcome = self._rebalance_with(member, now_ms)
        outcome.new_member_id = member_id
        return outcome

    def _join_known(self, member: Member, request: Pb.JoinGroupRequest, now_ms: int) -> Outcome:
        changed = [(p.name, p.metadata) for p in request.protocols] != member.protocols
        member.protocols = [(p.name, p.metadata) for p in request.protocols]
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        self._touch(member, now_ms)
        if self.state is State.PREPARING_REBALANCE:
            return self._rebalance_with(member, now_ms)
        if self.state is State.COMPLETING_REBALANCE and not changed:
            return Outcome(self._join_answer(member, include_members=member.member_id == self.leader_id))
        if self.state is State.STABLE and not changed and member.member_id != self.leader_id:
            return Outcome(self._join_answer(member, include_members=False))
        return self._rebalance_with(member, now_ms)

    def _rebalance_with(self, member: Member, now_ms: int) -> Outcome:
        """``member`` joins the (started or starting) rebalance and waits for its end; a
        join completed by this very call is answered at once."""
        deliveries = [] if self.state is State.PREPARING_REBALANCE else self._prepare_rebalance(now_ms)
        member.awaiting_join = True
        if self._initial_delay_ms is not None:
            self._join_deadline_ms = min(now_ms + self._initial_delay_ms, self._longest_join_ms)
        deliveries += self._maybe_complete_join(now_ms)
        if member.awaiting_join:
            return Outcome(PARKED, deliveries)
        mine = next(d for d in reversed(deliveries) if d.member_id == member.member_id and d.kind == "join")
        return Outcome(mine.response, [d for d in deliveries if d is not mine])

    def _prepare_rebalance(self, now_ms: int) -> list[Delivery]:
        """Enter PreparingRebalance; members waiting in SyncGroup are told to join again."""
        deliveries = [
            Delivery(
                m.member_id,
                "sync",
                _sync_error(E.REBALANCE_IN_PROGRESS, f"{self._name()} is rebalancing: join again"),
            )
            for m in self.members.values()
            if m.awaiting_sync
        ]
        for member in self.members.values():
            if member.awaiting_sync:
                member.awaiting_sync = False
                self._touch(member, now_ms)
        was_empty = self.state is State.EMPTY
        self.state = State.PREPARING_REBALANCE
        self._sync_deadline_ms = None
        self._recording = None
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        self._longest_join_ms = now_ms + timeout
        if was_empty and self.limits.initial_rebalance_delay_ms > 0:
            self._initial_delay_ms = self.limits.initial_rebalance_delay_ms
            self._join_deadline_ms = min(now_ms + self._initial_delay_ms, self._longest_join_ms)
        else:
            self._initial_delay_ms = None
            self._join_deadline_ms = self._longest_join_ms
        return deliveries

    def _maybe_complete_join(self, now_ms: int) -> list[Delivery]:
        if self.state is not State.PREPARING_REBALANCE or self._initial_delay_ms is not None:
            return []  # the initial delay runs its course (poll ends it)
        if self.pending or not all(m.awaiting_join for m in self.members.values()):
            return []
        return self._complete_join(now_ms)

    def _complete_join(self, now_ms: int) -> list[Delivery]:
        deliveries: list[Delivery] = []
        for member in [m for m in self.members.values() if not m.awaiting_join]:
            self._drop(member)
        self.pending.clear()
        self._join_deadline_ms = None
        self._initial_delay_ms = None
        self.generation_id += 1
        if not self.members:
            self.state = State.EMPTY
            self.protocol_type = self.protocol_name = self.leader_id = ""
            return deliveries
        self.state = State.COMPLETING_REBALANCE
        self.protocol_name = self._vote()
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self._sync_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in self.members.values())
        for member in self.members.values():
            member.awaiting_join = False
            member.assignment = b""
            self._touch(member, now_ms)
            answer = self._join_answer(member, include_members=member.member_id == self.leader_id)
            deliveries.append(Delivery(member.member_id, "join", answer))
        return deliveries

    def _vote(self) -> str:
        """The protocol every member supports that the members rank highest (Kafka's vote)."""
        members = list(self.members.values())
        common = [
            name
            for name, _ in members[0].protocols
            if all(name in {n for n, _ in m.protocols} for m in members)
        ]
        votes = {name: 0 for name in common}
        for member in members:
            votes[next(name for name, _ in member.protocols if name in votes)] += 1
        return max(common, key=lambda name: (votes[name], -common.index(name)))

    # leaving -----------------------------------------------------------------------------

    def _remove(self, member: Member, now_ms: int) -> list[Delivery]:
        """A member left or expired: the rest rebalance, or the group is empty."""
        deliveries = []
        if member.awaiting_join:
            deliveries.append(
                Delivery(
                    member.member_id, "join", _join_error(member.member_id, E.UNKNOWN_MEMBER_ID, "removed")
                )
            )
        if member.awaiting_sync:
            deliveries.append(Delivery(member.member_id, "sync", _sync_error(E.UNKNOWN_MEMBER_ID, "removed")))
        self._drop(member)
        if self.state in (State.STABLE, State.COMPLETING_REBALANCE):
            deliveries += self._prepare_rebalance(now_ms)
        if self.state is State.PREPARING_REBALANCE:
            if not self.members and not self.pending:
                deliveries += self._complete_join(now_ms)
            else:
                deliveries += self._maybe_complete_join(now_ms)
        return deliveries

    def _drop(self, member: Member) -> None:
        del self.members[member.member_id]
        if member.instance_id and self.static.get(member.instance_id) == member.member_id:
            del self.static[member.instance_id]

    # answers ---------------------------------------------------------------------------

    def _member_of_generation(
        self, member_id: str, request: object, generation_id: int
    ) -> tuple[Member | None, tuple[int, str] | None]:
        member = self.members.get(member_id)
        if member is None or self.state in (State.EMPTY, State.DEAD):
            return None, (E.UNKNOWN_MEMBER_ID, f"{self._name()} has no member {member_id!r}")
        instance = request.group_instance_id if request.HasField("group_instance_id") else ""  # type: ignore[attr-defined]
        if instance and member.instance_id != instance:
            return None, (E.FENCED_INSTANCE_ID, f"{instance!r} belongs to another member")
        if generation_id != self.generation_id:
            return None, (
                E.ILLEGAL_GENERATION,
                f"generation {generation_id} is not {self._name()}'s {self.generation_id}",
            )
        return member, None

    def _join_answer(self, member: Member, *, include_members: bool) -> Pb.JoinGroupResponse:
        answer = Pb.JoinGroupResponse(
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=self.leader_id,
            member_id=member.member_id,
        )
        if include_members:
            for m in self.members.values():
                entry = answer.members.add(member_id=m.member_id, metadata=m.metadata_for(self.protocol_name))
                if m.instance_id:
                    entry.group_instance_id = m.instance_id
        return answer

    def _sync_answer(self, member: Member) -> Pb.SyncGroupResponse:
        return Pb.SyncGroupResponse(
            protocol_type=self.protocol_type, protocol_name=self.protocol_name, assignment=member.assignment
        )

    def _touch(self, member: Member, now_ms: int) -> None:
        member.session_deadline_ms = now_ms + member.session_timeout_ms

    def _name(self) -> str:
        return f"group {self.group_id!r}"


def _member(request: Pb.JoinGroupRequest, member_id: str, instance: str, now_ms: int) -> Member:
    return Member(
        member_id=member_id,
        instance_id=instance,
        client_id=request.client_id,
        client_host=request.client_host,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        session_deadline_ms=now_ms + request.session_timeout_ms,
    )


def _metadata_bytes(protocols: Iterable[tuple[str, bytes]]) -> int:
    return sum(len(name.encode()) + len(metadata) for name, metadata in protocols)


def with_status(response, code: int, message: str):  # noqa: ANN001, ANN202 - any response with a status
    response.status.error = code
    response.status.message = message
    return response


def _join_error(member_id: str, code: int, message: str) -> Pb.JoinGroupResponse:
    return with_status(Pb.JoinGroupResponse(member_id=member_id, generation_id=-1), code, message)


def _sync_error(code: int, message: str) -> Pb.SyncGroupResponse:
    return with_status(Pb.SyncGroupResponse(), code, message)
