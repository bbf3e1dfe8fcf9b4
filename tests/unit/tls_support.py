"""Certificates for the TLS tests: one CA with a node and a client certificate each, and
the ways a client can be wrong (another CA, an expired certificate, none at all)."""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass
from pathlib import Path

from raftka.security.certs import BROKER_UNIT, CLIENT_UNIT, CONTROLLER_UNIT, Issued, new_authority
from raftka.security.tls import TlsFiles


@dataclass(frozen=True)
class Certs:
    controller: TlsFiles  # CN=controller-1
    broker: TlsFiles  # CN=broker-101
    follower: TlsFiles  # CN=broker-102: another broker, one of 101's followers where a test makes it so
    admin: TlsFiles  # CN=admin,OU=client: a super user where the tests configure one
    alice: TlsFiles  # CN=alice,OU=client: an ordinary user
    foreign: TlsFiles  # CN=admin,OU=client, signed by another CA
    expired: TlsFiles  # CN=admin,OU=client, by the right CA, expired yesterday

    def no_client_cert(self) -> ssl.SSLContext:
        """A client that checks the server but presents nothing."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cafile=str(self.admin.ca))
        return context


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    authority, other = new_authority(), new_authority("another CA")
    ca = _write(directory / "ca.crt", authority.cert_pem)
    other_ca = _write(directory / "other-ca.crt", other.cert_pem)
    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)

    def files(name: str, issued: Issued, ca_path: Path = ca) -> TlsFiles:
        cert = _write(directory / f"{name}.crt", issued.cert_pem)
        return TlsFiles(ca_path, cert, _write(directory / f"{name}.key", issued.key_pem))

    return Certs(
        controller=files("controller-1", authority.issue("controller-1", CONTROLLER_UNIT)),
        broker=files("broker-101", authority.issue("broker-101", BROKER_UNIT)),
        follower=files("broker-102", authority.issue("broker-102", BROKER_UNIT)),
        admin=files("admin", authority.issue("admin", CLIENT_UNIT)),
        alice=files("alice", authority.issue("alice", CLIENT_UNIT)),
        foreign=files("foreign", other.issue("admin", CLIENT_UNIT), other_ca),
        expired=files("expired", authority.issue("admin", CLIENT_UNIT, not_before=long_ago, days=1)),
    )


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
