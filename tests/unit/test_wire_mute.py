"""A throttled client's connection is muted (KIP-219): its answer goes out at once, then
nothing more is read from that connection until the throttle ends, while every other
connection is served as before."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from raftka.wire.mute import current_mute
from raftka.wire.server import Listener
from tests.unit.test_wire import run, until

MUTE, ECHO = b"M", b"E"


class MutesOnAsk:
    """Each request is one byte plus a tag byte: ``M`` mutes its connection for
    ``mute_ms`` before answering, ``E`` just answers; every answer is the tag."""

    ordered = True

    def __init__(self, mute_ms: int) -> None:
        self.mute_ms = mute_ms
        self.handled: list[bytes] = []

    def dispatch(self, frame: memoryview) -> Any:
        return self._answer(bytes(frame))

    async def _answer(self, request: bytes) -> bytes:
        self.handled.append(request)
        if request[:1] == MUTE:
            mute = current_mute.get()
            assert mute is not None
            mute.mute_for(self.mute_ms)
        return struct.pack(">I", 1) + request[1:2]


def frame(kind: bytes, tag: bytes) -> bytes:
    return struct.pack(">I", 2) + kind + tag


async def answer(reader: asyncio.StreamReader) -> bytes:
    return (await asyncio.wait_for(reader.readexactly(5), 10))[4:]


def test_a_muted_connection_is_not_read_until_its_throttle_ends_and_others_are() -> None:
    async def scenario() -> None:
        dispatcher = MutesOnAsk(mute_ms=600_000)  # ended by hand below, as its timer would
        listener = Listener(dispatcher, name="test")
        port = await listener.start("127.0.0.1", 0)
        a_reader, a_writer = await asyncio.open_connection("127.0.0.1", port)
        b_reader, b_writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            a_writer.write(frame(MUTE, b"1"))
            assert await answer(a_reader) == b"1", "the throttled answer goes back at once"
            (muted,) = [c for c in listener.connections if c.mute.muted()]
            assert not muted._transport.is_reading()
            a_writer.write(frame(ECHO, b"2"))
            b_writer.write(frame(ECHO, b"3"))
            assert await answer(b_reader) == b"3", "another connection is served meanwhile"
            assert ECHO + b"2" not in dispatcher.handled, "the muted connection was read"
            muted.mute.end()
            assert await answer(a_reader) == b"2", "read again once the throttle ends"
            await until(muted._transport.is_reading, "reading again")
        finally:
            a_writer.close()
            b_writer.close()
            await listener.close()

    run(scenario)


def test_a_mute_ends_by_itself() -> None:
    async def scenario() -> None:
        listener = Listener(MutesOnAsk(mute_ms=50), name="test")
        port = await listener.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(frame(MUTE, b"1") + frame(ECHO, b"2"))
            assert await answer(reader) == b"1"
            assert await answer(reader) == b"2"
        finally:
            writer.close()
            await listener.close()

    run(scenario)
