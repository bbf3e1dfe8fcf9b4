"""``raftka topics create --config`` and ``raftka configs alter`` against the controller as
``raftka server`` builds it (``start_controller``), in-process over gRPC: a compacted topic
is created, its policy changed live, and a bad compaction setting is refused naming the
field, with nothing written."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest

from raftka.cli.main import main
from raftka.metadata.image import TOPIC
from raftka.metadata.server import start_controller
from raftka.node.config import NodeConfig, Voter
from raftka.raft.storage.meta import format_storage, new_cluster_id
from raftka.v1 import controller_pb2 as pb
from raftka.v1 import controller_pb2_grpc, metadata_pb2
from tests.metadata_sim.quorum import eventually
from tests.unit.metadata_controller_support import run
from tests.unit.test_metadata_server import TIMEOUT_S, free_port


def test_a_compacted_topic_is_created_and_its_policy_changed_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    config = NodeConfig(
        node_id=1,
        data_dir=tmp_path / "data",
        voters=(Voter(1, "127.0.0.1", port),),
        listener=f"127.0.0.1:{port}",
    )
    format_storage(config.data_dir, new_cluster_id(), 1, initial_cluster=True)
    connection = ["--bootstrap-controller", config.listener]

    def cli(*argv: str) -> tuple[int, str, str]:
        try:
            code = main([*argv, *connection])
        except SystemExit as e:
            code = int(e.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    async def body() -> None:
        started = await start_controller(config)
        await eventually(lambda: started.controller.is_active, "the controller to activate")
        async with grpc.aio.insecure_channel(config.listener) as channel:
            stub = controller_pb2_grpc.ControllerStub(channel)
            registered = await stub.BrokerRegistration(
                pb.BrokerRegistrationRequest(
                    broker_id=101,
                    incarnation_id="i",
                    listeners=[metadata_pb2.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9092)],
                ),
                timeout=TIMEOUT_S,
            )
            beat = pb.BrokerHeartbeatRequest(
                broker_id=101,
                broker_epoch=registered.broker_epoch,
                current_metadata_offset=registered.broker_epoch,
            )
            assert not (await stub.BrokerHeartbeat(beat, timeout=TIMEOUT_S)).is_fenced
        configs = lambda: started.controller.latest_image.configs.get((TOPIC, "changelog"), {})  # noqa: E731

        create = ("topics", "create", "changelog", "--partitions", "1", "--replication-factor", "1")
        code, out, err = await asyncio.to_thread(cli, *create, "--config", "cleanup.policy=compact")
        assert (code, err) == (0, "") and "Created topic changelog" in out
        assert configs() == {"cleanup.policy": "compact"}

        alter = ("configs", "alter", "--topic", "changelog")
        code, _, err = await asyncio.to_thread(cli, *alter, "--set", "cleanup.policy=delete,compact")
        assert (code, err) == (0, "")
        assert configs() == {"cleanup.policy": "compact,delete"}
        code, out, _ = await asyncio.to_thread(
            cli, "configs", "describe", "--topic", "changelog", "--output", "json"
        )
        described = {e["name"]: e for e in json.loads(out)["configs"]}
        assert described["cleanup.policy"]["value"] == "compact,delete"
        assert described["delete.retention.ms"] == {
            "name": "delete.retention.ms",
            "value": "86400000",
            "is_default": True,
        }

        for argv, says in (
            (
                ("--set", "min.cleanable.dirty.ratio=1.5"),
                "min.cleanable.dirty.ratio: must be between 0 and 1",
            ),
            (("--set", "cleanup.policy=shred"), "'shred' is not a policy"),
            (
                ("--set", "max.compaction.lag.ms=10", "--set", "min.compaction.lag.ms=11"),
                "min.compaction.lag.ms 11 is larger than max.compaction.lag.ms 10",
            ),
        ):
            before = started.controller.latest_image.offset
            code, out, err = await asyncio.to_thread(cli, *alter, *argv)
            assert code != 0 and out == "" and "INVALID_CONFIG" in err and says in err, err
            assert started.controller.latest_image.offset == before and configs() == {
                "cleanup.policy": "compact,delete"
            }
        await started.shutdown()

    run(body)
