"""``raftka transactions list|describe`` against a real broker's transaction coordinator
in this process, in kafka-transactions' columns."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from raftka.cli.main import main
from raftka.wire.client import BrokerClient
from tests.unit.broker_in_process import InProcessBroker, broker_in_process
from tests.unit.test_cli_groups import cli
from tests.unit.test_transaction_coordinator import TID, TOPIC, add, init


def test_list_and_describe_transactions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario(broker: InProcessBroker) -> None:
        client = BrokerClient(broker.address)
        try:
            pid = (await init(client, timeout_ms=45_000)).producer_id
            await init(client, tid="idle")
            await add(client, pid, 0, 1, 0)
        finally:
            client.close()
        status, listed, _ = await cli(capsys, broker, "transactions", "list")
        assert status == 0
        assert listed == [
            {"transactional_id": "idle", "coordinator": 101, "producer_id": pid + 1, "state": "Empty"},
            {"transactional_id": TID, "coordinator": 101, "producer_id": pid, "state": "Ongoing"},
        ]
        status, ongoing, _ = await cli(capsys, broker, "transactions", "list", "--state", "Ongoing")
        assert [t["transactional_id"] for t in ongoing] == [TID]
        status, described, _ = await cli(
            capsys, broker, "transactions", "describe", "--transactional-id", TID
        )
        assert status == 0
        assert {
            k: described[k]
            for k in ("coordinator_id", "producer_id", "producer_epoch", "state", "timeout_ms")
        } == {
            "coordinator_id": 101,
            "producer_id": pid,
            "producer_epoch": 0,
            "state": "Ongoing",
            "timeout_ms": 45_000,
        }
        assert described["partitions"] == [f"{TOPIC}-0", f"{TOPIC}-1"]
        assert described["start_time_ms"] == broker.controller.wall_clock_ms
        status, _, err = await cli(capsys, broker, "transactions", "describe", "--transactional-id", "nobody")
        assert status != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in err

        def table() -> str:
            main(
                ["transactions", "describe", "--transactional-id", TID, "--bootstrap-server", broker.address]
            )
            return capsys.readouterr().out

        capsys.readouterr()
        header = (await asyncio.to_thread(table)).splitlines()[0].split()
        assert header == [
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ]

    async def main_() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 2}) as broker:
            await scenario(broker)

    asyncio.run(main_())
