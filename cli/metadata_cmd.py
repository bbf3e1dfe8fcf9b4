"""``raftka metadata dump PATH``: the metadata log and snapshots of a data directory as
JSON lines, like ``kafka-dump-log --cluster-metadata-decoder``; ``raftka metadata collect``:
copies of nodes' log files, read-only with a manifest, for an audit elsewhere.

Each entry has ``offset``, ``epoch``, ``timestamp``, ``type`` (``TOPIC_RECORD``...) and
``data``. ``--output json`` prints one JSON object per line (jq-friendly, streamed, so a
large log never sits in memory); the table is one readable line per record. Decoding
lives in ``raftka.metadata.dump``: the same code the brokers and the audit replay with.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from raftka.command import local, output
from raftka.command.errors import CliError


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    metadata = commands.add_parser("metadata", help="inspect the cluster metadata log")
    actions = metadata.add_subparsers(dest="action", required=True, metavar="ACTION")
    dump = actions.add_parser("dump", help="every metadata record of a data dir, log dir or file")
    dump.add_argument(
        "path", type=Path, metavar="PATH", help="a node's data_dir, its log directory or one file"
    )
    output.add_output_option(dump)
    dump.set_defaults(func=run_dump)
    collect = actions.add_parser(
        "collect", help="copy nodes' log files (segments, snapshots, archive) read-only, with checksums"
    )
    collect.add_argument(
        "paths", nargs="*", type=Path, metavar="DATA_DIR", help="nodes' data dirs (default: every local node)"
    )
    collect.add_argument("--out", type=Path, required=True, help="where node-<id>/ folders are written")
    collect.add_argument("--dir", type=Path, help="local cluster directory, when no DATA_DIR is given")
    output.add_output_option(collect)
    collect.set_defaults(func=run_collect)


def run_collect(args: argparse.Namespace) -> int:
    from raftka.raft.storage.collect import collect

    paths = args.paths or [Path(n.data_dir) for n in local.load(local.resolve_dir(args.dir)).nodes]
    for path in paths:
        if not path.is_dir():
            raise CliError(f"{path}: not a data directory")
    manifests = [collect(path, args.out) for path in paths]
    if args.output == "json":
        print(output.to_json(manifests))
    else:
        rows = [
            (m["node_id"], len(m["files"]), sum(f["bytes"] for f in m["files"]), m["source"])
            for m in manifests
        ]
        print(output.table(("NODE", "FILES", "BYTES", "FROM"), rows))
        print(f"Copied to {args.out} (read-only; node-<id>/MANIFEST.json has SHA-256 checksums)")
    return 0


def run_dump(args: argparse.Namespace) -> int:
    from raftka.metadata.dump import iter_metadata_dump  # on demand: other commands never load the decoders

    if not args.path.exists():
        raise CliError(f"{args.path}: no such file or directory")
    for entry in iter_metadata_dump(args.path):
        print(json.dumps(entry, separators=(",", ":")) if args.output == "json" else format_entry(entry))
    return 0


def format_entry(entry: dict[str, Any]) -> str:
    """One line: kafka-dump-log's words; a damaged region says where and why."""
    line = f"offset: {entry.get('offset', '?')} epoch: {entry.get('epoch', '?')} CreateTime: {entry.get('timestamp', '?')}"
    if "snapshot" in entry:
        line += f" snapshot: {entry['snapshot']}"
    if "error" in entry:
        place = f" file: {entry['file']}" if "file" in entry else ""
        place += f" position: {entry['position']}" if "position" in entry else ""
        return f"{line} type: {entry['type']}{place} error: {entry['error']}"
    payload = json.dumps({"type": entry["type"], "data": entry["data"]}, separators=(",", ":"))
    return f"{line} payload: {payload}"
