"""``raftka groups list|describe|delete|reset-offsets`` against a real broker's coordinator
in this process (the command runs in a thread with its own loop, the group's members
keep heartbeating on the test's)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from raftka.cli.main import main
from raftka.client.consumer import AsyncConsumer
from raftka.client.producer import AsyncProducer
from tests.unit.broker_in_process import InProcessBroker, broker_in_process

TOPIC = "orders"


async def cli(
    capsys: pytest.CaptureFixture[str], broker: InProcessBroker, *argv: str
) -> tuple[int, Any, str]:
    """(exit status, JSON output, stderr) of a command run in a thread."""

    def call() -> int:
        try:
            return main([*argv, "--bootstrap-server", broker.address, "--output", "json"])
        except SystemExit as e:
            return int(e.code or 0)

    capsys.readouterr()  # the broker's own log lines so far
    status = await asyncio.to_thread(call)  # while it runs, logs go to stderr (raftka.cli.main's set-up)
    out, err = capsys.readouterr()
    return status, json.loads(out) if out.strip() else None, err


def test_list_describe_reset_and_delete_a_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario(broker: InProcessBroker) -> None:
        producer = AsyncProducer(broker.address, linger_ms=0)
        for i in range(20):
            await producer.send(TOPIC, b"v%d" % i, partition=i % 2)
        await producer.close()
        consumer = AsyncConsumer(
            broker.address,
            group_id="g",
            auto_offset_reset="earliest",
            session_timeout_ms=1_000,
            heartbeat_interval_ms=100,
        )
        consumer.subscribe([TOPIC])
        read = 0
        while read < 15:
            read += len(await consumer.poll(50, 15 - read))
        await consumer.commit()

        status, listed, _ = await cli(capsys, broker, "groups", "list")
        assert status == 0 and listed == [{"group": "g", "state": "Stable", "protocol_type": "consumer"}]
        status, described, _ = await cli(capsys, broker, "groups", "describe", "g")
        assert status == 0 and described["state"] == "Stable" and described["protocol"] == "range"
        (member,) = described["members"]
        assert sorted(member["assignment"]) == ["orders-0", "orders-1"]
        offsets = {
            (o["partition"]): (o["committed"], o["log_end"], o["lag"], o["member_id"])
            for o in described["offsets"]
        }
        assert sum(c for c, *_ in offsets.values()) == 15 and {e for _, e, _, _ in offsets.values()} == {10}
        assert sum(lag for *_, lag, _ in offsets.values()) == 5
        assert {m for *_, m in offsets.values()} == {member["member_id"]}

        status, _, err = await cli(
            capsys,
            broker,
            "groups",
            "reset-offsets",
            "--group",
            "g",
            "--topic",
            TOPIC,
            "--to-earliest",
            "--execute",
        )
        assert status == 1 and "UNKNOWN_MEMBER_ID" in err and "has members" in err, "not while it has members"
        status, _, err = await cli(capsys, broker, "groups", "delete", "g")
        assert status == 1

        await consumer.close()  # leaves: the group is empty
        status, planned, _ = await cli(
            capsys,
            broker,
            "groups",
            "reset-offsets",
            "--group",
            "g",
            "--topic",
            f"{TOPIC}:1",
            "--shift-by",
            "-3",
        )
        assert status == 0 and planned["executed"] is False
        before = {o["partition"]: o["committed"] for o in described["offsets"]}
        assert planned["offsets"] == [
            {"topic": TOPIC, "partition": 1, "committed": before[1], "new_offset": before[1] - 3}
        ]
        status, _, _ = await cli(
            capsys,
            broker,
            "groups",
            "reset-offsets",
            "--group",
            "g",
            "--all-topics",
            "--to-earliest",
            "--execute",
        )
        assert status == 0
        _, described, _ = await cli(capsys, broker, "groups", "describe", "g")
        assert described["state"] == "Empty" and [o["committed"] for o in described["offsets"]] == [0, 0]
        status, deleted, _ = await cli(capsys, broker, "groups", "delete", "g", "nope")
        assert status == 1 and [(d["group"], d["error"]) for d in deleted] == [
            ("g", None),
            ("nope", "GROUP_ID_NOT_FOUND"),
        ]
        _, listed, _ = await cli(capsys, broker, "groups", "list")
        assert listed == []

    async def run() -> None:
        async with broker_in_process(tmp_path, {TOPIC: 2}) as broker:
            await asyncio.wait_for(scenario(broker), 60)

    asyncio.run(run())
