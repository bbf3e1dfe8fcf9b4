"""Records inside RecordBatch v2: building batches and reading records back.

The hot path of producers, consumers and the leader's validation, so it is aiokafka's
record module (Cython; ~10x per-record Python) behind this one small module. aiokafka
ships a pure-Python twin of each class, used when its extension cannot load; both are
tested here against the same vectors (``IMPLEMENTATIONS``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from aiokafka.errors import CorruptRecordException
from aiokafka.record import default_records

from raftka.records.batch import MAGIC, NO_PRODUCER_ID, BatchHeader, Compression, iter_batches
from raftka.records.decompression import DecompressionError, plain_batch

Headers = Sequence[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class Implementation:
    builder: type
    batch: type


FAST = Implementation(default_records.DefaultRecordBatchBuilder, default_records.DefaultRecordBatch)
PURE_PYTHON = Implementation(
    default_records._DefaultRecordBatchBuilderPy, default_records._DefaultRecordBatchPy
)
IMPLEMENTATIONS = {"fast": FAST, "pure-python": PURE_PYTHON}


class RecordError(ValueError):
    """Records that cannot be read: malformed, or a codec that fails on them."""


class Record(NamedTuple):
    """A named tuple, not a dataclass: one is made per record read, on the hot path."""

    offset: int
    timestamp: int  # ms since the epoch
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class BatchBuilder:
    """One batch under construction: ``append`` until it says the batch is full, then
    ``build``. Offsets are deltas from 0: the partition leader assigns the real ones."""

    def __init__(
        self,
        compression: Compression = Compression.NONE,
        batch_size: int = 16_384,
        *,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        implementation: Implementation = FAST,
    ) -> None:
        self._builder = implementation.builder(
            MAGIC,
            int(compression),
            int(transactional),
            producer_id,
            producer_epoch,
            base_sequence,
            batch_size,
        )
        self.record_count = 0
        self.size_in_bytes = self._builder.size  # the batch's size if built now (before compression)

    def append(
        self, timestamp_ms: int, key: bytes | None, value: bytes | None, headers: Headers = ()
    ) -> bool:
        """Add a record; False (nothing added) when the batch is full. The first record
        always fits, however large: a batch over the broker's limit is the broker's to refuse."""
        added = self._builder.append(
            self.record_count, timestamp_ms, key, value, headers if type(headers) is list else list(headers)
        )
        if added is None:
            return False
        self.record_count += 1
        return True

    def build(self) -> bytearray:
        return self._builder.build()


def iter_batch_records(batch: bytes, *, implementation: Implementation = FAST) -> Iterator[Record]:
    """The records of one whole batch, control batches included; RecordError if they do
    not decode (the codec checks each record's length and the batch's record count)."""
    try:
        for record in implementation.batch(batch):
            yield Record(record.offset, record.timestamp, record.key, record.value, tuple(record.headers))
    except (CorruptRecordException, ValueError, IndexError, AssertionError, RuntimeError) as e:
        raise RecordError(str(e) or type(e).__name__) from None


def data_batches(
    buf: bytes | bytearray | memoryview,
    uncompressed_batch_bytes_max: int,
    *,
    implementation: Implementation = FAST,
    drops: Callable[[BatchHeader, memoryview], bool] | None = None,
) -> Iterator[Iterable[Any]]:
    """Each data batch of ``buf`` (control batches skipped, and those ``drops`` says, given
    every batch's header and bytes in order: a read_committed consumer's aborted ones) as an iterable of the codec's
    own record objects (``offset``, ``timestamp``, ``key``, ``value``, ``headers`` as a
    list), decoded as they are iterated: a consumer builds its records straight from them.
    A compressed batch is decompressed within ``uncompressed_batch_bytes_max``
    (``raftka.records.decompression``): bytes from a broker are not trusted to be small.
    RecordError, raised while iterating, for bytes that do not decode or a batch over the bound."""
    view = memoryview(buf)
    try:
        for pos, header in iter_batches(view):
            if drops is not None and drops(header, view[pos : pos + header.size]):
                continue
            if header.is_control:
                continue
            try:
                plain = plain_batch(view, pos, header, uncompressed_batch_bytes_max)
            except DecompressionError as e:
                raise RecordError(
                    f"batch at offset {header.base_offset}: {e} (the bound is uncompressed_batch_bytes_max)"
                ) from None
            yield _checked(implementation.batch(bytes(plain)))
    except (CorruptRecordException, ValueError, IndexError, AssertionError, RuntimeError) as e:
        raise RecordError(str(e) or type(e).__name__) from None


def _checked(batch: Iterable[Any]) -> Iterator[Any]:
    try:
        yield from batch
    except (CorruptRecordException, ValueError, IndexError, AssertionError, RuntimeError) as e:
        raise RecordError(str(e) or type(e).__name__) from None


def read_records(
    buf: bytes | bytearray | memoryview, *, implementation: Implementation = FAST
) -> Iterator[Record]:
    """Every data record of every batch in ``buf`` (control batches skipped), in order;
    RecordError for bytes that do not decode."""
    view = memoryview(buf)
    try:
        for pos, header in iter_batches(view):
            batch = implementation.batch(bytes(view[pos : pos + header.size]))
            if batch.is_control_batch:
                continue
            for record in batch:
                yield Record(record.offset, record.timestamp, record.key, record.value, tuple(record.headers))
    except (CorruptRecordException, ValueError, IndexError, AssertionError, RuntimeError) as e:
        raise RecordError(str(e) or type(e).__name__) from None
