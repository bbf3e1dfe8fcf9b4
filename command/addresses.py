"""Where a command finds the controllers or brokers: the ``HOST:PORT,...`` a flag gives,
each checked, else every node of the local cluster (``raftka cluster up``)."""

from __future__ import annotations

from pathlib import Path

from raftka.command import local
from raftka.command.errors import CliError
from raftka.node.config import ConfigError, parse_host_port


def bootstrap_addresses(flag: str | None, cluster_dir: Path | None) -> list[str]:
    """``--bootstrap-controller`` if given, else every node of the local cluster."""
    if flag is None:
        return local.load(local.resolve_dir(cluster_dir)).addresses()
    return parse_addresses(flag, "--bootstrap-controller")


def parse_addresses(text: str, flag: str) -> list[str]:
    """``HOST:PORT,...`` given to ``flag``, each checked; CliError naming the flag."""
    addresses = [a.strip() for a in text.split(",") if a.strip()]
    if not addresses:
        raise CliError(f"{flag}: expected HOST:PORT,...")
    for address in addresses:
        try:
            parse_host_port(address, flag)
        except ConfigError as e:
            raise CliError(str(e)) from None
    return addresses
