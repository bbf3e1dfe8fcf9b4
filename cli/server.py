"""``raftka server --config FILE``: run one node in the foreground until SIGTERM/SIGINT.

``process_roles`` picks what runs: a controller (a voter running the QuorumController,
``raftka.metadata.server``) or a broker (a Raft observer of the metadata log,
``raftka.broker.server``). The config and the storage are checked before anything starts, so
a misconfigured node fails at once with one line instead of joining the quorum
half-working.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from raftka.command.errors import CliError
from raftka.node.assembly import ServerError
from raftka.node.config import BROKER, NodeConfig, load_config
from raftka.raft.storage import meta


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("server", help="run a node (controller or broker) in the foreground")
    parser.add_argument("--config", type=Path, required=True, help="the node's TOML config")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    meta.check_meta(config.data_dir, config.node_id)
    try:
        asyncio.run(_entry_point(config)(config))
    except ServerError as e:
        raise CliError(f"node {config.node_id} stopped: {e}") from None
    return 0


def _entry_point(config: NodeConfig) -> Callable[[NodeConfig], Awaitable[None]]:
    """Imported on demand: a controller never loads the broker's code, nor the reverse."""
    if BROKER in config.process_roles:
        from raftka.broker.server import run_broker

        return run_broker
    from raftka.metadata.server import run_controller

    return run_controller
