"""The voter set (KIP-853): who votes and whose acknowledgements count.

A voter is a node id *and* a directory id: the random UUID its storage got when it was
formatted. A node whose disk was replaced has a new directory id, so it is a new
replica: it is no voter until it is added, and it never counts as the voter it replaced.
A voter set from a static ``controller.quorum.voters`` has no directory ids (empty), and
then the node id alone identifies a voter (kraft.version 0: raftka's first clusters,
whose wiped voters instead wait to recover, see ``raftka.raft.core``).

``VoterHistory`` is the voter set over the log: the set in effect is the latest
``VotersRecord`` in the log, committed or not (Raft's single-server change rule, as
Kafka does), else the set the snapshot carries, else the bootstrap one. Truncating an
uncommitted record brings the previous set back; compacting folds the records below the
snapshot into the set it carries.
"""

from __future__ import annotations

import bisect
import enum
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from raftka.raft.tracker import majority

NO_DIRECTORY = ""
_DIRECTORY_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # a static voter: identified by its node id alone
KRAFT_VERSION_STATIC = 0  # the voter set is the configured one
KRAFT_VERSION_DYNAMIC = 1  # the voter set lives in the log


@dataclass(frozen=True, slots=True, order=True)
class Voter:
    node_id: int
    directory_id: str = NO_DIRECTORY
    endpoints: tuple[str, ...] = ()  # host:port of its raft listener (informational)

    def matches(self, node_id: int, directory_id: str) -> bool:
        """Is (node_id, directory_id) this voter? A static voter has no directory to check."""
        return node_id == self.node_id and self.directory_id in (NO_DIRECTORY, directory_id)


