"""One Kafka request over a socket of its own, for the APIs confluent-kafka has no call for
(AlterClientQuotas, AlterPartitionReassignments, ListPartitionReassignments): kafka-python's
protocol classes encode it and decode the answer."""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

from raftka.command.errors import CliError

REQUEST_TIMEOUT_S = 10.0
LENGTH = struct.Struct(">i")


def call(
    bootstrap: str, tls: ssl.SSLContext | None, request: Any, response_type: Any, version: int, client_id: str
) -> Any:
    """Send ``request`` at ``version`` to the first bootstrap broker and decode its answer."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    request.API_VERSION = version
    request.with_header(correlation_id=1, client_id=client_id)
    try:
        with socket.create_connection((host, int(port)), timeout=REQUEST_TIMEOUT_S) as raw:
            sock = tls.wrap_socket(raw, server_hostname=host) if tls else raw
            sock.sendall(bytes(request.encode(header=True, framed=True)))
            (length,) = LENGTH.unpack(_read(sock, LENGTH.size))
            return response_type.decode(_read(sock, length), version=version, header=True)
    except OSError as e:
        raise CliError(f"{type(request).__name__} to {host}:{port} failed: {e}") from None


def _read(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise OSError("the broker closed the connection")
        data += chunk
    return data
