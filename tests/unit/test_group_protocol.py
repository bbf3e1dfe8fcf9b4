"""Kafka's classic group protocol on one ``Group``, driven with explicit time and no I/O:
member ids handed out, generations, the leader and its assignment, rebalances on join,
leave, expiry and protocol change, the initial delay, static members, zombie members
fenced from committing, and what each state answers."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from raftka.broker.groups.group import (
    GROUP_METADATA_MAX_BYTES,
    MEMBER_METADATA_MAX_BYTES,
    PARKED,
    Delivery,
    Group,
    GroupLimits,
    Outcome,
    State,
)
from raftka.v1 import broker_pb2 as pb
from raftka.v1 import controller_pb2

E = controller_pb2.ErrorCode
SESSION_MS = 10_000
REBALANCE_MS = 30_000
LIMITS = GroupLimits(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=0)


def join_request(
    member_id: str = "",
    *,
    instance: str | None = None,
    protocols: tuple[str, ...] = ("range",),
    meta: bytes = b"m",
) -> pb.JoinGroupRequest:
    request = pb.JoinGroupRequest(
        group_id="g",
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[pb.JoinGroupProtocol(name=name, metadata=meta) for name in protocols],
        client_id="c",
    )
    if instance is not None:
        request.group_instance_id = instance
    return request


@dataclass
class Harness:
    """A group and the answers its members have received, by member and kind."""

    group: Group
    now: int = 1_000
    answers: dict[tuple[str, str], object] = field(default_factory=dict)

    def deliver(self, deliveries: list[Delivery]) -> None:
        for d in deliveries:
            self.answers[(d.member_id, d.kind)] = d.response

    def run(self, outcome: Outcome) -> object:
        self.deliver(outcome.deliveries)
        return outcome.answer

    def new_member(self, **options: object) -> str:
        """A member id handed out by MEMBER_ID_REQUIRED."""
        answer = self.run(self.group.join(join_request(**options), self.now))
        assert answer.status.error == E.MEMBER_ID_REQUIRED and answer.member_id  # type: ignore[attr-defined]
        return answer.member_id  # type: ignore[attr-defined]

    def join(self, member_id: str, **options: object) -> object:
        return self.run(self.group.join(join_request(member_id, **options), self.now))

    def sync(self, member_id: str, assignments: dict[str, bytes] | None = None) -> object:
        request = pb.SyncGroupRequest(
            group_id="g",
            generation_id=self.group.generation_id,
            member_id=member_id,
            protocol_type="consumer",
        )
        for target, data in (assignments or {}).items():
            request.assignments.add(member_id=target, assignment=data)
        outcome = self.group.sync(request, self.now)
        self.deliver(outcome.deliveries)
        if outcome.rebalanced is not None:
            self.recorded.append(outcome.rebalanced)
            self.deliver(self.group.recorded(outcome.rebalanced.generation_id, E.NONE, "", self.now))
        return outcome.answer

    def heartbeat(self, member_id: str, generation: int | None = None) -> int:
        request = pb.HeartbeatRequest(
            group_id="g",
            member_id=member_id,
            generation_id=self.group.generation_id if generation is None else generation,
        )
        return self.group.heartbeat(request, self.now).status.error

    def advance(self, ms: int) -> None:
        self.now += ms
        self.deliver(self.group.poll(self.now))

    recorded: list = field(default_factory=list)


def stable_group(members: int = 2) -> tuple[Harness, list[str]]:
    """A Stable group whose first member leads and gave each member its id as assignment."""
    h = Harness(Group("g", LIMITS))
    ids = [h.new_member() for _ in range(members)]
    for member_id in ids[:-1]:
        assert h.join(member_id) is PARKED
    h.join(ids[-1])
    leader = h.group.leader_id
    for member_id in ids:
        if member_id != leader:
            assert h.sync(member_id) is PARKED
    h.sync(leader, {m: m.encode() for m in ids})
    assert h.group.state is State.STABLE
    return h, ids


def test_a_group_forms_one_generation_with_a_leader_that_alone_sees_the_members() -> None:
    h = Harness(Group("g", LIMITS))
    first, second = h.new_member(), h.new_member()
    assert h.join(first) is PARKED  # waits: the second member has its id but has not joined
    answer = h.join(second)  # the last one in completes the join at once
    mine, theirs = answer, h.answers[(first, "join")]
    assert (mine.generation_id, theirs.generation_id) == (1, 1)  # type: ignore[attr-defined]
    assert mine.leader == theirs.leader == first  # type: ignore[attr-defined]
    assert [m.member_id for m in theirs.members] == [first, second] and list(mine.members) == []  # type: ignore[attr-defined]
    assert h.group.state is State.COMPLETING_REBALANCE
    assert h.sync(second) is PARKED
    answer = h.sync(first, {first: b"A", second: b"B"})
    assert answer is PARKED  # the leader too waits for the record
    assert (h.answers[(first, "sync")].assignment, h.answers[(second, "sync")].assignment) == (b"A", b"B")
    assert h.group.state is State.STABLE
    (record,) = h.recorded
    assert (record.generation_id, record.leader, [m[0] for m in record.members]) == (
        1,
        first,
        [first, second],
    )


def test_the_protocol_is_the_one_members_rank_highest_among_those_all_support() -> None:
    h = Harness(Group("g", LIMITS))
    a, b, c = h.new_member(), h.new_member(), h.new_member()
    h.join(a, protocols=("range", "cooperative-sticky"))
    h.join(b, protocols=("cooperative-sticky", "range"))
    answer = h.join(c, protocols=("cooperative-sticky", "roundrobin", "range"))
    assert answer.protocol_name == "cooperative-sticky"  # type: ignore[attr-defined]
    refused = h.run(h.group.join(join_request(protocols=("roundrobin",)), h.now))
    assert refused.status.error == E.INCONSISTENT_GROUP_PROTOCOL  # type: ignore[attr-defined]


def test_a_leave_rebalances_the_rest_and_members_learn_it_from_their_heartbeat() -> None:
    h, (a, b, c) = stable_group(3)
    left = h.run(h.group.leave([pb.LeavingMember(member_id=c)], h.now))
    assert [m.error for m in left.members] == [E.NONE]  # type: ignore[attr-defined]
    assert h.group.state is State.PREPARING_REBALANCE
    assert h.heartbeat(a) == E.REBALANCE_IN_PROGRESS
    assert h.join(a) is PARKED
    answer = h.join(b)
    assert answer.generation_id == 2 and h.group.leader_id == a  # type: ignore[attr-defined]
    assert h.heartbeat(c) == E.UNKNOWN_MEMBER_ID


def test_a_member_silent_for_its_session_is_removed_and_one_missing_a_rebalance_too() -> None:
    h, (a, b) = stable_group(2)
    h.advance(SESSION_MS // 2)
    assert h.heartbeat(a) == E.NONE
    h.advance(SESSION_MS // 2)  # b's session ran out, a's did not
    assert set(h.group.members) == {a} and h.group.state is State.PREPARING_REBALANCE
    assert h.join(a) is not PARKED  # the only member left: the join completes at once
    assert h.group.generation_id == 2


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_dropped() -> None:
    h, (a, b, c) = stable_group(3)
    assert h.join(a) is PARKED  # the leader rejoins: a new rebalance
    h.heartbeat(b)
    h.join(b)
    h.advance(REBALANCE_MS)  # c never rejoined
    assert set(h.group.members) == {a, b}
    assert h.answers[(a, "join")].generation_id == 2 and h.answers[(b, "join")].generation_id == 2


def test_the_first_rebalance_of_an_empty_group_waits_the_initial_delay() -> None:
    h = Harness(Group("g", GroupLimits(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=3_000)))
    a = h.new_member()
    assert h.join(a) is PARKED  # alone, but the group waits for others to start too
    h.advance(2_000)
    b = h.new_member()
    assert h.join(b) is PARKED  # a join in the delay extends it
    h.advance(2_999)
    assert (a, "join") not in h.answers
    h.advance(1)
    assert h.answers[(a, "join")].generation_id == h.answers[(b, "join")].generation_id == 1


def test_a_static_member_that_restarts_keeps_its_place_without_a_rebalance() -> None:
    h = Harness(Group("g", LIMITS))
    b_id = h.new_member()
    assert h.run(h.group.join(join_request(instance="i-a"), h.now)) is PARKED  # static: no MEMBER_ID_REQUIRED
    h.join(b_id)
    old_a = h.group.static["i-a"]
    assert h.group.leader_id == old_a
    assert h.sync(b_id) is PARKED
    h.sync(old_a, {old_a: b"A", b_id: b"B"})
    assert h.group.state is State.STABLE and h.group.generation_id == 1
    back = h.run(h.group.join(join_request(instance="i-a"), h.now))  # a new process, no member id
    assert back.status.error == E.NONE and back.generation_id == 1 and back.member_id != old_a  # type: ignore[attr-defined]
    assert h.group.state is State.STABLE, "no rebalance"
    assert back.skip_assignment, "the leader came back: it keeps the assignment it made"  # type: ignore[attr-defined]
    assert h.sync(back.member_id).assignment == b"A"  # type: ignore[attr-defined]
    assert h.heartbeat(old_a) == E.UNKNOWN_MEMBER_ID  # the zombie is out
    fenced = h.group.commit_problem(1, old_a, "i-a")
    assert fenced is not None and fenced[0] == E.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize(
    ("who", "generation", "code"),
    [
        ("member", 1, None),
        ("member", 0, E.ILLEGAL_GENERATION),
        ("stranger", 1, E.UNKNOWN_MEMBER_ID),
        ("outsider", None, E.UNKNOWN_MEMBER_ID),
    ],
)
def test_commits_are_checked_against_membership_and_generation(
    who: str, generation: int | None, code: int | None
) -> None:
    h, (a, _) = stable_group(2)
    member = {"member": a, "stranger": "nobody", "outsider": ""}[who]
    problem = h.group.commit_problem(generation, member, "")
    assert (problem[0] if problem else None) == code


def test_while_completing_a_rebalance_commits_wait_and_an_empty_group_takes_any_commit() -> None:
    h = Harness(Group("g", LIMITS))
    assert h.group.commit_problem(None, "", "") is None  # no members: a standalone consumer may commit
    a = h.new_member()
    h.join(a)
    assert h.group.state is State.COMPLETING_REBALANCE
    assert h.group.commit_problem(1, a, "")[0] == E.REBALANCE_IN_PROGRESS  # type: ignore[index]


def test_a_leader_that_never_syncs_is_removed_and_the_others_rebalance() -> None:
    h = Harness(Group("g", LIMITS))
    a, b = h.new_member(), h.new_member()
    h.join(a)
    h.join(b)
    leader = h.group.leader_id
    follower = b if leader == a else a
    assert h.sync(follower) is PARKED
    for _ in range(REBALANCE_MS // 5_000 - 1):
        h.advance(5_000)
        assert h.heartbeat(leader) == E.NONE  # alive, but it never sends its SyncGroup
    h.advance(5_000)
    assert set(h.group.members) == {follower}
    assert h.answers[(follower, "sync")].status.error == E.REBALANCE_IN_PROGRESS


def test_a_failed_record_answers_the_syncs_with_its_error_and_rebalances() -> None:
    h = Harness(Group("g", LIMITS))
    a = h.new_member()
    h.join(a)
    request = pb.SyncGroupRequest(
        group_id="g",
        generation_id=1,
        member_id=a,
        assignments=[pb.SyncGroupAssignment(member_id=a, assignment=b"A")],
    )
    outcome = h.group.sync(request, h.now)
    assert outcome.answer is PARKED and outcome.rebalanced is not None
    h.deliver(h.group.recorded(1, E.COORDINATOR_NOT_AVAILABLE, "no controller", h.now))
    assert h.answers[(a, "sync")].status.error == E.COORDINATOR_NOT_AVAILABLE
    assert h.group.state is State.PREPARING_REBALANCE


@pytest.mark.parametrize("timeout_ms", [999, 1_800_001])
def test_a_session_timeout_outside_the_brokers_bounds_is_refused(timeout_ms: int) -> None:
    request = join_request()
    request.session_timeout_ms = timeout_ms
    answer = Group("g", LIMITS).join(request, 0).answer
    assert answer.status.error == E.INVALID_SESSION_TIMEOUT and "session_timeout_ms" in answer.status.message  # type: ignore[attr-defined]


def test_the_group_is_full_at_its_max_size() -> None:
    h = Harness(
        Group("g", GroupLimits(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=0, max_size=2))
    )
    h.new_member()
    h.new_member()
    answer = h.run(h.group.join(join_request(), h.now))
    assert answer.status.error == E.GROUP_MAX_SIZE_REACHED  # type: ignore[attr-defined]


def test_protocol_metadata_is_bounded_per_member_and_per_group() -> None:
    """A member's subscription is held until it leaves: 20 members once held 10 MiB each."""
    h = Harness(Group("g", LIMITS))
    answer = h.run(h.group.join(join_request(meta=b"x" * MEMBER_METADATA_MAX_BYTES), h.now))
    assert answer.status.error == E.INVALID_REQUEST  # type: ignore[attr-defined]
    assert answer.status.message == (  # type: ignore[attr-defined]
        f"protocols: {MEMBER_METADATA_MAX_BYTES + 5} bytes of names and metadata, "
        f"at most {MEMBER_METADATA_MAX_BYTES} per member"
    )
    assert not h.group.pending and not h.group.members
    at_bound = b"x" * (MEMBER_METADATA_MAX_BYTES - len("range"))
    members = [
        h.new_member(meta=at_bound) for _ in range(GROUP_METADATA_MAX_BYTES // MEMBER_METADATA_MAX_BYTES)
    ]
    for member_id in members:
        h.join(member_id, meta=at_bound)
    assert len(h.group.members) == len(members) and h.group.state is State.COMPLETING_REBALANCE
    answer = h.run(h.group.join(join_request(meta=b""), h.now))
    assert answer.status.error == E.GROUP_MAX_SIZE_REACHED  # type: ignore[attr-defined]
    assert f"would pass {GROUP_METADATA_MAX_BYTES}" in answer.status.message  # type: ignore[attr-defined]
    again = h.join(members[0], meta=at_bound)  # its own metadata is replaced, not added
    assert again.status.error == E.NONE  # type: ignore[attr-defined]
    assert len(h.group.members) == len(members) and not h.group.pending


def test_generations_start_above_the_recorded_one() -> None:
    h = Harness(Group("g", LIMITS, generation_floor=41))
    a = h.new_member()
    assert h.join(a).generation_id == 42  # type: ignore[attr-defined]


def test_a_moved_group_answers_its_waiters_not_coordinator() -> None:
    h = Harness(Group("g", LIMITS))
    a = h.new_member()
    h.new_member()  # pending: a waits for it
    h.join(a)
    h.deliver(h.group.dead())
    assert h.answers[(a, "join")].status.error == E.NOT_COORDINATOR
    assert h.group.state is State.DEAD