class VoterSet:
    """An immutable set of voters, at most one per node id."""

    __slots__ = ("_voters", "ids")

    def __init__(self, voters: Iterable[Voter]) -> None:
        by_id: dict[int, Voter] = {}
        for voter in voters:
            if voter.node_id in by_id:
                raise ValueError(f"voters: node id {voter.node_id} appears twice")
            by_id[voter.node_id] = voter
        self._voters = dict(sorted(by_id.items()))
        self.ids = frozenset(by_id)

    @staticmethod
    def static(ids: Iterable[int]) -> VoterSet:
        return VoterSet(Voter(i) for i in ids)

    @property
    def dynamic(self) -> bool:
        return any(v.directory_id != NO_DIRECTORY for v in self._voters.values())

    def voters(self) -> tuple[Voter, ...]:
        return tuple(self._voters.values())

    def get(self, node_id: int) -> Voter | None:
        return self._voters.get(node_id)

    def includes(self, node_id: int, directory_id: str) -> bool:
        voter = self._voters.get(node_id)
        return voter is not None and voter.matches(node_id, directory_id)

    def majority(self) -> int:
        return majority(len(self._voters))

    def with_voter(self, voter: Voter) -> VoterSet:
        assert voter.node_id not in self.ids, voter
        return VoterSet((*self._voters.values(), voter))

    def without(self, node_id: int) -> VoterSet:
        assert node_id in self.ids, node_id
        return VoterSet(v for v in self._voters.values() if v.node_id != node_id)

    def difference_size(self, other: VoterSet) -> int:
        """How many voters (by node id and directory id) one set has that the other lacks."""
        mine, theirs = set(self._voters.values()), set(other._voters.values())
        return len(
            {(v.node_id, v.directory_id) for v in mine} ^ {(v.node_id, v.directory_id) for v in theirs}
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VoterSet) and self._voters == other._voters

    def __hash__(self) -> int:
        return hash(tuple(self._voters.values()))

    def __len__(self) -> int:
        return len(self._voters)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._voters

    def __repr__(self) -> str:
        return "VoterSet(" + ", ".join(_describe(v) for v in self._voters.values()) + ")"

    # the VotersRecord ---------------------------------------------------------------------
    def encode(self) -> bytes:
        return json.dumps(
            {
                "type": "Voters",
                "version": 0,
                "voters": [
                    {"node_id": v.node_id, "directory_id": v.directory_id, "endpoints": list(v.endpoints)}
                    for v in self._voters.values()
                ],
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def decode(record: bytes) -> VoterSet:
        """Raises ValueError naming the field for anything but a well-formed VotersRecord."""
        try:
            value = json.loads(record)
        except ValueError as exc:
            raise ValueError(f"VotersRecord: not JSON ({exc})") from exc
        if not isinstance(value, dict) or value.get("type") != "Voters":
            raise ValueError("VotersRecord: type is not Voters")
        entries = value.get("voters")
        if not isinstance(entries, list) or not entries:
            raise ValueError("VotersRecord: voters must be a non-empty list")
        voters = []
        for i, entry in enumerate(entries):
            try:
                node_id, directory_id = entry["node_id"], entry["directory_id"]
                endpoints = tuple(entry.get("endpoints", ()))
            except (KeyError, TypeError) as exc:
                raise ValueError(f"VotersRecord: voters[{i}] lacks {exc}") from exc
            if not isinstance(node_id, int) or node_id < 0 or not isinstance(directory_id, str):
                raise ValueError(f"VotersRecord: voters[{i}] has a bad node_id or directory_id")
            voters.append(Voter(node_id, directory_id, tuple(str(e) for e in endpoints)))
        return VoterSet(voters)


def _describe(voter: Voter) -> str:
    return f"{voter.node_id}" + (f"@{voter.directory_id[:8]}" if voter.directory_id else "")


def parse_initial_controllers(text: str) -> VoterSet:
    """Kafka 3.9's ``--initial-controllers``: ``id@host:port:directory_id,...``."""
    voters = []
    for i, entry in enumerate(t.strip() for t in text.split(",")):
        node, at, rest = entry.partition("@")
        parts = rest.split(":")
        if not (at and node.isdigit() and len(parts) == 3 and all(parts)):
            raise ValueError(f"entry {i + 1} {entry!r} is not ID@HOST:PORT:DIRECTORY_ID")
        host, port, directory_id = parts
        if not port.isdigit():
            raise ValueError(f"entry {i + 1} {entry!r}: {host}:{port} is not HOST:PORT")
        if not _DIRECTORY_ID_RE.fullmatch(directory_id):
            raise ValueError(f"entry {i + 1}: directory id {directory_id!r} is not 1-64 of A-Z a-z 0-9 _ -")
        address = f"{host}:{port}"
        voters.append(Voter(int(node), directory_id, (address,)))
    return VoterSet(voters)


def encode_kraft_version(version: int) -> bytes:
    return json.dumps({"type": "KRaftVersion", "kraft_version": version}, separators=(",", ":")).encode()


class VoterHistory:
    """The voter set at every offset of this node's log (see the module doc)."""

    def __init__(self, base: VoterSet) -> None:
        self.base = base  # in effect below every record kept: the snapshot's or the bootstrap set
        self._offsets: list[int] = []  # offsets of the VotersRecords in the log, ascending
        self._sets: list[VoterSet] = []

    def latest(self) -> VoterSet:
        return self._sets[-1] if self._sets else self.base

    def latest_offset(self) -> int:
        """The offset of the newest VotersRecord in the log; -1 when there is none."""
        return self._offsets[-1] if self._offsets else -1

    def at(self, offset: int) -> VoterSet:
        """The set in effect for a log that ends at ``offset`` (exclusive)."""
        index = bisect.bisect_left(self._offsets, offset) - 1
        return self._sets[index] if index >= 0 else self.base

    def member_since(self, node_id: int, directory_id: str) -> int:
        """The offset of the VotersRecord from which (``node_id``, ``directory_id``), a member
        of the latest set, has been in every set since; -1 when the base set holds it too."""
        since = -1
        for offset, voters in zip(reversed(self._offsets), reversed(self._sets), strict=True):
            if not voters.includes(node_id, directory_id):
                return since
            since = offset
        return since if not self.base.includes(node_id, directory_id) else -1

    def append(self, offset: int, voters: VoterSet) -> None:
        assert not self._offsets or offset > self._offsets[-1], (offset, self._offsets)
        self._offsets.append(offset)
        self._sets.append(voters)

    def truncate_to(self, offset: int) -> None:
        """Records at or after ``offset`` are gone: the set before them is back."""
        keep = bisect.bisect_left(self._offsets, offset)
        del self._offsets[keep:]
        del self._sets[keep:]

    def compact(self, offset: int) -> None:
        """The log now starts at ``offset``: the records below it become the base."""
        self.base = self.at(offset)
        keep = bisect.bisect_left(self._offsets, offset)
        del self._offsets[:keep]
        del self._sets[:keep]

    def install(self, base: VoterSet) -> None:
        """A snapshot replaced the whole log."""
        self.base = base
        self._offsets.clear()
        self._sets.clear()


class ChangeRefusal(enum.Enum):
    """Why a leader refuses a voter change (the RPCs map these to Kafka's error codes)."""

    STATIC_QUORUM = (
        "the voter set is static (kraft.version 0): format with --standalone or --initial-controllers"
    )
    CHANGE_IN_PROGRESS = (
        "a voter change is not yet committed, or this leader has committed nothing in its epoch"
    )
    DUPLICATE_VOTER = "the node is already a voter"
    VOTER_NOT_FOUND = "no such voter (node id and directory id)"
    NOT_CAUGHT_UP = "the node is not a caught-up observer fetching with that directory id"
    INVALID_REQUEST = "a voter needs a directory id"
    LAST_VOTER = "the last voter cannot be removed"


class VoterChangeError(Exception):
    def __init__(self, refusal: ChangeRefusal, detail: str = "") -> None:
        super().__init__(refusal.value + (f": {detail}" if detail else ""))
        self.refusal = refusal
