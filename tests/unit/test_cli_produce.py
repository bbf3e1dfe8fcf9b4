"""``raftka produce`` against a real broker's data service in this process: idempotent by
default (its batches carry a producer id and sequences), at least once with
``--no-idempotence`` or ``--acks 1`` (no producer id), as Kafka's console producer with
``enable.idempotence`` true or false."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from raftka.cli.main import main
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
