"""Sequential specifications the cluster must look like, one key at a time.

A model says how to split a history into independent keys, the state of one key
before anything happened, and ``apply``: the output an operation must return in a
state, and the state after it. Models are deterministic, so an operation is legal in a
state iff its recorded output is the one ``apply`` gives (an ambiguous operation's
output is unknown and anything goes; the search decides *whether* it took effect by
where it places it: last, after everything observable, is the same as never).

Outputs are ``controller_pb2.ErrorCode`` names ("NONE", "TOPIC_ALREADY_EXISTS", ...)
for writes, and the value read for reads.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

S = TypeVar("S", bound=Hashable)

OK = "NONE"
TOPIC_ALREADY_EXISTS = "TOPIC_ALREADY_EXISTS"
UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"
NO_OFFSET = -1  # OffsetFetch's answer when nothing was committed


class Model(Protocol, Generic[S]):
    def key(self, op_input: Any) -> Hashable:
        """The independent key an operation touches (P-compositionality)."""
        ...

    def init(self) -> S: ...

    def apply(self, state: S, op_input: Any) -> tuple[Any, S]:
        """(the output ``op_input`` must return in ``state``, the state after it)."""
        ...


# topics: a map from name to present/absent ---------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateTopic:
    name: str


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    name: str


@dataclass(frozen=True, slots=True)
class TopicExists:
    """A describe of the name, or one name's presence in a list (output: bool)."""

    name: str


TopicOp = CreateTopic | DeleteTopic | TopicExists


class TopicModel:
    """Create succeeds only on an absent name, delete only on a present one.

    A list response is recorded as one ``TopicExists`` per name of interest, all with the
    list's call and return times: that checks each name on its own, which can miss an
    anomaly visible only across names, never report one that is not there.
    """

    def key(self, op_input: TopicOp) -> str:
        return op_input.name

    def init(self) -> bool:
        return False

    def apply(self, present: bool, op_input: TopicOp) -> tuple[Any, bool]:
        match op_input:
            case CreateTopic():
                return (TOPIC_ALREADY_EXISTS if present else OK), True
            case DeleteTopic():
                return (OK if present else UNKNOWN_TOPIC_OR_PARTITION), False
            case TopicExists():
                return present, present
            case _:
                raise TypeError(f"not a topic operation: {op_input!r}")


# committed offsets: one register per (group, topic, partition) -------------------------


@dataclass(frozen=True, slots=True)
class CommitOffset:
    group: str
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class FetchOffset:
    group: str
    topic: str
    partition: int


OffsetOp = CommitOffset | FetchOffset


class OffsetModel:
    """A commit writes the register and answers NONE; a fetch reads it (-1 if never written).

    The topic must outlive the history: deleting a topic drops its offsets, an effect
    across keys this model does not describe.
    """

    def key(self, op_input: OffsetOp) -> tuple[str, str, int]:
        return op_input.group, op_input.topic, op_input.partition

    def init(self) -> int:
        return NO_OFFSET

    def apply(self, offset: int, op_input: OffsetOp) -> tuple[Any, int]:
        match op_input:
            case CommitOffset():
                return OK, op_input.offset
            case FetchOffset():
                return offset, offset
            case _:
                raise TypeError(f"not an offset operation: {op_input!r}")
