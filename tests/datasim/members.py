"""The consumer group's members: Kafka's classic protocol, as a consumer runs it, against the
real group coordinators of the simulated brokers.

A member finds the group's coordinator (FindCoordinator at a broker it picks), joins
(MEMBER_ID_REQUIRED, then again with its id), and syncs; the leader assigns the topic's
partitions by range over the members in the order the coordinator listed them. With its
assignment it fetches the offsets the group committed (forwarded to the controller), reads
its partitions from their leaders from there, heartbeats, and commits what it read, one
commit in flight at a time. When the coordinator says the group rebalances it commits
what it read and joins again (the eager protocol's revocation); any other refusal, or
silence, sends it back to finding the coordinator. The nemesis crashes members (a new
member id when they come back) and makes them leave.

Each assignment a member hears is reported to ``GroupInvariants``, and each record it
reads to ``Invariants``, as the stand-alone consumer's are.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from raftka.metadata.offset_ops import NOTHING_COMMITTED
from raftka.v1 import broker_pb2, controller_pb2
from tests.datasim.broker import TOPIC, SimBroker
from tests.datasim.clients import fetch_request, leader_of, read_fetched
from tests.datasim.group_invariants import GroupInvariants
from tests.datasim.invariants import Invariants
from tests.datasim.network import Network
from tests.simulation.scheduler import Scheduler

E = controller_pb2.ErrorCode
Pb = broker_pb2
GROUP = "g"
MEMBERS = (110, 111, 112)  # their node ids
SESSION_TIMEOUT_MS = 400
REBALANCE_TIMEOUT_MS = 500
PARKED_TIMEOUT_MS = REBALANCE_TIMEOUT_MS + 200  # a JoinGroup or SyncGroup may wait for the others
HEARTBEAT_MS = 100
COMMIT_MS = 200
CALL_TIMEOUT_MS = (
    500  # longer than any delivery (8 ms + a slow link's 300): one commit at a time stays in order
)
RETRY_MS = 50
_FIND_AGAIN = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE})


def range_assignment(members: list[str], partitions: int) -> dict[str, list[int]]:
    """Kafka's range assignor for one topic: consecutive partitions, the first members one more."""
    share, extra = divmod(partitions, len(members))
    assigned, start = {}, 0
    for i, member in enumerate(members):
        count = share + (1 if i < extra else 0)
        assigned[member] = list(range(start, start + count))
        start += count
    return assigned


