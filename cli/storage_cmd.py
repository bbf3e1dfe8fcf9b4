"""``raftka storage format|info|random-uuid``: kafka-storage.sh for raftka.

A node refuses to start on unformatted storage, so formatting is the one explicit step
that ties a data directory to a cluster id; ``random-uuid`` makes that id.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from raftka.command import output
from raftka.command.errors import CliError
from raftka.node.config import load_config
from raftka.raft.storage import meta
from raftka.raft.voters import Voter, VoterSet, parse_initial_controllers


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    storage = commands.add_parser("storage", help="format and inspect a node's data directory")
    actions = storage.add_subparsers(dest="action", required=True, metavar="ACTION")

    fmt = actions.add_parser("format", help="write meta.properties (cluster id, node id) into data_dir")
    fmt.add_argument("--config", type=Path, required=True, help="the node's TOML config")
    fmt.add_argument(
        "--cluster-id", required=True, help="from 'raftka storage random-uuid'; same on every node"
    )
    fmt.add_argument(
        "--ignore-formatted", action="store_true", help="succeed, changing nothing, if already formatted"
    )
    fmt.add_argument(
        "--initial-cluster",
        action="store_true",
        help="this node starts a brand-new cluster and may vote at once; never for a node that lost "
        "its disk (without it, the node catches up from the others before it votes)",
    )
    bootstrap = fmt.add_mutually_exclusive_group()
    bootstrap.add_argument(
        "--standalone",
        action="store_true",
        help="a dynamic quorum (KIP-853) of this one controller; add others with "
        "`raftka quorum add-controller`",
    )
    bootstrap.add_argument(
        "--initial-controllers",
        metavar="ID@HOST:PORT:DIRECTORY_ID,...",
        help="a dynamic quorum's first voters (the same list on each of them); this node's "
        "directory id is its entry's",
    )
    output.add_output_option(fmt)
    fmt.set_defaults(func=run_format)

    info = actions.add_parser("info", help="show the cluster id and node id data_dir is formatted for")
    info.add_argument("--config", type=Path, required=True, help="the node's TOML config")
    output.add_output_option(info)
    info.set_defaults(func=run_info)

    random_uuid = actions.add_parser("random-uuid", help="print a new cluster id")
    random_uuid.set_defaults(func=run_random_uuid)


def run_format(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    bootstrap = _bootstrap_voters(args, config.node_id, config.listener)
    try:
        written = meta.format_storage(
            config.data_dir,
            args.cluster_id,
            config.node_id,
            ignore_formatted=args.ignore_formatted,
            initial_cluster=args.initial_cluster,
            bootstrap_voters=bootstrap,
        )
    except ValueError as e:  # a malformed cluster id
        raise CliError(f"--cluster-id: {e}") from None
    result = {
        "data_dir": str(config.data_dir),
        "cluster_id": args.cluster_id,
        "node_id": config.node_id,
        "directory_id": meta.read_meta(config.data_dir).directory_id,
        "formatted": written,
    }
    if args.output == "json":
        print(output.to_json(result))
    elif written:
        print(f"Formatted {config.data_dir} for cluster {args.cluster_id}, node {config.node_id}.")
    else:
        print(f"{config.data_dir} is already formatted; left as it is.")
    return 0


def _bootstrap_voters(args: argparse.Namespace, node_id: int, listener: str) -> VoterSet | None:
    if args.standalone:
        return VoterSet([Voter(node_id, meta.new_directory_id(), (listener,))])
    if args.initial_controllers is None:
        return None
    try:
        voters = parse_initial_controllers(args.initial_controllers)
    except ValueError as e:
        raise CliError(f"--initial-controllers: {e}") from None
    if node_id not in voters:
        raise CliError(f"--initial-controllers: this node ({node_id}) is not in the list")
    return voters


def run_info(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    props = meta.read_meta(config.data_dir)
    result = {
        "data_dir": str(config.data_dir),
        "cluster_id": props.cluster_id,
        "node_id": props.node_id,
        "directory_id": props.directory_id,
        "version": props.version,
    }
    if args.output == "json":
        print(output.to_json(result))
    else:
        print(
            output.fields(
                [
                    ("DataDir", result["data_dir"]),
                    ("ClusterId", props.cluster_id),
                    ("NodeId", props.node_id),
                    ("DirectoryId", props.directory_id or "-"),
                    ("Version", props.version),
                ]
            )
        )
    return 0


def run_random_uuid(args: argparse.Namespace) -> int:
    print(meta.new_cluster_id())
    return 0
