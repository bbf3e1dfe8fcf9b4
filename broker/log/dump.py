"""Partition segments as they are on disk, batch by batch, for ``raftka log dump``.

Walks every ``.log`` of a partition folder (or one file) with the same frame checks the
broker's recovery runs: each batch is reported with its CRC verdict, its producer id,
epoch and sequence, whether it is transactional or a control batch (a transaction
marker: COMMIT or ABORT and its coordinator epoch, as Kafka's DumpLogSegments shows
``endTxnMarker``), and a region that is not a whole batch ends the file's dump with a
``damaged`` entry naming the problem. Offsets missing between batches (a compacted log's,
where the cleaner removed records) come as a ``gap`` entry before the batch after them,
from the segment's base offset on, and across a folder's segments. Then every producer
state snapshot
(``<offset>.snapshot``, or one such file): its producers with their last batches and open
transaction, or a ``damaged`` entry if it does not read back; and every aborted-transaction
index (``<offset>.txnindex``).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from raftka.broker.log import producer_snapshots
from raftka.broker.log.partition_log import METADATA_FILE
from raftka.broker.log.transaction_index import SUFFIX as TXN_INDEX_SUFFIX
from raftka.broker.log.transaction_index import TransactionIndex
from raftka.records.batch import HEADER_SIZE, BatchFramingError, crc_matches, parse_header, read_header
from raftka.records.codec import Compression, RecordError, iter_batch_records
from raftka.records.control import read_marker


def is_partition_path(path: Path) -> bool:
    folder = path if path.is_dir() else path.parent
    return (folder / METADATA_FILE).exists()


def iter_partition_dump(path: Path, print_data: bool = False) -> Iterator[dict[str, Any]]:
    suffix = producer_snapshots.SUFFIX
    files = (
        [
            *sorted(path.glob("*.log")),
            *sorted(path.glob(f"*{suffix}")),
            *sorted(path.glob(f"*{TXN_INDEX_SUFFIX}")),
        ]
        if path.is_dir()
        else [path]
    )
    expected: int | None = None  # the offset after the last batch dumped
    for file in files:
        if file.name.endswith(suffix):
            yield from _dump_snapshot(file)
        elif file.name.endswith(TXN_INDEX_SUFFIX):
            yield _dump_txn_index(file)
        else:
            if expected is None:
                expected = int(file.stem) if file.stem.isdigit() else None
            for entry in _dump_file(file, print_data):
                if entry["type"] == "batch":
                    if expected is not None and entry["base_offset"] > expected:
                        yield _gap(file, expected, entry["base_offset"] - 1)
                    expected = entry["last_offset"] + 1
                yield entry


def _gap(file: Path, first: int, last: int) -> dict[str, Any]:
    return {"file": str(file), "type": "gap", "first_offset": first, "last_offset": last}


def _dump_txn_index(file: Path) -> dict[str, Any]:
    entries = TransactionIndex(file).entries
    aborted = [
        {
            "producer_id": e.producer_id,
            "first_offset": e.first_offset,
            "last_offset": e.last_offset,
            "last_stable_offset": e.last_stable_offset,
        }
        for e in entries
    ]
    return {"file": str(file), "type": "aborted_transactions", "aborted": aborted}


def _dump_snapshot(file: Path) -> Iterator[dict[str, Any]]:
    try:
        state = producer_snapshots.decode(file.read_bytes())
    except producer_snapshots.SnapshotError as e:
        yield {"file": str(file), "type": "damaged", "position": 0, "error": str(e)}
        return
    producers = [
        {
            "producer_id": producer_id,
            "producer_epoch": entry.epoch,
            "coordinator_epoch": entry.coordinator_epoch,
            "current_txn_first_offset": entry.txn_first_offset,
            "batches": [
                {
                    "first_sequence": b.first_sequence,
                    "last_sequence": b.last_sequence,
                    "first_offset": b.first_offset,
                    "last_offset": b.last_offset,
                    "timestamp": b.timestamp,
                }
                for b in entry.batches
            ],
        }
        for producer_id, entry in state.producers.items()
    ]
    yield {"file": str(file), "type": "producer_snapshot", "offset": int(file.stem), "producers": producers}


def _dump_file(file: Path, print_data: bool) -> Iterator[dict[str, Any]]:
    with open(file, "rb") as f:
        position = 0
        while head := f.read(HEADER_SIZE):
            try:
                data = head + f.read(read_header(head).size - len(head))
                header = parse_header(data)
            except BatchFramingError as e:
                yield {"file": str(file), "type": "damaged", "position": position, "error": str(e)}
                return
            entry: dict[str, Any] = {
                "file": str(file),
                "type": "batch",
                "position": position,
                "base_offset": header.base_offset,
                "last_offset": header.last_offset,
                "record_count": header.record_count,
                "partition_leader_epoch": header.partition_leader_epoch,
                "size_bytes": header.size,
                "crc_valid": crc_matches(data, 0, header),
                "max_timestamp": header.max_timestamp,
                "timestamp_type": "LogAppendTime" if header.log_append_time else "CreateTime",
                "compression": Compression(header.compression).name.lower(),
                "producer_id": header.producer_id,
                "producer_epoch": header.producer_epoch,
                "base_sequence": header.base_sequence,
                "is_transactional": header.is_transactional,
                "is_control": header.is_control,
            }
            if header.is_control:
                entry["end_txn_marker"] = _marker(data)
            if print_data:
                entry["records"] = _records(data)
            yield entry
            position += header.size


def _marker(data: bytes) -> dict[str, Any] | str | None:
    try:
        marker = read_marker(data)
    except RecordError as e:
        return f"the control record does not decode: {e}"
    if marker is None:
        return None
    return {"type": "COMMIT" if marker.committed else "ABORT", "coordinator_epoch": marker.coordinator_epoch}


def _records(data: bytes) -> list[dict[str, Any]] | str:
    try:
        return [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": _text(r.key),
                "value": _text(r.value),
                "headers": {k: _text(v) for k, v in r.headers},
            }
            for r in iter_batch_records(data)
        ]
    except RecordError as e:
        return f"records do not decode: {e}"


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()
