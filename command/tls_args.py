"""Which certificate a command presents: ``--tls-ca/--tls-cert/--tls-key``, else a client
config file (``--command-config``, Kafka's tools' name for it), else the local cluster's
client certificate when ``raftka cluster up --tls`` made one, else none (plaintext).

The client config file is TOML with the same ``[tls]`` table as a node's config::

    [tls]
    ca = "certs/ca.crt"      # relative paths: from the file's directory
    cert = "certs/admin.crt"
    key = "certs/admin.key"

and, for a data listener with SASL (``broker.data_sasl_mechanisms``), a ``[sasl]`` table the
data commands (produce, consume, groups) log in with; in a file, so the password is not
on the command line::

    [sasl]
    mechanism = "SCRAM-SHA-512"   # or SCRAM-SHA-256, or PLAIN
    username = "alice"
    password = "..."
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

from raftka.command import local
from raftka.command.errors import CliError
from raftka.security.sasl import SaslCredentials
from raftka.security.tls import KEYS, TlsError, TlsFiles, tls_files

SASL_KEYS = ("mechanism", "username", "password")


def add_tls_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS (default: the local cluster's client certificate, if it has TLS)")
    group.add_argument("--tls-ca", metavar="PEM", help="the CA that signed the cluster's certificates")
    group.add_argument("--tls-cert", metavar="PEM", help="this client's certificate")
    group.add_argument("--tls-key", metavar="PEM", help="this client's private key")
    group.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="a TOML file with a [tls] table of ca, cert and key",
    )


def client_tls(args: argparse.Namespace) -> TlsFiles | None:
    """The files this command's connections use; None for plaintext."""
    flags = {name: getattr(args, f"tls_{name}", None) for name in KEYS}
    config: Path | None = getattr(args, "command_config", None)
    try:
        if any(flags.values()):
            if config is not None:
                raise CliError("--command-config: give either it or --tls-ca/--tls-cert/--tls-key, not both")
            return tls_files(flags, Path.cwd(), prefix="--tls-")
        if config is not None:
            return _from_file(config)
    except TlsError as e:
        raise CliError(str(e)) from None
    cluster_dir = local.resolve_dir(getattr(args, "dir", None))
    return local.load(cluster_dir).client_tls() if local.exists(cluster_dir) else None


def client_sasl(args: argparse.Namespace) -> SaslCredentials | None:
    """The ``[sasl]`` table of ``--command-config``, if any: how data commands log in."""
    path: Path | None = getattr(args, "command_config", None)
    table = _read(path).get("sasl") if path is not None else None
    if table is None:
        return None
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise CliError(f"{path}: sasl: expected a table of strings ({', '.join(SASL_KEYS)})")
    missing = [key for key in ("username", "password") if key not in table]
    if missing:
        raise CliError(f"{path}: sasl.{missing[0]}: missing (a user name and a password are needed)")
    try:
        return SaslCredentials(**table)
    except ValueError as e:
        raise CliError(f"{path}: {e}") from None


def _read(path: Path) -> dict:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise CliError(f"--command-config: cannot read {path}: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise CliError(f"--command-config: {path} is not TOML: {e}") from None
    unknown = (
        sorted(set(data) - {"tls", "sasl"})
        or sorted(set(data.get("tls", {})) - set(KEYS))
        or sorted(set(data.get("sasl", {})) - set(SASL_KEYS))
    )
    if unknown:
        raise CliError(
            f"{path}: {unknown[0]}: unknown key (the file holds a [tls] table of {', '.join(KEYS)} "
            f"and a [sasl] table of {', '.join(SASL_KEYS)})"
        )
    return data


def _from_file(path: Path) -> TlsFiles | None:
    data = _read(path)
    if "tls" not in data:
        return None
    table = data["tls"]
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise CliError(f"{path}: tls: expected a table of strings ({', '.join(KEYS)})")
    try:
        return tls_files(table, path.parent.absolute())
    except TlsError as e:
        raise CliError(f"{path}: {e}") from None
