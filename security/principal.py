"""Who is asking: the principal a peer's certificate names.

The name is Kafka's default for SSL, ``User:`` and the subject as RFC 4514 writes it
(``User:CN=admin,OU=client,O=raftka``), so ACLs and ``authorizer.super_users`` read the
same as Kafka's. The role comes from the subject too: ``OU=controller`` with
``CN=controller-ID`` is controller ID, ``OU=broker`` with ``CN=broker-ID`` is broker ID,
anything else is a client. A certificate only counts if the cluster's CA signed it (the
TLS handshake checked that), so the CA decides who may call itself a broker.

Requests carry their principal in ``current_principal`` while they are handled (set by
the listener that took the connection), so work done on a client's behalf, such as a
broker forwarding a Kafka client's CreateTopics to the controller, can name it.
"""

from __future__ import annotations

import contextvars
import functools
import ssl
import urllib.parse
from dataclasses import dataclass

import grpc
from cryptography import x509

CONTROLLER = "controller"
BROKER = "broker"
CLIENT = "client"
USER_PREFIX = "User:"


@dataclass(frozen=True, slots=True)
class Principal:
    name: str  # "User:CN=admin,OU=client,O=raftka"
    role: str  # CONTROLLER, BROKER or CLIENT
    node_id: int | None = None  # a controller's or a broker's id; None for a client

    def __str__(self) -> str:
        return self.name


# The principal of the request being handled; None: no TLS on that connection.
current_principal: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "current_principal", default=None
)
# The IP address the request being handled came from, as ACL hosts name it; "": unknown.
current_host: contextvars.ContextVar[str] = contextvars.ContextVar("current_host", default="")


@functools.lru_cache(maxsize=1024)
def from_der(der: bytes) -> Principal:
    return _from_certificate(x509.load_der_x509_certificate(der))


@functools.lru_cache(maxsize=1024)
def from_pem(pem: bytes) -> Principal:
    return _from_certificate(x509.load_pem_x509_certificate(pem))


def from_ssl(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> Principal | None:
    """The peer of a TLS connection (asyncio: ``transport.get_extra_info("ssl_object")``)."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    return from_der(der) if der else None


def _from_certificate(cert: x509.Certificate) -> Principal:
    subject = cert.subject
    return _principal(USER_PREFIX + subject.rfc4514_string(), _first(subject, "CN"), _first(subject, "OU"))


def _first(subject: x509.Name, attribute: str) -> str:
    oid = {"CN": x509.NameOID.COMMON_NAME, "OU": x509.NameOID.ORGANIZATIONAL_UNIT_NAME}[attribute]
    values = subject.get_attributes_for_oid(oid)
    return str(values[0].value) if values else ""


def _principal(name: str, common_name: str, unit: str) -> Principal:
    if unit in (CONTROLLER, BROKER):
        prefix, _, number = common_name.partition("-")
        if prefix == unit and number.isdigit():
            return Principal(name, unit, int(number))
    return Principal(name, CLIENT)


def host_of(peer: str) -> str:
    """The IP address of a peer written ``ipv4:10.0.0.5:4000``, ``ipv6:[::1]:4000`` (gRPC) or
    ``10.0.0.5:4000`` (asyncio's host and port); "" if it has none."""
    if peer.startswith("unix:"):
        return ""
    address = urllib.parse.unquote(peer.removeprefix("ipv4:").removeprefix("ipv6:"))
    return address.rpartition(":")[0].strip("[]")


def from_grpc(context: grpc.aio.ServicerContext) -> Principal | None:
    """The peer of a gRPC call; None on a plaintext server."""
    pems = context.auth_context().get("x509_pem_cert")
    return from_pem(pems[0]) if pems else None