class GroupMember:
    def __init__(
        self,
        node: int,
        brokers: dict[int, SimBroker],
        scheduler: Scheduler,
        network: Network,
        rng: random.Random,
        invariants: Invariants,
        groups: GroupInvariants,
        trace: Callable[[str], None],
        partitions: int,
    ) -> None:
        self.node = node
        self.name = f"m{node - MEMBERS[0] + 1}"
        self.brokers, self.scheduler, self.network, self.rng = brokers, scheduler, network, rng
        self.invariants = invariants
        self.groups = groups
        self.trace = trace
        self.partitions = partitions
        self.incarnation = 0  # 0: down
        self.phase = 0  # moves on with every step of joining: an answer from an older one is ignored
        self.coordinator: SimBroker | None = None
        self.member_id = ""
        self.generation = -1
        self.assigned: list[int] = []
        self.positions: dict[int, int] = {}  # of the assigned partitions, once fetched
        self.committed: dict[int, int] = {}  # what this generation committed last
        self.committing = False
        self.stable = False  # heartbeating, reading and committing
        self.turn = 0

    # lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self.incarnation += 1
        self.network.incarnations[self.node] = self.incarnation
        self.member_id = ""
        self.trace(f"{self.name} starts")
        self._find()
        self._every(HEARTBEAT_MS, self._heartbeat)
        self._every(COMMIT_MS, self._commit)
        self._every(self.rng.randint(50, 100), self._read)

    @property
    def up(self) -> bool:
        return self.network.incarnations.get(self.node) is not None

    def crash(self) -> None:
        """The member dies without a word: the coordinator expires its session."""
        self.trace(f"{self.name} crashes")
        self._down()

    def leave(self) -> None:
        """The member leaves the group (LeaveGroup, not waiting for an answer) and stops."""
        if self.coordinator is not None and self.member_id:
            request = Pb.LeaveGroupRequest(group_id=GROUP)
            request.members.add(member_id=self.member_id)
            self._call(self.coordinator, "leave", request, lambda _: None)
        self.trace(f"{self.name} leaves")
        self._down()

    def _down(self) -> None:
        self.network.incarnations.pop(self.node, None)
        self._next_phase()

    def _next_phase(self) -> None:
        """Whatever this member was doing is over: it holds nothing until its next assignment."""
        self.phase += 1
        self.stable = self.committing = False
        self.assigned, self.positions = [], {}

    def _every(self, period_ms: int, work: Callable[[], None]) -> None:
        incarnation = self.incarnation

        def tick() -> None:
            if self.up and self.incarnation == incarnation:
                work()
                self.scheduler.after(period_ms, tick)

        self.scheduler.after(self.rng.randint(1, period_ms), tick)

    # requests -----------------------------------------------------------------------------

    def _call(
        self,
        broker: SimBroker,
        kind: str,
        request: Any,
        answered: Callable[[Any], None],
        timeout_ms: int = CALL_TIMEOUT_MS,
    ) -> None:
        """``answered(response)``, unless the member moved on to another phase first;
        silence finds the coordinator again."""
        phase = self.phase

        def at_broker() -> None:
            if broker.process is None:
                return
            reply = lambda response: self.network.send(broker.id, self.node, arrived, response)  # noqa: E731
            if kind == "offset_fetch":
                broker.forward_offset_fetch(request, reply)
            else:
                broker.serve_group(kind, request, reply)

        def arrived(response: Any) -> None:
            timeout.cancel()
            if self.phase == phase:
                answered(response)

        def silent() -> None:
            if self.phase == phase:
                self.trace(f"{self.name}: no answer to {kind}")
                self._find()

        self.network.send(self.node, broker.id, at_broker)
        timeout = self.scheduler.after(timeout_ms, silent)

    def _refused(self, kind: str, error: int) -> None:
        """What a member does when the coordinator refuses it."""
        self.trace(f"{self.name}: {kind} refused: {E.Name(error)}")
        if error in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            self.member_id = ""
        if error in _FIND_AGAIN:
            self._find_later()
        else:
            self._join()

    def _find_later(self) -> None:
        self._next_phase()
        self.scheduler.after(RETRY_MS, self._find_if, self.phase)

    def _find_if(self, phase: int) -> None:
        if self.phase == phase and self.up:
            self._find()

    def _find(self) -> None:
        self._next_phase()
        up = [b for b in self.brokers.values() if b.process is not None]
        if not up:
            self._find_later()
            return
        self._call(
            self.rng.choice(up), "find_coordinator", Pb.FindCoordinatorRequest(group_id=GROUP), self._found
        )

    def _found(self, response: Pb.FindCoordinatorResponse) -> None:
        if response.status.error != E.NONE:
            self._find_later()
            return
        self.coordinator = self.brokers[response.node_id]
        self._join()

    def _join(self) -> None:
        assert self.coordinator is not None
        self._next_phase()
        request = Pb.JoinGroupRequest(
            group_id=GROUP,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            member_id=self.member_id,
            protocol_type="consumer",
            client_id=self.name,
            client_host="/sim",
        )
        request.protocols.add(name="range", metadata=b"")
        timeout_ms = (
            PARKED_TIMEOUT_MS if self.member_id else CALL_TIMEOUT_MS
        )  # a new member is answered at once
        self._call(self.coordinator, "join", request, self._joined, timeout_ms)

    def _joined(self, response: Pb.JoinGroupResponse) -> None:
        if response.status.error == E.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            self._join()
            return
        if response.status.error != E.NONE:
            self._refused("join", response.status.error)
            return
        assert self.coordinator is not None
        self.member_id, self.generation = response.member_id, response.generation_id
        self._next_phase()
        request = Pb.SyncGroupRequest(
            group_id=GROUP, generation_id=self.generation, member_id=self.member_id, protocol_type="consumer"
        )
        if response.leader == self.member_id:
            members = [m.member_id for m in response.members]
            for member, partitions in range_assignment(members, self.partitions).items():
                assignment = ConsumerProtocolAssignment(0, [(TOPIC, partitions)], b"").encode()
                request.assignments.add(member_id=member, assignment=assignment)
        self._call(self.coordinator, "sync", request, self._synced, PARKED_TIMEOUT_MS)

    def _synced(self, response: Pb.SyncGroupResponse) -> None:
        if response.status.error != E.NONE:
            self._refused("sync", response.status.error)
            return
        decoded = ConsumerProtocolAssignment.decode(response.assignment) if response.assignment else None
        assigned = sorted(p for t in (decoded.assigned_partitions if decoded else []) for p in t.partitions)
        self.trace(f"{self.name}: generation {self.generation} assigns it {assigned}")
        self.groups.assigned(self.generation, self.member_id, self.name, assigned)
        self._next_phase()
        self.assigned, self.committed = assigned, {}
        if not assigned:
            self.stable = True
            return
        request = controller_pb2.OffsetFetchRequest(group=GROUP)
        request.topics.add(topic=TOPIC, partitions=assigned)
        assert self.coordinator is not None
        self._call(self.coordinator, "offset_fetch", request, self._fetched_offsets)

    def _fetched_offsets(self, response: controller_pb2.OffsetFetchResponse) -> None:
        if response.status.error != E.NONE or any(o.error != E.NONE for o in response.offsets):
            self._find()
            return
        self.positions = {
            o.partition: 0 if o.offset == NOTHING_COMMITTED else o.offset for o in response.offsets
        }
        self.committed = dict(self.positions)
        self.trace(f"{self.name}: reads from {self.positions}")
        self.stable = True

    def _heartbeat(self) -> None:
        if not self.stable or self.committing or self.coordinator is None:
            return
        request = Pb.HeartbeatRequest(group_id=GROUP, generation_id=self.generation, member_id=self.member_id)
        self._call(self.coordinator, "heartbeat", request, self._heartbeat_answered)

    def _heartbeat_answered(self, response: Pb.HeartbeatResponse) -> None:
        if response.status.error == E.REBALANCE_IN_PROGRESS:
            self._commit(then=self._join)  # revoke: commit what was read, then join again
        elif response.status.error != E.NONE:
            self._refused("heartbeat", response.status.error)

    # reading and committing --------------------------------------------------------------

    def _read(self) -> None:
        if not self.stable or not self.positions:
            return
        partitions = sorted(self.positions)
        self.turn = (self.turn + 1) % len(partitions)
        partition = partitions[self.turn]
        leader = leader_of(self.brokers, self.rng, partition)
        if leader is None:
            return
        position = self.positions[partition]
        phase = self.phase

        def at_broker() -> None:
            if leader.process is not None:
                leader.serve_client_fetch(
                    fetch_request(partition, position),
                    lambda response: self.network.send(leader.id, self.node, fetched, response),
                )

        def fetched(response: broker_pb2.FetchResponse) -> None:
            if self.phase == phase and self.stable and self.positions.get(partition) == position:
                self.positions[partition] = read_fetched(self.invariants, response, partition, position)

        self.network.send(self.node, leader.id, at_broker)

    def _commit(self, then: Callable[[], None] | None = None) -> None:
        """Commit the positions that moved; ``then`` once answered (or at once if none moved)."""
        moved = {p: o for p, o in self.positions.items() if self.committed.get(p) != o}
        if not self.stable or self.committing or not moved or self.coordinator is None:
            if then is not None:
                self.stable = False
                then()
            return
        request = controller_pb2.OffsetCommitRequest(
            group=GROUP, generation_id=self.generation, member_id=self.member_id
        )
        topic = request.topics.add(topic=TOPIC)
        for partition, offset in sorted(moved.items()):
            topic.partitions.add(partition=partition, offset=offset)
        self.committing = True
        if then is not None:
            self.stable = False

        def answered(response: controller_pb2.OffsetCommitResponse) -> None:
            self.committing = False
            if response.status.error == E.NONE:
                self.committed.update(moved)
                self.trace(f"{self.name}: committed {moved} in generation {self.generation}")
                if then is not None:
                    then()
            elif response.status.error == E.REBALANCE_IN_PROGRESS and then is None:
                self._commit(then=self._join)
            else:
                self._refused("commit", response.status.error)

        self._call(self.coordinator, "commit", request, answered)
