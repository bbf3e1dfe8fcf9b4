"""``raftka log dump PATH``: a metadata log or a partition log as it is on disk, like
kafka-dump-log.sh. A folder holding ``partition.metadata`` (or a segment in one) is a
partition log (``raftka.broker.log.dump``; ``--print-data`` adds every record); anything else
is the metadata log.

JSON output is one object per batch (snapshot, damaged region) per line: jq-friendly and
streamed, so a large log never sits in memory. The table is one line per entry in
kafka-dump-log's words, with raft's own control records decoded, since those are what
an operator reads a metadata log for. Decoding lives in ``raftka.raft.storage.dump``.
"""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path
from typing import Any

from raftka.broker.log.dump import is_partition_path, iter_partition_dump
from raftka.command import output
from raftka.command.errors import CliError
from raftka.raft.control import decode_control
from raftka.raft.storage.dump import iter_dump


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    log = commands.add_parser("log", help="inspect a node's metadata log or partition log files")
    actions = log.add_subparsers(dest="action", required=True, metavar="ACTION")
    dump = actions.add_parser("dump", help="print every batch of a data dir, log dir or segment file")
    dump.add_argument(
        "path",
        type=Path,
        metavar="PATH",
        help="a node's data_dir, its log directory, a partition folder or one file",
    )
    dump.add_argument(
        "--print-data", action="store_true", help="partition logs: every record's key, value and headers"
    )
    output.add_output_option(dump)
    dump.set_defaults(func=run_dump)


def run_dump(args: argparse.Namespace) -> int:
    if not args.path.exists():
        raise CliError(f"{args.path}: no such file or directory")
    current_file = None
    partition = is_partition_path(args.path)
    entries = iter_partition_dump(args.path, args.print_data) if partition else iter_dump(args.path)
    for entry in entries:
        if args.output == "json":
            print(json.dumps(entry))
            continue
        if entry["file"] != current_file:
            current_file = entry["file"]
            print(f"Dumping {current_file}")
        print(format_partition_entry(entry) if partition else format_entry(entry))
    return 0


def format_entry(entry: dict[str, Any]) -> str:
    """One line, with kafka-dump-log's field names where it has one."""
    kind = entry["type"]
    if kind == "snapshot":
        if not entry["valid"]:
            return f"snapshot size: {entry['size_bytes']} isvalid: false error: {entry['error']}"
        return (
            f"snapshot offset: {entry['offset']} epoch: {entry['epoch']} size: {entry['size_bytes']} "
            f"dataBytes: {entry['data_bytes']} isvalid: true"
        )
    head = (
        f"baseOffset: {entry.get('base_offset', '?')} lastOffset: {entry.get('last_offset', '?')} "
        f"count: {entry.get('record_count', '?')} epoch: {entry.get('epoch', '?')} "
        f"kind: {entry.get('kind', '?')} position: {entry['position']} "
        f"CreateTime: {entry.get('timestamp_ms', '?')} size: {entry['size_bytes']}"
    )
    if kind == "damaged":
        return f"{head} isvalid: false error: {entry['error']}"
    line = f"{head} isvalid: true"
    if entry["kind"] != "DATA" and entry.get("records"):
        controls = [decode_control(base64.b64decode(r)) for r in entry["records"]]
        line += " | " + " ".join(json.dumps(c, separators=(",", ":")) for c in controls)
    return line


def format_partition_entry(entry: dict[str, Any]) -> str:
    if entry["type"] == "damaged":
        return f"position: {entry['position']} isvalid: false error: {entry['error']}"
    if entry["type"] == "gap":
        first, last = entry["first_offset"], entry["last_offset"]
        return f"gap: offsets {first}..{last} compacted away ({last - first + 1} offsets)"
    if entry["type"] == "aborted_transactions":
        line = f"aborted transactions: {len(entry['aborted'])}"
        for a in entry["aborted"]:
            line += (
                f"\n| producerId: {a['producer_id']} firstOffset: {a['first_offset']} "
                f"lastOffset: {a['last_offset']} lastStableOffset: {a['last_stable_offset']}"
            )
        return line
    if entry["type"] == "producer_snapshot":
        line = f"producer snapshot offset: {entry['offset']} producers: {len(entry['producers'])}"
        for p in entry["producers"]:
            for b in p["batches"]:
                line += (
                    f"\n| producerId: {p['producer_id']} producerEpoch: {p['producer_epoch']} "
                    f"firstSequence: {b['first_sequence']} lastSequence: {b['last_sequence']} "
                    f"firstOffset: {b['first_offset']} lastOffset: {b['last_offset']} timestamp: {b['timestamp']}"
                )
        return line
    line = (
        f"baseOffset: {entry['base_offset']} lastOffset: {entry['last_offset']} count: {entry['record_count']} "
        f"baseSequence: {entry['base_sequence']} producerId: {entry['producer_id']} "
        f"producerEpoch: {entry['producer_epoch']} "
        f"partitionLeaderEpoch: {entry['partition_leader_epoch']} position: {entry['position']} "
        f"{entry['timestamp_type']}: {entry['max_timestamp']} size: {entry['size_bytes']} "
        f"isTransactional: {str(entry['is_transactional']).lower()} "
        f"isControl: {str(entry['is_control']).lower()} "
        f"compresscodec: {entry['compression']} isvalid: {str(entry['crc_valid']).lower()}"
    )
    marker = entry.get("end_txn_marker")
    if isinstance(marker, dict):
        line += f" endTxnMarker: {marker['type']} coordinatorEpoch: {marker['coordinator_epoch']}"
    elif marker is not None:
        line += f" {marker}"
    records = entry.get("records")
    if isinstance(records, str):
        return f"{line}\n| {records}"
    for r in records or ():
        line += (
            f"\n| offset: {r['offset']} CreateTime: {r['timestamp']} key: {r['key']} payload: {r['value']}"
        )
        if r["headers"]:
            line += f" headers: {json.dumps(r['headers'])}"
    return line
