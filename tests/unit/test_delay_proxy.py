"""The delay proxy's pipe: every byte arrives, in order, and none before its delay (a
lower bound, which no load can break); the end of the stream is passed on."""

from __future__ import annotations

import asyncio
import os
import socket

from hypothesis import given, settings
from hypothesis import strategies as st

from raftka.tools.chaos.delay_proxy import DelayedPipe


async def _pair() -> tuple[
    asyncio.StreamReader, asyncio.StreamWriter, asyncio.StreamReader, asyncio.StreamWriter
]:
    left, right = socket.socketpair()
    a = await asyncio.open_connection(sock=left)
    b = await asyncio.open_connection(sock=right)
    return (*a, *b)


@settings(max_examples=25, deadline=None)
@given(chunks=st.lists(st.binary(min_size=1, max_size=200_000), min_size=1, max_size=6))
def test_bytes_arrive_whole_in_order_and_no_sooner_than_the_delay(chunks: list[bytes]) -> None:
    delay_s = 0.05

    async def scenario() -> tuple[bytes, float]:
        in_reader, in_writer, source_reader, source_writer = await _pair()  # source -> pipe input
        out_reader, out_writer, sink_reader, sink_writer = await _pair()  # pipe output -> sink
        pipe = asyncio.ensure_future(DelayedPipe(source_reader, out_writer, delay_s).run())
        loop = asyncio.get_running_loop()
        started = loop.time()
        for chunk in chunks:
            in_writer.write(chunk)
        await in_writer.drain()
        in_writer.write_eof()
        first = await sink_reader.read(1)
        waited = loop.time() - started
        rest = await sink_reader.read()  # to the end: the pipe passed the end of the stream on
        await pipe
        for writer in (in_writer, source_writer, out_writer, sink_writer):
            writer.close()
        return first + rest, waited

    received, waited = asyncio.run(scenario())
    assert received == b"".join(chunks)
    assert waited >= 0.05


def test_a_writer_faster_than_the_reader_is_held_back_not_buffered_without_bound() -> None:
    from raftka.tools.chaos import delay_proxy

    async def scenario() -> int:
        in_reader, in_writer, source_reader, source_writer = await _pair()
        out_reader, out_writer, sink_reader, sink_writer = await _pair()
        pipe = DelayedPipe(source_reader, out_writer, 0.0)
        running = asyncio.ensure_future(pipe.run())
        payload = os.urandom(1 << 20)
        for _ in range(64):  # 64 MiB that nobody reads at the far end
            in_writer.write(payload)
            try:
                await asyncio.wait_for(in_writer.drain(), 0.5)
            except TimeoutError:
                break  # the pipe stopped reading: TCP pushes back on the writer
        held = pipe._buffered
        running.cancel()
        for writer in (in_writer, source_writer, out_writer, sink_writer):
            writer.close()
        return held

    assert asyncio.run(scenario()) <= delay_proxy.BUFFERED_MAX + delay_proxy.CHUNK_BYTES
