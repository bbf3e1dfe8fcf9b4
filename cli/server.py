"""``raftka server --config FILE``: run one node in the foreground until SIGTERM/SIGINT.

The config and the storage are checked before anything starts, so a misconfigured node
fails at once with one line instead of joining the quorum half-working.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from cli.errors import CliError
from raft import server
from raft.node_config import load_config
from raft.storage import meta


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("server", help="run a node (controller) in the foreground")
    parser.add_argument("--config", type=Path, required=True, help="the node's TOML config")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    meta.check_meta(config.data_dir, config.node_id)
    try:
        asyncio.run(server.run_server(config))
    except server.ServerError as e:
        raise CliError(f"node {config.node_id} stopped: {e}") from None
    return 0
