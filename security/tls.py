"""Mutual TLS: one node's or client's three files, checked once, and the contexts and
credentials every listener and every connection is made with.

Both sides always present a certificate and verify the other's against the CA: a server
refuses a client without a certificate from that CA (``CERT_REQUIRED``, gRPC's
``require_client_auth``), a client refuses a server whose certificate does not name the
host it dialled (the certificates carry the hosts as subject alternative names). The
same triple (``ca``, ``cert``, ``key``) configures a node (``[tls]`` in its config) and a
client (``--tls-*`` flags or a client config file), so there is one thing to learn.

The contexts are made once per ``TlsFiles`` and shared by every connection made with it.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key

KEYS = ("ca", "cert", "key")  # in the [tls] table of a node's or a client's config file


class TlsError(Exception):
    """A TLS setting is missing or wrong; the message starts with the key it is about."""


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: the CA that signs every certificate of the cluster, this side's
    certificate (chain) and its private key."""

    ca: Path
    cert: Path
    key: Path

    @functools.cached_property
    def _pem(self) -> tuple[bytes, bytes, bytes]:
        return self.ca.read_bytes(), self.cert.read_bytes(), self.key.read_bytes()

    @functools.cached_property
    def server_ssl(self) -> ssl.SSLContext:
        """For an asyncio listener: a client must present a certificate the CA signed."""
        return self._server_context(ssl.CERT_REQUIRED)

    @functools.cached_property
    def sasl_server_ssl(self) -> ssl.SSLContext:
        """For a SASL listener (SASL_SSL): the client logs in, so a certificate is optional
        (Kafka's ssl.client.auth=none); one it presents must still be the CA's."""
        return self._server_context(ssl.CERT_OPTIONAL)

    def listener_ssl(self, sasl: bool) -> ssl.SSLContext:
        """A listener's: one whose clients log in with SASL takes them without certificates."""
        return self.sasl_server_ssl if sasl else self.server_ssl

    def _server_context(self, verify_mode: ssl.VerifyMode) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = verify_mode
        context.load_verify_locations(cafile=str(self.ca))
        context.load_cert_chain(str(self.cert), str(self.key))
        return context

    @functools.cached_property
    def client_ssl(self) -> ssl.SSLContext:
        """For an asyncio connection: the server's certificate must name the host dialled."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname and CERT_REQUIRED
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_verify_locations(cafile=str(self.ca))
        context.load_cert_chain(str(self.cert), str(self.key))
        return context

    @functools.cached_property
    def server_credentials(self) -> grpc.ServerCredentials:
        ca, cert, key = self._pem
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)

    @functools.cached_property
    def channel_credentials(self) -> grpc.ChannelCredentials:
        ca, cert, key = self._pem
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)

    def check(self, prefix: str = "tls.") -> None:
        """Each file exists and holds what it should, and the key is the certificate's;
        TlsError names the key (``prefix`` + ``cert``) of the file that is wrong."""
        for name in KEYS:
            path = getattr(self, name)
            if not path.is_file():
                raise TlsError(f"{prefix}{name}: no such file: {path}")
        for name in ("ca", "cert"):
            path = getattr(self, name)
            try:
                x509.load_pem_x509_certificates(path.read_bytes())
            except ValueError as e:
                raise TlsError(f"{prefix}{name}: {path} holds no PEM certificate: {e}") from None
        try:
            load_pem_private_key(self.key.read_bytes(), password=None)
        except (ValueError, TypeError) as e:  # TypeError: the key is encrypted
            raise TlsError(f"{prefix}key: {self.key} holds no unencrypted PEM private key: {e}") from None
        try:
            _ = self.server_ssl  # loading it is the check that key and certificate match
        except ssl.SSLError as e:
            raise TlsError(
                f"{prefix}key: {self.key} is not the key of {prefix}cert {self.cert}: {e}"
            ) from None


def tls_files(values: Mapping[str, Any], base_dir: Path, prefix: str = "tls.") -> TlsFiles | None:
    """``values`` holds ``ca``, ``cert`` and ``key`` as strings ("" when unset): all three
    (checked; relative paths taken from ``base_dir``) or none (None: plaintext). Errors
    name the key as ``prefix`` + name (``tls.cert``, or ``--tls-cert`` for flags)."""
    given = [name for name in KEYS if values.get(name)]
    if not given:
        return None
    missing = [name for name in KEYS if name not in given]
    if missing:
        with_ = ", ".join(prefix + name for name in given)
        raise TlsError(f"{prefix}{missing[0]}: required with {with_} (set all three or none)")
    files = TlsFiles(*(base_dir / Path(values[name]).expanduser() for name in KEYS))
    files.check(prefix)
    return files


def aio_channel(
    address: str, tls: TlsFiles | None, options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Channel:
    """A grpc.aio channel to ``address``: TLS with this side's certificate, or plaintext."""
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(address, tls.channel_credentials, options=options)


def sync_channel(address: str, tls: TlsFiles | None, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
    """The blocking twin of ``aio_channel``."""
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, tls.channel_credentials, options=options)
