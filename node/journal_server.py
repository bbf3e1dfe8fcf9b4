"""One journal node: the quorum with the journal state machine and its service.

The quorum's own test node (the metadata controller is ``raftka.metadata.server``); run
it with ``python -m raftka.node.journal_server --config FILE``. Runs until SIGTERM or
SIGINT (``raftka.node.assembly``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import structlog

from raftka.metadata.acls import Authorizer
from raftka.node.assembly import ServerError, open_node, serve_until_signalled
from raftka.node.config import ConfigError, NodeConfig, load_config
from raftka.node.health import NodeHealth
from raftka.node.journal import Journal
from raftka.node.journal_service import JournalService, journal_rules
from raftka.node.logs import configure_logging
from raftka.raft.driver import RaftNode
from raftka.raft.storage.base import StorageError
from raftka.raft.storage.meta import check_meta
from raftka.v1 import raft_pb2, raft_pb2_grpc


class Controller:
    """A started node: its raft driver, its journal and how to stop it."""

    def __init__(self, node: RaftNode, journal: Journal, cluster_id: str) -> None:
        self.node = node
        self.journal = journal
        self.cluster_id = cluster_id


async def start_controller(config: NodeConfig) -> Controller:
    """A journal node: the quorum with the journal state machine and its service."""
    node: RaftNode
    journal = Journal(config.journal, lambda snapshot: node.save_snapshot(snapshot))
    health = NodeHealth(config.node_id, [raft_pb2.DESCRIPTOR.services_by_name["Journal"]])
    authorizer = Authorizer(config.authorizer.super_users, dict)  # no ACLs: super users only
    node = await open_node(
        config,
        journal,
        [lambda server: raft_pb2_grpc.add_JournalServicer_to_server(service, server), health.add_to_server],
        journal_rules(authorizer),
        authorizer,
    )
    node.add_caught_up_listener(health.set_serving)
    service = JournalService(node, journal, node.endpoints.address)
    await node.start()
    return Controller(node, journal, node.core.cluster_id)


async def run_server(config: NodeConfig) -> None:
    configure_logging(config.logging.level, config.logging.format, node_id=config.node_id)
    log = structlog.get_logger("raftka.node.journal_server")
    controller = await start_controller(config)
    log.info("controller listening", listener=config.listener, cluster_id=controller.cluster_id)
    await serve_until_signalled(controller.node)
    log.info("controller stopped")


def main(argv: list[str] | None = None) -> int:
    """``python -m raftka.node.journal_server --config FILE``: a problem the operator can fix is one line."""
    parser = argparse.ArgumentParser(
        prog="python -m raftka.node.journal_server", description="run one journal node"
    )
    parser.add_argument("--config", required=True, help="the node's TOML config")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        check_meta(config.data_dir, config.node_id)
        asyncio.run(run_server(config))
    except (ConfigError, StorageError, ServerError) as e:
        print(f"raftka.node.journal_server: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
