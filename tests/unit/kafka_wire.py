"""Test helpers for the Kafka listener: a broker in a background thread (so synchronous
clients such as kafka-python can talk to it), and raw Kafka frames over a socket."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kafka.net.sasl.scram import ScramClient
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from tests.unit.broker_in_process import InProcessBroker, broker_in_process

LENGTH = struct.Struct(">i")
CORRELATION = struct.Struct(">i")


class BrokerThread:
    """``broker_in_process`` on its own event loop in a daemon thread."""

    def __init__(self, broker: InProcessBroker, loop: asyncio.AbstractEventLoop) -> None:
        self.broker = broker
        self.loop = loop

    @property
    def bootstrap(self) -> str:
        return self.broker.kafka_address

    def run(self, coroutine: Any, timeout_s: float = 30) -> Any:
        """Run ``coroutine`` on the broker's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)


@contextmanager
def broker_thread(tmp_path: Path, topics: dict[str, int], **options: Any) -> Iterator[BrokerThread]:
    ready: list[BrokerThread] = []
    started = threading.Event()
    stop: list[asyncio.Event] = []
    failure: list[BaseException] = []

    async def serve() -> None:
        async with broker_in_process(tmp_path, topics, **options) as broker:
            stop.append(asyncio.Event())
            ready.append(BrokerThread(broker, asyncio.get_running_loop()))
            started.set()
            await stop[0].wait()

    def main() -> None:
        try:
            asyncio.run(serve())
        except BaseException as e:  # reported to the test below
            failure.append(e)
            started.set()

    thread = threading.Thread(target=main, name="broker", daemon=True)
    thread.start()
    started.wait(30)
    if failure or not ready:
        raise RuntimeError(f"the in-process broker did not start: {failure}")
    try:
        yield ready[0]
    finally:
        ready[0].loop.call_soon_threadsafe(stop[0].set)
        thread.join(30)


def request_frame(request: ApiMessage, version: int, correlation_id: int, client_id: str = "test") -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


class RawConnection:
    """A blocking socket speaking Kafka frames, for what no client would send."""

    def __init__(self, address: str, timeout_s: float = 10, tls: ssl.SSLContext | None = None) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes | None:
        """The next whole answer frame (without its length), or None if the broker closed."""
        head = self._read(LENGTH.size)
        if head is None:
            return None
        (length,) = LENGTH.unpack(head)
        return self._read(length)

    def _read(self, count: int) -> bytes | None:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def correlation_of(frame: bytes) -> int:
    return CORRELATION.unpack_from(frame)[0]


def call(address: str, request: ApiMessage, version: int, response_type: type[ApiMessage]) -> Any:
    """One request on a fresh connection, its answer decoded."""
    with RawConnection(address) as connection:
        connection.send(request_frame(request, version, 1))
        frame = connection.read_frame()
    assert frame is not None, f"the broker closed the connection on {type(request).__name__} v{version}"
    return response_type.decode(frame, version=version, header=True)


def scram_login_error(
    address: str, mechanism: str, user: str, password: str, tls: ssl.SSLContext | None = None
) -> int:
    """A SCRAM login on a fresh connection, as Kafka's clients make it: 0 if it succeeded
    (and the server proved it knew the credential), else the broker's error code."""
    client = ScramClient(user, password, mechanism)
    with RawConnection(address, tls=tls) as connection:
        connection.send(request_frame(SaslHandshakeRequest(mechanism=mechanism), 1, 1))
        shaken = SaslHandshakeResponse.decode(connection.read_frame(), version=1, header=True)
        if shaken.error_code:
            return shaken.error_code
        for correlation_id, message in ((2, client.first_message), (3, client.final_message)):
            connection.send(request_frame(SaslAuthenticateRequest(auth_bytes=message()), 2, correlation_id))
            answer = SaslAuthenticateResponse.decode(connection.read_frame(), version=2, header=True)
            if answer.error_code:
                return answer.error_code
            if correlation_id == 2:
                client.process_server_first_message(answer.auth_bytes)
        client.process_server_final_message(answer.auth_bytes)
    return 0
