"""Mutual TLS: one node's or client's three files, checked once, and the contexts and
credentials every listener and every connection is made with.

Both sides always present a certificate and verify the other's against the CA: a server
refuses a client without a certificate from that CA (``CERT_REQUIRED``, gRPC's
``require_client_auth``), a client refuses a server whose certificate does not name the
host it dialled (the certificates carry the hosts as subject alternative names). The
same triple (``ca``, ``cert``, ``key``) configures a node (``[tls]`` in its config) and a
client (``--tls-*`` flags or a client config file), so there is one thing to learn.

The contexts are made once per ``TlsFiles`` and shared by every connection made with it.
A node's server side follows its files (``CertificateRotation``): at most every
``RELOAD_CHECK_INTERVAL_S``, a new connection makes it look at their modification
times, and once they changed and hold a usable set again, new connections get the new
certificate and CA; connections already open keep what they were made with.
"""

from __future__ import annotations

import functools
import os
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import structlog
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key

KEYS = ("ca", "cert", "key")  # in the [tls] table of a node's or a client's config file
RELOAD_CHECK_INTERVAL_S = 5.0  # a node looks at its files at most this often, when a connection arrives
log = structlog.get_logger("raftka.security.tls")


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
    def rotation(self) -> CertificateRotation:
        return CertificateRotation(self)

    @functools.cached_property
    def server_ssl(self) -> ssl.SSLContext:
        """For an asyncio listener: a client must present a certificate the CA signed.
        Each handshake is switched to the newest usable files (``rotation``)."""
        return self._rotating(ssl.CERT_REQUIRED)

    @functools.cached_property
    def sasl_server_ssl(self) -> ssl.SSLContext:
        """For a SASL listener (SASL_SSL): the client logs in, so a certificate is optional
        (Kafka's ssl.client.auth=none); one it presents must still be the CA's."""
        return self._rotating(ssl.CERT_OPTIONAL)

    def listener_ssl(self, sasl: bool) -> ssl.SSLContext:
        """A listener's: one whose clients log in with SASL takes them without certificates."""
        return self.sasl_server_ssl if sasl else self.server_ssl

    def _rotating(self, verify_mode: ssl.VerifyMode) -> ssl.SSLContext:
        context = _server_context(self, verify_mode)
        context.sni_callback = self.rotation.switch
        return context

    @functools.cached_property
    def client_ssl(self) -> ssl.SSLContext:
        """For an asyncio connection: the server's certificate must name the host dialled."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname and CERT_REQUIRED
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_verify_locations(cafile=str(self.ca))
        context.load_cert_chain(str(self.cert), str(self.key))
        return context

    @property
    def server_credentials(self) -> grpc.ServerCredentials:
        """For one gRPC server: asked before each handshake for the newest usable files."""
        return self.rotation.grpc_credentials()

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
            _server_context(self)  # loading it is the check that key and certificate match
        except ssl.SSLError as e:
            raise TlsError(
                f"{prefix}key: {self.key} is not the key of {prefix}cert {self.cert}: {e}"
            ) from None


class CertificateRotation:
    """A node's certificate, key and CA as its files hold them now, for new connections.

    Files are looked at when a connection arrives (an asyncio handshake's SNI callback, or
    gRPC's question before each handshake), at most every ``RELOAD_CHECK_INTERVAL_S``: no
    task, no signal, and a rotated Kubernetes secret or a rewritten file is seen by the
    next client after it. A set that does not pass ``TlsFiles.check`` (a certificate
    written before its key) is not used: the previous one serves on, with one warning per
    change, until the files agree. Outgoing connections (``client_ssl``, gRPC channels)
    keep what the node started with: a context in use cannot be changed safely while
    gRPC's threads may reload. Thread-safe: gRPC asks from its own threads.
    """

    def __init__(self, files: TlsFiles) -> None:
        self._files = files
        self._lock = threading.Lock()
        self._checked_s = time.monotonic()
        self._stamp = _stamp(files)
        self._refused_stamp: tuple | None = None
        self._servers: dict[
            ssl.VerifyMode, ssl.SSLContext
        ] = {}  # by verify mode; none: the files as first read
        self._pem: tuple[bytes, bytes, bytes] | None = None
        self.generation = 0  # how many times the files were taken up

    def switch(self, connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        """``sni_callback``: the handshake goes on with the newest context."""
        self.refresh()
        newest = self._servers.get(context.verify_mode)
        if newest is not None and newest is not context:
            connection.context = newest

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Credentials for one gRPC server, whose fetcher hands it each change once."""
        with self._lock:
            pem, served = self._pem or self._files._pem, self.generation

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            nonlocal served
            self.refresh()
            with self._lock:
                if served == self.generation or self._pem is None:
                    return None  # no change
                served = self.generation
                return _grpc_configuration(self._pem)

        return grpc.dynamic_ssl_server_credentials(
            _grpc_configuration(pem), fetch, require_client_authentication=True
        )

    def refresh(self) -> None:
        """Take up the files if the interval passed, they changed, and they pass the check."""
        with self._lock:
            now = time.monotonic()
            if now - self._checked_s < RELOAD_CHECK_INTERVAL_S:
                return
            self._checked_s = now
            stamp = _stamp(self._files)
            if stamp == self._stamp or stamp == self._refused_stamp:
                return
            fresh = TlsFiles(self._files.ca, self._files.cert, self._files.key)
            try:
                fresh.check()
                servers = {
                    mode: _server_context(fresh, mode) for mode in (ssl.CERT_REQUIRED, ssl.CERT_OPTIONAL)
                }
            except (TlsError, ssl.SSLError, OSError) as e:
                self._refused_stamp = stamp
                log.warning(
                    "certificate files changed but cannot be used; serving with the previous ones",
                    error=str(e),
                )
                return
            self._stamp, self._servers, self._pem = stamp, servers, fresh._pem
            self.generation += 1
            log.info("certificate files reloaded", cert=str(fresh.cert), generation=self.generation)


def _server_context(files: TlsFiles, verify_mode: ssl.VerifyMode = ssl.CERT_REQUIRED) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = verify_mode
    context.load_verify_locations(cafile=str(files.ca))
    context.load_cert_chain(str(files.cert), str(files.key))
    return context


def _grpc_configuration(pem: tuple[bytes, bytes, bytes]) -> grpc.ServerCertificateConfiguration:
    ca, cert, key = pem
    return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)


def _stamp(files: TlsFiles) -> tuple:
    """What changes when a file is rewritten or its symlink swapped (as Kubernetes does)."""
    stamps = []
    for path in (files.ca, files.cert, files.key):
        try:
            status = os.stat(path)
        except OSError:
            stamps.append(None)
        else:
            stamps.append((status.st_ino, status.st_mtime_ns, status.st_size))
    return tuple(stamps)


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
