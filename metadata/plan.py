"""What the controller does with one request: the records to append and the answer.

Every request handler (``topic_ops``, ``config_ops``, ``broker_ops``, ``offset_ops``)
is a pure function of the controller's latest image and the request that returns a
``Plan``. The controller appends ``records`` as one atomic batch and, once it commits,
sends ``response``; a plan without records is answered at once. Handlers never see the
log, the clock or the network, so each is tested on plain images.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from raftka.metadata.image import LEADER_UNCHANGED, MetadataImage
from raftka.metadata.validation import ValidationError
from raftka.v1 import controller_pb2, metadata_pb2

ErrorCode = controller_pb2.ErrorCode
MetadataRecord = metadata_pb2.MetadataRecord


@dataclass(slots=True)
class Plan:
    response: Any  # a controller_pb2 *Response with a ``status`` field
    records: list[MetadataRecord] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """The whole request was refused (per-item errors do not count)."""
        return self.response.status.error != ErrorCode.NONE


def refuse(response: Any, code: int, message: str) -> Plan:
    """A request refused as a whole: nothing to append."""
    response.status.error = code
    response.status.message = message
    return Plan(response)


def refuse_with(response: Any, error: ValidationError) -> Plan:
    return refuse(response, error.code, error.message)


def duplicates(names: Iterable[Any]) -> set[Any]:
    """The values that appear more than once."""
    seen: set[Any] = set()
    repeated: set[Any] = set()
    for name in names:
        (repeated if name in seen else seen).add(name)
    return repeated


def partition_change(
    topic_id: bytes,
    partition: int,
    *,
    isr: Iterable[int] | None = None,
    leader: int = LEADER_UNCHANGED,
    elr: Iterable[int] | None = None,
    last_known_elr: Iterable[int] | None = None,
    replicas: Iterable[int] | None = None,
    adding_replicas: Iterable[int] | None = None,
    removing_replicas: Iterable[int] | None = None,
) -> MetadataRecord:
    """A PartitionChangeRecord; None fields (and LEADER_UNCHANGED) leave the partition's as they are."""
    change = metadata_pb2.PartitionChangeRecord(partition_id=partition, topic_id=topic_id, leader=leader)
    for name, ids in (
        ("isr", isr),
        ("elr", elr),
        ("last_known_elr", last_known_elr),
        ("replicas", replicas),
        ("adding_replicas", adding_replicas),
        ("removing_replicas", removing_replicas),
    ):
        if ids is not None:
            getattr(change, name).SetInParent()
            getattr(change, name).ids.extend(ids)
    return MetadataRecord(partition_change=change)


def live_broker_ids(image: MetadataImage) -> frozenset[int]:
    return frozenset(b.broker_id for b in image.brokers.values() if not b.fenced)


def crashed_broker_ids(image: MetadataImage) -> frozenset[int]:
    """Brokers registered after a crash with their log directory intact: eligible, but
    their logs may lack an unflushed tail (``broker_ops.restart_kind``)."""
    return frozenset(b.broker_id for b in image.brokers.values() if b.crashed)
