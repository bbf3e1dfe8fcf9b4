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


class Held:
    """``M`` mutes as ``MutesOnAsk``; ``E`` waits for ``release`` before it answers, so the
    test sees how many of a connection's requests run at once."""

    ordered = True

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.running = 0
        self.most_at_once = 0

    def dispatch(self, frame: memoryview) -> Any:
        return self._answer(bytes(frame))

    async def _answer(self, request: bytes) -> bytes:
        if request[:1] == MUTE:
            mute = current_mute.get()
            assert mute is not None
            mute.mute_for(600_000)
        else:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            await self.release.wait()
            self.running -= 1
        return struct.pack(">I", 1) + request[1:2]


def test_once_throttled_a_connection_is_served_one_request_at_a_time() -> None:
    """A client out of a mute sends all it queued meanwhile; taken one request at a time,
    as Kafka takes every connection's, it cannot push that burst in at once."""

    seen: list[int] = []  # most requests running at once: before the throttle, after it

    async def scenario() -> None:
        held = Held()
        listener = Listener(held, name="test")
        port = await listener.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(frame(ECHO, b"1") + frame(ECHO, b"2") + frame(ECHO, b"3"))
            await until(lambda: held.running == 3, "three pipelined requests running at once")
            held.release.set()
            assert [await answer(reader) for _ in range(3)] == [b"1", b"2", b"3"]
            seen.append(held.most_at_once)
            held.most_at_once, held.release = 0, asyncio.Event()
            writer.write(frame(MUTE, b"4"))
            assert await answer(reader) == b"4"
            (connection,) = listener.connections
            connection.mute.end()  # as its timer would
            writer.write(frame(ECHO, b"5") + frame(ECHO, b"6") + frame(ECHO, b"7"))
            await until(lambda: held.running == 1, "the first request after the mute running")
            held.release.set()
            assert [await answer(reader) for _ in range(3)] == [b"5", b"6", b"7"]
            seen.append(held.most_at_once)
        finally:
            writer.close()
            await listener.close()

    run(scenario)
    assert seen == [3, 1]
