"""``raftka produce`` against a real broker's data service in this process: idempotent by
default (its batches carry a producer id and sequences), at least once with
``--no-idempotence`` or ``--acks 1`` (no producer id), as Kafka's console producer with
``enable.idempotence`` true or false."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from raftka.cli.main import main
from raftka.client.producer import Producer
from raftka.records.batch import iter_batches
from raftka.v1 import broker_pb2
from raftka.wire.client import BrokerClient
from tests.unit.test_clients import TOPIC_NAME, serving


async def producer_ids_in_log(address: str) -> list[tuple[int, int]]:
    """(producer id, base sequence) of every batch in partition 0."""
    client = BrokerClient(address)
    try:
        request = broker_pb2.FetchRequest(replica_id=-1, max_bytes=1 << 20)
        request.topics.add(name=TOPIC_NAME).partitions.add(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20
        )
        records = (await client.Fetch(request, timeout=5)).topics[0].partitions[0].records
        return [(h.producer_id, h.base_sequence) for _, h in iter_batches(records)]
    finally:
        client.close()


@pytest.mark.parametrize(
    ("options", "idempotent"), [((), True), (("--no-idempotence",), False), (("--acks", "1"), False)]
)
def test_produce_is_idempotent_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: tuple[str, ...], idempotent: bool
) -> None:
    def produce(address: str, lines: str) -> int:
        monkeypatch.setattr("sys.stdin", io.StringIO(lines))
        return main(
            [
                "produce",
                TOPIC_NAME,
                "--partition",
                "0",
                "--linger-ms",
                "0",
                "--bootstrap-server",
                address,
                *options,
            ]
        )

    async def scenario(address: str) -> None:
        assert await asyncio.to_thread(produce, address, "a\nb\n") == 0
        assert await asyncio.to_thread(produce, address, "c\n") == 0
        batches = await producer_ids_in_log(address)
        if idempotent:
            assert [pid >= 0 for pid, _ in batches] == [True] * len(batches)
            assert len({pid for pid, _ in batches}) == 2, "each run is a producer of its own"
        else:
            assert {pid for pid, _ in batches} == {-1}

    async def run() -> None:
        async with serving(tmp_path) as address:
            await scenario(address)

    asyncio.run(run())


def test_produce_to_a_missing_topic_says_so_at_once_and_gives_up_by_timeout_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``raftka produce nosuch --timeout-s 10`` says on stderr at once that the topic does
    not exist, waits for it up to --timeout-s (the producer's max_block_ms), not the
    default 60 s, and then fails every line (not one wait per line). Timed on the
    producer's own clock, one second per look, so the machine's load does not matter."""
    reads: list[float] = []

    def clock() -> float:
        reads.append(float(len(reads)))
        return reads[-1]

    options_given: dict[str, object] = {}

    def producer(servers: list[str], **options: object) -> Producer:
        options_given.update(options)
        return Producer(servers, clock=clock, retry_backoff_ms=1, **options)

    monkeypatch.setattr("raftka.cli.produce.Producer", producer)
    monkeypatch.setattr("sys.stdin", io.StringIO("a\nb\nc\n"))

    async def scenario(address: str) -> None:
        argv = ["produce", "nosuch", "--timeout-s", "10", "--linger-ms", "0", "--bootstrap-server", address]
        with pytest.raises(SystemExit) as exited:
            await asyncio.to_thread(main, argv)
        assert exited.value.code == 1

    asyncio.run(_serve(tmp_path, scenario))
    assert options_given["max_block_ms"] == 10_000
    # line 1 waits its 10 s of looks; lines 2 and 3 each take two more (their deadline, one
    # refreshed miss) and fail at once, where one wait per line would have taken 30
    assert reads[-1] == 10 + 2 * 2, "gave up by --timeout-s on the producer's clock, once for all lines"
    err = capsys.readouterr().err
    said, error = err.index("topic does not exist; waiting for it to be created"), err.index("raftka: error:")
    assert said < error and "topic=nosuch" in err and "max_wait_s=10.0" in err
    assert "3 of 3 records not acknowledged" in err and "UNKNOWN_TOPIC_OR_PARTITION" in err


async def _serve(tmp_path: Path, scenario: Callable[[str], Awaitable[None]]) -> None:
    async with serving(tmp_path) as address:
        await scenario(address)
