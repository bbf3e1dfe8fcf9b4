"""Transaction markers: the control batch a partition leader writes when a transaction
ends (Kafka's ``EndTransactionMarker``).

A marker is a batch with the transactional and control attributes set, the producer's id
and epoch, no sequence (-1), and one record::

    key:   version i16 (0) | type i16 (0: ABORT, 1: COMMIT)
    value: version i16 (0) | coordinator epoch i32

Consumers never see control records as records; a ``read_committed`` consumer uses an
ABORT marker to end the producer's aborted run (``raftka.client``). No I/O here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from raftka.records.batch import CONTROL_MASK, NO_SEQUENCE, TRANSACTIONAL_MASK, set_attributes
from raftka.records.codec import BatchBuilder, RecordError, iter_batch_records

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class Marker:
    committed: bool
    coordinator_epoch: int


def marker_batch(
    producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int, timestamp_ms: int
) -> bytearray:
    """A whole marker batch at offset 0 (the leader assigns its offset)."""
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE)
    builder.append(
        timestamp_ms,
        _KEY.pack(CONTROL_KEY_VERSION, COMMIT if committed else ABORT),
        _VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch),
    )
    batch = builder.build()
    set_attributes(batch, 0, TRANSACTIONAL_MASK | CONTROL_MASK)
    return batch


def control_type(key: bytes | None) -> int | None:
    """The control record type of ``key`` (ABORT, COMMIT, or another Kafka knows), None if
    it is not a control key."""
    if key is None or len(key) < _KEY.size:
        return None
    return _KEY.unpack_from(key)[1]


def read_marker(batch: bytes) -> Marker | None:
    """The marker of a whole control batch, None if its record is another control type;
    RecordError if it does not decode."""
    for record in iter_batch_records(batch):
        kind = control_type(record.key)
        if kind not in (ABORT, COMMIT):
            return None
        if record.value is None or len(record.value) < _VALUE.size:
            raise RecordError(f"marker at offset {record.offset}: value of {len(record.value or b'')} bytes")
        return Marker(kind == COMMIT, _VALUE.unpack_from(record.value)[1])
    raise RecordError("a control batch without records")
