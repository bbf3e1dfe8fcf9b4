"""A compressed batch is decompressed within a bound, in every codec and framing Kafka's
clients write: a decompression bomb (a small batch of compressed zeros) is refused before
its bytes are spent, and a record count its bytes cannot hold before anything is decoded."""

from __future__ import annotations

import tracemalloc

import crc32c
import pytest

from raftka.records import validation
from raftka.records.batch import CRC_START, parse_header
from raftka.records.codec import Compression, RecordError, data_batches, read_records
from raftka.records.decompression import DecompressionError, decompress
from raftka.records.validation import BatchLimits, BatchValidationError, validate_batches
from raftka.v1 import controller_pb2
from tests.unit.compressed_batches import FRAMINGS, NOW, compressed_batch

E = controller_pb2.ErrorCode
MIB = 1 << 20


@pytest.mark.parametrize("framing", FRAMINGS)
def test_every_framing_decompresses_within_the_bound_and_its_records_decode(framing: str) -> None:
    codec, compress = FRAMINGS[framing]
    values = [b"a" * 1000, b"b", b"c" * 5000]
    batch = compressed_batch(values, codec, compress)
    validated = validate_batches(batch, BatchLimits(max_message_bytes=MIB), NOW)
    assert validated.record_count == 3
    assert bytes(validated.payload) == batch, "the batch is stored as sent, compressed"
    assert [r.value for r in read_records(validated.payload)] == values


@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_decompression_bomb_is_refused_before_its_bytes_are_spent(framing: str) -> None:
    """16 MiB of zeros in one record, sent in a few KB (snappy: ~0.8 MB), against a bound of
    1 MiB: refused, and the memory the check took stays near the bound, not 16 MiB (the old
    codec path decompressed it all, then copied it)."""
    codec, compress = FRAMINGS[framing]
    bomb = compressed_batch([bytes(16 * MIB)], codec, compress)
    assert len(bomb) < MIB
    limits = BatchLimits(max_message_bytes=MIB, uncompressed_batch_bytes_max=MIB)
    tracemalloc.start()
    try:
        with pytest.raises(BatchValidationError) as refused:
            validate_batches(bomb, limits, NOW)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused.value.code == E.INVALID_RECORD
    assert "broker.uncompressed_batch_bytes_max" in refused.value.message
    assert peak < 4 * MIB, f"{peak} bytes allocated checking a batch bounded at {MIB}"


@pytest.mark.parametrize("framing", FRAMINGS)
def test_decompress_returns_at_most_the_limit(framing: str) -> None:
    codec, compress = FRAMINGS[framing]
    data = bytes(range(256)) * 4096  # 1 MiB
    compressed = compress(data)
    assert decompress(codec, compressed, len(data)) == data
    with pytest.raises(DecompressionError, match=f"{len(data) - 1}"):
        decompress(codec, compressed, len(data) - 1)


def test_a_record_count_its_bytes_cannot_hold_is_refused_before_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(*_: object, **__: object) -> None:
        raise AssertionError("records were decoded")

    monkeypatch.setattr(validation, "iter_batch_records", never)
    monkeypatch.setattr(validation, "plain_batch", never)
    limits = BatchLimits(max_message_bytes=MIB, uncompressed_batch_bytes_max=MIB)
    for codec, compress in (FRAMINGS["snappy-raw"], (Compression.NONE, lambda d: d)):
        raw = bytearray(compressed_batch([b"x"], codec, compress))
        count = MIB  # a million records in one small batch
        raw[57:61] = count.to_bytes(4, "big")
        raw[8 + 4 + 4 + 1 + 4 + 2 : 8 + 4 + 4 + 1 + 4 + 2 + 4] = (count - 1).to_bytes(
            4, "big"
        )  # lastOffsetDelta
        raw[17:21] = crc32c.crc32c(bytes(raw[CRC_START:])).to_bytes(4, "big")
        assert parse_header(raw).record_count == count
        with pytest.raises(BatchValidationError) as refused:
            validate_batches(bytes(raw), limits, NOW)
        assert refused.value.code == E.INVALID_RECORD
        assert f"{count} records need at least" in refused.value.message


@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_consumer_decodes_a_fetched_bomb_within_its_own_bound(framing: str) -> None:
    """What a consumer reads (``data_batches``) is bounded too: the batch before the bomb
    decodes, the bomb is a RecordError naming its offset and the bound, and the memory
    spent stays near the bound, not 16 MiB."""
    codec, compress = FRAMINGS[framing]
    fetched = bytearray(compressed_batch([b"before"], codec, compress))
    bomb = bytearray(compressed_batch([bytes(16 * MIB)], codec, compress))
    bomb[0:8] = (1).to_bytes(8, "big")  # base offset 1 (outside the CRC), as a leader assigns
    fetched += bomb
    batches = data_batches(fetched, MIB)
    assert [r.value for r in next(batches)] == [b"before"]
    tracemalloc.start()
    try:
        with pytest.raises(RecordError) as refused:
            next(batches)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(refused.value)
    assert "batch at offset 1" in message and f"more than {MIB}" in message, message
    assert "uncompressed_batch_bytes_max" in message
    assert peak < 4 * MIB, f"{peak} bytes allocated decoding a batch bounded at {MIB}"
