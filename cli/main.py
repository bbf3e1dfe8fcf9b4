"""The ``raftka`` command: subcommands shaped like Kafka's tools.

Errors the user can act on end as one line, ``raftka: error: <problem>``, with exit
status 2 for bad usage and 1 for a failure while running; a traceback means a bug.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import version
from typing import NoReturn

from raftka.cli import (
    acls,
    audit_cmd,
    brokers,
    certs_cmd,
    cluster,
    configs,
    consume,
    groups,
    health,
    logdump,
    metadata_cmd,
    offsets,
    produce,
    quorum,
    quotas,
    server,
    storage_cmd,
    topics,
    transactions,
    users,
)
from raftka.client.errors import AdminError, KafkaError
from raftka.command.errors import EXIT_FAILURE, CliError
from raftka.node.config import ConfigError
from raftka.node.logs import command_logging
from raftka.raft.storage.base import StorageError
from raftka.tools.chaos import chaos
from raftka.tools.perf import perf

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the problem, not the usage block."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see '{self.prog} --help')", EXIT_USAGE)


def fail(message: str, status: int) -> NoReturn:
    print(f"raftka: error: {message}", file=sys.stderr)
    sys.exit(status)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="raftka", description="raftka: a Kafka-style platform on a KRaft-style quorum")
    parser.add_argument("--version", action="version", version=f"raftka {version('raftka')}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (
        cluster,
        server,
        storage_cmd,
        quorum,
        health,
        topics,
        configs,
        brokers,
        produce,
        consume,
        groups,
        transactions,
        offsets,
        metadata_cmd,
        logdump,
        audit_cmd,
        chaos,
        perf,
        certs_cmd,
        acls,
        quotas,
        users,
    ):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "server":  # a server sets up its own logs from its config
        return _run(args)
    # The clients' logs (retries, leader moves) go to stderr, problems only: stdout is
    # the command's answer (``--output json``) and must stay parseable.
    with command_logging():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args))
    except CliError as e:
        fail(str(e), e.status)
    except (AdminError, KafkaError, ConfigError, StorageError) as e:
        fail(str(e), EXIT_FAILURE)
    except BrokenPipeError:  # `raftka log dump DIR | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit's flush
        return EXIT_FAILURE
    except OSError as e:  # a file or socket the command needed: the OS's message says which
        fail(str(e), EXIT_FAILURE)
    except KeyboardInterrupt:
        fail("interrupted", EXIT_INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
