"""The leader's view of every replica: what it holds, when it last fetched.

Voters' durable positions decide the high watermark; observers are tracked only so
``DescribeQuorum`` can show them (and the leader can tell whether one is caught up
enough to be added as a voter), and are never counted. The voters are the set in effect
(KIP-853): when it changes, progress moves between the two. A leader that is removing
itself keeps leading without counting itself.
"""

from __future__ import annotations

from dataclasses import dataclass

OBSERVERS_MAX = 1024  # bound: forget the stalest observer beyond this


def majority(voter_count: int) -> int:
    return voter_count // 2 + 1


def quorum_offset(offsets: list[int], voter_count: int) -> int:
    """The largest offset that a majority of voters have reached (unknown counts as -1)."""
    padded = sorted(offsets + [-1] * (voter_count - len(offsets)), reverse=True)
    return padded[majority(voter_count) - 1]


@dataclass(slots=True)
class Progress:
    node_id: int
    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    fetched_this_epoch: bool = False
    directory_id: str = ""  # the storage it last fetched with


class Tracker:
    def __init__(self, leader_id: int, voters: frozenset[int], now_ms: int) -> None:
        self.leader_id = leader_id
        self.leader = Progress(leader_id, last_fetch_ms=now_ms, last_caught_up_ms=now_ms)
        self.voters: dict[int, Progress] = {}
        self.observers: dict[int, Progress] = {}
        self.set_voters(voters)

    def set_voters(self, voters: frozenset[int]) -> None:
        """The voter set in effect changed: progress moves between voters and observers. A
        removed voter whose id another storage fetches under (a replaced disk) leaves its
        place to that one."""
        old_voters, old_observers = self.voters, self.observers
        mine = {self.leader_id: self.leader}
        self.voters = {
            v: mine.get(v) or old_voters.get(v) or old_observers.get(v) or Progress(v) for v in sorted(voters)
        }
        self.observers = {n: p for n, p in old_observers.items() if n not in voters}
        for n, p in old_voters.items():
            if n not in voters and n != self.leader_id:
                self.observers.setdefault(n, p)

    def record_fetch(
        self,
        node_id: int,
        end_offset: int,
        leader_end: int,
        now_ms: int,
        *,
        directory_id: str = "",
        as_voter: bool = True,
    ) -> Progress:
        """``as_voter`` False: a fetch under a voter's id from other storage (a replaced disk),
        tracked as an observer's (the voter's position is not its to give)."""
        progress = self.voters.get(node_id) if as_voter else None
        if progress is None:
            progress = self.observers.get(node_id)
            if progress is None:
                if len(self.observers) >= OBSERVERS_MAX:
                    stalest = min(self.observers.values(), key=lambda p: p.last_fetch_ms)
                    del self.observers[stalest.node_id]
                progress = self.observers[node_id] = Progress(node_id)
        progress.end_offset = end_offset
        progress.last_fetch_ms = now_ms
        progress.fetched_this_epoch = True
        progress.directory_id = directory_id
        if end_offset >= leader_end:
            progress.last_caught_up_ms = now_ms
        return progress

    def record_contact(self, node_id: int, now_ms: int) -> None:
        """A voter reached us without a usable position (diverging, downloading a snapshot)."""
        progress = self.voters.get(node_id)
        if progress is not None:
            progress.last_fetch_ms = now_ms
            progress.fetched_this_epoch = True

    def record_leader_end(self, end_offset: int, now_ms: int) -> None:
        me = self.leader
        me.end_offset = end_offset
        me.last_fetch_ms = me.last_caught_up_ms = now_ms

    def quorum_end(self) -> int:
        return quorum_offset([p.end_offset for p in self.voters.values()], len(self.voters))

    def majority_contact_ms(self) -> int:
        """The latest time by which a majority of voters (the leader included) had fetched."""
        return quorum_offset([p.last_fetch_ms for p in self.voters.values()], len(self.voters))

    def voters_silent_since(self, since_ms: int) -> list[int]:
        """Other voters that have not fetched since ``since_ms`` (or never, in this epoch)."""
        return [
            v
            for v, p in self.voters.items()
            if v != self.leader_id and (not p.fetched_this_epoch or p.last_fetch_ms < since_ms)
        ]

    def successors(self) -> tuple[int, ...]:
        """Other voters, most caught up first: whom a resigning leader recommends."""
        others = [p for v, p in self.voters.items() if v != self.leader_id]
        others.sort(key=lambda p: (-p.end_offset, p.node_id))
        return tuple(p.node_id for p in others)
