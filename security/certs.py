"""A development certificate authority: one CA and a certificate per controller, broker
and client, made with the ``cryptography`` library (``raftka certs init``).

The subject says who the holder is, and authorization reads it (``raftka.security.principal``):
``CN=controller-1,OU=controller,O=raftka``, ``CN=broker-101,OU=broker,O=raftka``,
``CN=admin,OU=client,O=raftka``. Every certificate names the hosts it serves as subject
alternative names (127.0.0.1 and localhost, plus ``hosts``) and may be used both as a
server and as a client, since every node is both. Keys are ECDSA P-256, written 0600.

This is a development CA: its key sits beside the certificates. In production, sign
certificates of the same shape with your own CA and point ``tls.*`` at them.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ORGANIZATION = "raftka"
CONTROLLER_UNIT = "controller"
BROKER_UNIT = "broker"
CLIENT_UNIT = "client"
DEFAULT_HOSTS = ("127.0.0.1", "localhost")
DEFAULT_DAYS = 365
CA_NAME = "ca"
_CLOCK_SKEW = datetime.timedelta(minutes=5)  # valid a little before now, for peers whose clocks lag


class CertsError(Exception):
    """Certificates cannot be made as asked; the message says why."""


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate and its key, as PEM."""

    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True, slots=True)
class Authority:
    """A CA able to sign: its certificate and key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        unit: str,
        *,
        hosts: Sequence[str] = DEFAULT_HOSTS,
        not_before: datetime.datetime | None = None,
        days: int = DEFAULT_DAYS,
    ) -> Issued:
        """A certificate for ``CN=common_name,OU=unit,O=raftka`` valid for ``days`` from
        ``not_before`` (default: now) on ``hosts``."""
        key = ec.generate_private_key(ec.SECP256R1())
        start = (not_before or _now()) - _CLOCK_SKEW
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject(common_name, unit))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + _CLOCK_SKEW + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(signing=False), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(x509.SubjectAlternativeName(_alt_names(hosts)), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        cert = builder.sign(self.key, hashes.SHA256())
        return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_authority(name: str = "raftka development CA", days: int = DEFAULT_DAYS) -> Authority:
    """A self-signed CA that may sign end certificates only (path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    start = _now() - _CLOCK_SKEW
    name_attrs = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, name),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name_attrs)
        .issuer_name(name_attrs)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + _CLOCK_SKEW + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signing=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Authority(cert, key)


def subject(common_name: str, unit: str) -> x509.Name:
    """``CN=common_name,OU=unit,O=raftka`` (written most specific first, as Kafka prints it)."""
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def init_certs(
    directory: Path,
    *,
    controllers: Sequence[int],
    brokers: Sequence[int],
    clients: Sequence[str] = ("admin",),
    hosts: Sequence[str] = DEFAULT_HOSTS,
    days: int = DEFAULT_DAYS,
) -> dict[str, Path]:
    """Write ``ca.crt``/``ca.key`` and ``NAME.crt``/``NAME.key`` for every controller
    (``controller-ID``), broker (``broker-ID``) and client (``NAME``) into ``directory``;
    the paths written by name. Refuses to overwrite a CA already there."""
    if days < 1:
        raise CertsError(f"--days: expected 1 or more, got {days}")
    names = [f"controller-{i}" for i in controllers] + [f"broker-{i}" for i in brokers] + list(clients)
    if len(set(names)) != len(names):
        raise CertsError(f"a certificate name is given twice: {names}")
    for name in clients:
        if not name or not all(c.isalnum() or c in "-_." for c in name):
            raise CertsError(f"--clients: {name!r} is not a name of letters, digits, '-', '_' or '.'")
    for host in hosts:
        if not host:
            raise CertsError("--hosts: an empty host name")
    if (directory / f"{CA_NAME}.crt").exists():
        raise CertsError(
            f"{directory} already holds a CA ({CA_NAME}.crt); remove it or pick another directory"
        )
    directory.mkdir(parents=True, exist_ok=True)
    authority = new_authority(days=days)
    written = {CA_NAME: directory / f"{CA_NAME}.crt"}
    _write(written[CA_NAME], authority.cert_pem, private=False)
    _write(directory / f"{CA_NAME}.key", _key_pem(authority.key), private=True)
    units = [CONTROLLER_UNIT] * len(controllers) + [BROKER_UNIT] * len(brokers) + [CLIENT_UNIT] * len(clients)
    for name, unit in zip(names, units, strict=True):
        issued = authority.issue(name, unit, hosts=hosts, days=days)
        written[name] = directory / f"{name}.crt"
        _write(written[name], issued.cert_pem, private=False)
        _write(directory / f"{name}.key", issued.key_pem, private=True)
    return written


def _write(path: Path, data: bytes, *, private: bool) -> None:
    """Create ``path`` (0600 for keys, from the first byte: never readable by others)."""
    mode = 0o600 if private else 0o644
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.fchmod(fd, mode)  # a file that was there keeps its mode through O_CREAT
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _key_usage(*, signing: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not signing,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signing,
        crl_sign=signing,
        encipher_only=False,
        decipher_only=False,
    )


def _alt_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
