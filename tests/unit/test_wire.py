"""The data protocol (``wire``): frames cut at any byte boundary, a listener that answers
bad input per request and closes only on bytes that cannot be frames, its bounds, and a
client that matches pipelined answers and fails calls that get none."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import structlog.testing
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from raftka.v1 import broker_pb2 as pb
from raftka.v1 import controller_pb2
from raftka.wire import frames
from raftka.wire.client import BrokerClient, Connection, WireError
from raftka.wire.frames import FrameDecoder, FrameError
from raftka.wire.guard import ConnectionLimits
from raftka.wire.server import FrameServer, Handler, Listener

E = controller_pb2.ErrorCode


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 30))


@asynccontextmanager
async def serving(handlers: dict[int, Handler], **bounds: Any) -> AsyncIterator[tuple[FrameServer, str]]:
    server = FrameServer(handlers, **bounds)
    port = await server.start("127.0.0.1", 0)
    try:
        yield server, f"127.0.0.1:{port}"
    finally:
        await server.close()


async def metadata_named(request: pb.MetadataRequest) -> pb.MetadataResponse:
    """Echoes the asked topic names back, so an answer shows which request it answers."""
    response = pb.MetadataResponse()
    for name in request.topics:
        response.topics.add(name=name)
    return response


async def raw_exchange(address: str, data: bytes, read_s: float = 2.0) -> bytes:
    """What the server sends back before it closes or ``read_s`` pass."""
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    chunks = b""
    try:
        while chunk := await asyncio.wait_for(reader.read(1 << 16), read_s):
            chunks += chunk
    except TimeoutError:
        pass
    finally:
        writer.close()
    return chunks


def request_frame(api_key: int, correlation_id: int, body: bytes, version: int = frames.VERSION) -> bytes:
    return struct.pack(">IHHI", 8 + len(body), api_key, version, correlation_id) + body


def answers(data: bytes) -> dict[int, bytes]:
    """Correlation id -> message bytes of every response frame in ``data``."""
    decoder = FrameDecoder(1 << 20)
    decoder.feed(data)
    found = {}
    while (frame := decoder.next_frame()) is not None:
        (correlation_id,) = struct.unpack_from(">I", frame)
        found[correlation_id] = bytes(frame[4:])
        frame.release()
    return found


# frames -------------------------------------------------------------------------------------


@given(
    bodies=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=7000), max_size=30),
)
def test_frames_come_out_whole_however_the_stream_is_cut(bodies: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(struct.pack(">I", len(b)) + b for b in bodies)
    points = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    decoder = FrameDecoder(300)
    out = []
    for start, end in zip(points, points[1:], strict=False):
        decoder.feed(stream[start:end])
        while (frame := decoder.next_frame()) is not None:
            out.append(bytes(frame))
            frame.release()
    assert out == bodies
    assert decoder.buffered_bytes == 0


def test_a_frame_over_the_limit_is_refused_from_its_length_alone() -> None:
    decoder = FrameDecoder(100)
    decoder.feed(struct.pack(">I", 101))  # no body sent: refused before buffering one
    with pytest.raises(FrameError, match="101 bytes is over the limit of 100"):
        decoder.next_frame()


def test_every_response_type_reads_a_status_only_answer() -> None:
    """The listener answers a request it cannot decode with a bare status, whatever its API."""
    encoded = frames.status_only(E.INVALID_REQUEST, "why").SerializeToString()
    for spec in frames.APIS.values():
        field = spec.response.DESCRIPTOR.fields_by_number[1]
        assert (field.name, field.message_type.full_name) == ("status", "raftka.v1.Status"), spec.name
        status = spec.response.FromString(encoded).status
        assert (status.error, status.message) == (E.INVALID_REQUEST, "why")


# the listener --------------------------------------------------------------------------------


def test_every_api_answers_through_its_typed_call() -> None:
    seen: list[tuple[str, Message]] = []

    def echo(name: str, response: Message) -> Handler:
        async def handle(request: Message) -> Message:
            seen.append((name, request))
            return response

        return handle

    handlers = {spec.key: echo(spec.name, spec.response()) for spec in frames.APIS.values()}
    requests = {
        "Metadata": pb.MetadataRequest(topics=["a"]),
        "Produce": pb.ProduceRequest(acks=-1),
        "Fetch": pb.FetchRequest(max_bytes=7),
        "ListOffsets": pb.ListOffsetsRequest(),
        "OffsetCommit": controller_pb2.OffsetCommitRequest(group="g"),
        "OffsetFetch": controller_pb2.OffsetFetchRequest(group="g"),
    }

    specs = {spec.name: spec for spec in frames.APIS.values()}

    async def scenario() -> None:
        async with serving(handlers) as (_, address):
            client = BrokerClient(address)
            for name, request in requests.items():
                response = await getattr(client, name)(request, timeout=5)
                assert type(response) is specs[name].response
            client.close()

    run(scenario)
    assert seen == list(requests.items())


def test_pipelined_answers_come_back_as_each_finishes_matched_to_their_calls() -> None:
    release_first = asyncio.Event()

    async def handle(request: pb.MetadataRequest) -> pb.MetadataResponse:
        if request.topics[0] == "slow":
            await release_first.wait()
        return await metadata_named(request)

    async def scenario() -> None:
        async with serving({frames.METADATA.key: handle}) as (_, address):
            client = BrokerClient(address)
            slow = asyncio.ensure_future(client.Metadata(pb.MetadataRequest(topics=["slow"]), timeout=5))
            fast = await client.Metadata(pb.MetadataRequest(topics=["fast"]), timeout=5)
            assert [t.name for t in fast.topics] == ["fast"] and not slow.done()
            release_first.set()
            assert [t.name for t in (await slow).topics] == ["slow"]
            client.close()

    run(scenario)


def test_bad_requests_are_answered_and_the_connection_serves_on() -> None:
    async def broken(request: Message) -> Message:
        raise RuntimeError("a bug")

    async def scenario() -> None:
        handlers = {frames.METADATA.key: metadata_named, frames.PRODUCE.key: broken}
        async with serving(handlers) as (_, address):
            good = pb.MetadataRequest(topics=["ok"]).SerializeToString()
            data = (
                request_frame(999, 1, b"")  # an API nobody defines
                + request_frame(frames.METADATA.key, 2, good, version=9)  # a version not served
                + request_frame(frames.FETCH.key, 3, b"")  # defined, but not served here
                + request_frame(frames.METADATA.key, 4, b"\xff\xff\xff")  # does not decode
                + request_frame(frames.PRODUCE.key, 5, b"")  # its handler fails
                + request_frame(frames.METADATA.key, 6, good)
            )
            got = answers(await raw_exchange(address, data, read_s=0.5))
            status = {cid: pb.MetadataResponse.FromString(body).status for cid, body in got.items()}
            assert {cid: E.Name(s.error) for cid, s in status.items()} == {
                1: "UNSUPPORTED_VERSION",
                2: "UNSUPPORTED_VERSION",
                3: "UNSUPPORTED_VERSION",
                4: "INVALID_REQUEST",
                5: "UNKNOWN_SERVER_ERROR",
                6: "NONE",
            }
            assert "api 999" in status[1].message and "Metadata request does not decode" in status[4].message
            assert [t.name for t in pb.MetadataResponse.FromString(got[6]).topics] == ["ok"]

    run(scenario)


def test_bytes_that_cannot_be_frames_close_that_connection_only() -> None:
    async def scenario() -> None:
        async with serving({frames.METADATA.key: metadata_named}, request_max_bytes=1000) as (
            server,
            address,
        ):
            assert await raw_exchange(address, struct.pack(">I", 1001)) == b""  # too long: closed at once
            assert await raw_exchange(address, struct.pack(">I", 3) + b"abc") == b""  # shorter than a header
            client = BrokerClient(address)
            response = await client.Metadata(pb.MetadataRequest(topics=["still"]), timeout=5)
            assert [t.name for t in response.topics] == ["still"]
            client.close()

    run(scenario)


def test_bad_frames_are_logged_once_per_interval() -> None:
    """A client sends bad frames at will: 2,000 of them once made 160 KiB/s of warnings.
    (The next line after the interval counts those left out: ``RateLimitedLog``.)"""

    async def scenario() -> None:
        async with serving({frames.METADATA.key: metadata_named}) as (_, address):
            with structlog.testing.capture_logs() as logs:
                for _ in range(3):
                    assert await raw_exchange(address, struct.pack(">I", 3) + b"abc") == b""
        said = [e for e in logs if e["event"] == "closing a connection: bad frame"]
        assert [(e["log_level"], e["listener"]) for e in said] == [("warning", "data")]
        assert said[0]["left_out"] == 0

    run(scenario)


def test_no_more_requests_run_at_once_on_a_connection_than_its_bound() -> None:
    running = 0
    most = 0
    gate = asyncio.Event()

    async def handle(request: pb.MetadataRequest) -> pb.MetadataResponse:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await gate.wait()
        running -= 1
        return await metadata_named(request)

    async def scenario() -> None:
        async with serving({frames.METADATA.key: handle}, in_flight_max=3) as (_, address):
            client = BrokerClient(address)
            calls = [
                asyncio.ensure_future(client.Metadata(pb.MetadataRequest(topics=[str(i)]), timeout=10))
                for i in range(10)
            ]
            while running < 3:
                await asyncio.sleep(0.01)
            gate.set()
            names = [[t.name for t in (await call).topics] for call in calls]
            assert names == [[str(i)] for i in range(10)]
            client.close()

    run(scenario)
    assert most == 3


def test_connections_beyond_the_bound_are_closed_at_once() -> None:
    async def scenario() -> None:
        async with serving(
            {frames.METADATA.key: metadata_named}, limits=ConnectionLimits(connections_max=1)
        ) as (server, address):
            first = BrokerClient(address)
            await first.Metadata(pb.MetadataRequest(), timeout=5)
            second = BrokerClient(address)
            with pytest.raises(WireError) as err:
                await second.Metadata(pb.MetadataRequest(), timeout=5)
            assert err.value.code == "UNAVAILABLE"
            assert len(server.connections) == 1
            first.close()
            second.close()

    run(scenario)


# the client ----------------------------------------------------------------------------------


def test_a_call_without_an_answer_times_out_closes_its_connection_and_the_next_reconnects() -> None:
    hang = asyncio.Event()

    async def handle(request: pb.MetadataRequest) -> pb.MetadataResponse:
        if request.topics and request.topics[0] == "hang":
            await hang.wait()
        return await metadata_named(request)

    async def scenario() -> None:
        async with serving({frames.METADATA.key: handle}) as (server, address):
            client = BrokerClient(address)
            other = asyncio.ensure_future(client.Metadata(pb.MetadataRequest(topics=["hang"]), timeout=30))
            with pytest.raises(WireError) as err:
                await client.Metadata(pb.MetadataRequest(topics=["hang"]), timeout=0.2)
            assert (
                err.value.code == "DEADLINE_EXCEEDED"
                and "no Metadata answer within 0.2 s" in err.value.message
            )
            with pytest.raises(WireError) as lost:
                await other  # queued on the same connection: it goes with it
            assert lost.value.code == "UNAVAILABLE"
            response = await client.Metadata(pb.MetadataRequest(topics=["again"]), timeout=5)
            assert [t.name for t in response.topics] == ["again"]
            client.close()

    run(scenario)


def test_calls_in_flight_fail_when_the_broker_goes_away() -> None:
    async def never(request: Message) -> Message:
        await asyncio.Event().wait()
        raise AssertionError

    async def scenario() -> None:
        server = FrameServer({frames.METADATA.key: never})
        port = await server.start("127.0.0.1", 0)
        connection = await Connection.open(f"127.0.0.1:{port}")
        call = connection.call(frames.METADATA, pb.MetadataRequest(), 30)
        await server.close()
        with pytest.raises(WireError) as err:
            await call
        assert err.value.code == "UNAVAILABLE" and connection.closed
        with pytest.raises(WireError):
            connection.call(frames.METADATA, pb.MetadataRequest(), 30)

    run(scenario)


def test_an_unreachable_broker_is_unavailable() -> None:
    async def scenario() -> None:
        server = FrameServer({})
        port = await server.start("127.0.0.1", 0)
        await server.close()  # nothing listens on that port now
        client = BrokerClient(f"127.0.0.1:{port}")
        with pytest.raises(WireError) as err:
            await client.Metadata(pb.MetadataRequest(), timeout=5)
        assert err.value.code == "UNAVAILABLE" and f"127.0.0.1:{port}" in err.value.message

    run(scenario)


class HeadWaits:
    """An ordered protocol whose request of one zero byte waits for ``release`` and whose
    every answer is 1 MiB: the answers after it finish and wait for their turn."""

    ordered = True
    answer_bytes = 1 << 20

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.finished = 0

    def dispatch(self, frame: memoryview) -> Any:
        return self._answer(slow=frame[0] == 0)

    async def _answer(self, slow: bool) -> bytes:
        if slow:
            await self.release.wait()
        self.finished += 1
        return b"\x01" * self.answer_bytes


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_answers_waiting_behind_a_slow_one_count_as_unsent_and_stop_reading() -> None:
    """Ordered answers finished behind a slow first one are held in memory, not in the
    write buffer: at 4 MiB of them the connection is not read, as for unsent answers."""

    async def scenario() -> None:
        dispatcher = HeadWaits()
        listener = Listener(dispatcher, name="test")
        port = await listener.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(struct.pack(">I", 1) + b"\x00")  # the slow one
            await until(lambda: len(listener.connections) == 1, "the connection")
            (connection,) = listener.connections
            transport = connection._transport
            for sent in range(1, 5):
                writer.write(struct.pack(">I", 1) + b"\x01")
                await until(lambda sent=sent: dispatcher.finished == sent, f"answer {sent} finished")
            assert connection.queued_answer_bytes() == 4 * HeadWaits.answer_bytes
            assert not transport.is_reading(), "4 MiB of answers wait: the connection is not read"
            dispatcher.release.set()
            received = await reader.readexactly(5 * HeadWaits.answer_bytes)
            assert received == b"\x01" * (5 * HeadWaits.answer_bytes)
            await until(transport.is_reading, "reading again once the answers are sent")
        finally:
            writer.close()
            await listener.close()

    run(scenario)
