"""The commands beyond admin and data (health, perf, chaos) take the TLS options too: a
health probe presents its certificate to a TLS node, and librdkafka gets the same files
as SSL properties. ``tests/integration/test_tls_cluster.py`` runs each against a
``cluster up --tls`` cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from raftka.cli.main import build_parser, main
from raftka.command.tls_args import client_tls
from raftka.node.health import NodeHealth
from raftka.raft.transport.grpc_transport import GrpcTransport
from raftka.security.tls import TlsFiles
from raftka.tools.perf import perf_kafka
from raftka.v1 import controller_pb2
from tests.unit.tls_support import Certs, make_certs
from tests.unit.transport_fakes import CLUSTER, FakeInbox

CONTROLLER = controller_pb2.DESCRIPTOR.services_by_name["Controller"]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def flags(files: TlsFiles) -> list[str]:
    return ["--tls-ca", str(files.ca), "--tls-cert", str(files.cert), "--tls-key", str(files.key)]


@pytest.mark.parametrize(
    "command",
    [
        ["health", "127.0.0.1:1"],
        ["perf", "metadata"],
        ["perf", "stability"],
        ["perf", "kafka", "--records", "1"],
        ["perf", "kafka-consume", "--records", "1"],
        ["chaos", "kill-leader"],
        ["chaos", "kill-broker"],
    ],
    ids=" ".join,
)
def test_every_connecting_command_takes_the_tls_options(
    command: list[str], certs: Certs, tmp_path: Path
) -> None:
    parsed = build_parser().parse_args([*command, *flags(certs.alice), "--dir", str(tmp_path)])
    assert client_tls(parsed) == certs.alice
    assert client_tls(build_parser().parse_args([*command, "--dir", str(tmp_path)])) is None


def test_librdkafka_gets_the_certificate_as_ssl_properties(certs: Certs, tmp_path: Path) -> None:
    parsed = build_parser().parse_args(["perf", "kafka", "--records", "1", *flags(certs.alice)])
    assert perf_kafka.ssl_properties(parsed) == {
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.alice.ca),
        "ssl.certificate.location": str(certs.alice.cert),
        "ssl.key.location": str(certs.alice.key),
    }
    plaintext = build_parser().parse_args(["perf", "kafka", "--records", "1", "--dir", str(tmp_path)])
    assert perf_kafka.ssl_properties(plaintext) == {}
    assert "security.protocol" not in perf_kafka.producer_config(plaintext, "127.0.0.1:9092")
    assert perf_kafka.producer_config(parsed, "127.0.0.1:9092")["security.protocol"] == "SSL"


def test_the_health_command_probes_a_tls_node_with_its_certificate(
    certs: Certs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def body() -> None:
        health = NodeHealth(1, [CONTROLLER])
        health.set_serving(True)
        node = certs.controller
        transport = GrpcTransport(
            1,
            "127.0.0.1:0",
            {},
            CLUSTER,
            servicers=[health.add_to_server],
            server_credentials=node.server_credentials,
            channel_credentials=node.channel_credentials,
        )
        await transport.start(FakeInbox())
        address = f"127.0.0.1:{transport.port}"
        try:
            probe = ["health", address, "--timeout", "2", "--dir", str(tmp_path)]
            assert await asyncio.to_thread(main, [*probe, *flags(certs.admin)]) == 0
            assert capsys.readouterr().out.splitlines()[-1] == f"{address}: SERVING"
            assert await asyncio.to_thread(main, probe) == 1  # plaintext: refused in the handshake
            assert capsys.readouterr().out.splitlines()[-1].startswith(f"{address}: UNAVAILABLE")
            assert await asyncio.to_thread(main, [*probe, *flags(certs.foreign)]) == 1
            assert capsys.readouterr().out.splitlines()[-1].startswith(f"{address}: UNAVAILABLE")
        finally:
            await transport.close()

    asyncio.run(asyncio.wait_for(body(), 30))
