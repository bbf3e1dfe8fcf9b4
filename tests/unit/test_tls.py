"""Mutual TLS: ``raftka certs init`` makes what the nodes need, a node's ``[tls]`` table is
checked at load time, and both kinds of listener (the raw-TCP one of the data protocol
and the Kafka listener, and the gRPC server of the quorum and the controller API) serve
a client with a certificate from the cluster's CA and nobody else: no certificate, a
certificate from another CA, an expired one and plaintext are all refused before any
request reaches a handler."""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import stat
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
import structlog.testing
from cryptography import x509

from raftka.command import local
from raftka.command.errors import CliError
from raftka.command.tls_args import client_tls
from raftka.node.config import ConfigError, load_config, parse_config, render_toml
from raftka.raft.transport.grpc_transport import GrpcTransport
from raftka.security import tls as tls_module
from raftka.security.certs import BROKER_UNIT, CLIENT_UNIT, Authority, CertsError, init_certs, new_authority
from raftka.security.tls import TlsError, TlsFiles, aio_channel, tls_files
from raftka.v1 import broker_pb2, raft_pb2, raft_pb2_grpc
from raftka.wire import frames
from raftka.wire.client import BrokerClient, WireError
from raftka.wire.server import FrameServer
from tests.unit.tls_support import Certs, make_certs
from tests.unit.transport_fakes import CLUSTER, FakeInbox

VOTERS = "1@127.0.0.1:19091"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def run(coroutine) -> None:  # noqa: ANN001
    asyncio.run(asyncio.wait_for(coroutine, 30))


# certs init ----------------------------------------------------------------------------


def test_certs_init_writes_a_ca_and_one_certificate_per_node_and_client(tmp_path: Path) -> None:
    written = init_certs(
        tmp_path, controllers=[1, 2], brokers=[101], clients=["admin"], hosts=["127.0.0.1", "kafka-0"]
    )
    assert sorted(written) == ["admin", "broker-101", "ca", "controller-1", "controller-2"]
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    subjects = {}
    for name in ("controller-1", "broker-101", "admin"):
        cert = x509.load_pem_x509_certificate((tmp_path / f"{name}.crt").read_bytes())
        cert.verify_directly_issued_by(ca)
        subjects[name] = cert.subject.rfc4514_string()
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert [str(ip) for ip in alt.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
        assert alt.get_values_for_type(x509.DNSName) == ["kafka-0"]
        assert stat.S_IMODE(os.stat(tmp_path / f"{name}.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "ca.key").st_mode) == 0o600
    assert subjects == {
        "controller-1": "CN=controller-1,OU=controller,O=raftka",
        "broker-101": "CN=broker-101,OU=broker,O=raftka",
        "admin": "CN=admin,OU=client,O=raftka",
    }
    # every pair loads as a node's and a client's TLS files
    tls_files({"ca": "ca.crt", "cert": "broker-101.crt", "key": "broker-101.key"}, tmp_path)


def test_certs_init_validity_is_configurable(tmp_path: Path) -> None:
    init_certs(tmp_path, controllers=[1], brokers=[], days=2)
    cert = x509.load_pem_x509_certificate((tmp_path / "controller-1.crt").read_bytes())
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert 2 * 86_400 <= lifetime.total_seconds() <= 2 * 86_400 + 600


def test_certs_init_refuses_to_replace_a_ca(tmp_path: Path) -> None:
    init_certs(tmp_path, controllers=[1], brokers=[])
    before = (tmp_path / "ca.crt").read_bytes()
    with pytest.raises(CertsError, match="already holds a CA"):
        init_certs(tmp_path, controllers=[1], brokers=[])
    assert (tmp_path / "ca.crt").read_bytes() == before


def test_certs_init_refuses_bad_names(tmp_path: Path) -> None:
    with pytest.raises(CertsError, match="--clients"):
        init_certs(tmp_path, controllers=[], brokers=[], clients=["../evil"])
    with pytest.raises(CertsError, match="twice"):
        init_certs(tmp_path, controllers=[1, 1], brokers=[])
    assert not (tmp_path / "ca.crt").exists()


# a node's [tls] table ------------------------------------------------------------------


def node_config(tls: dict[str, str], base_dir: Path):  # noqa: ANN201
    data = {"node_id": 1, "data_dir": "data", "controller": {"quorum": {"voters": VOTERS}}, "tls": tls}
    return parse_config(data, base_dir=base_dir)


def test_a_node_config_reads_tls_paths_relative_to_its_file(certs: Certs) -> None:
    base = certs.controller.ca.parent
    config = node_config({"ca": "ca.crt", "cert": "controller-1.crt", "key": "controller-1.key"}, base)
    assert config.tls == certs.controller
    assert node_config({}, base).tls is None


def test_a_rendered_tls_config_reads_back_equal(certs: Certs, tmp_path: Path) -> None:
    base = certs.controller.ca.parent
    config = node_config({"ca": "ca.crt", "cert": "controller-1.crt", "key": "controller-1.key"}, base)
    path = tmp_path / "server.toml"
    path.write_text(render_toml(config))
    assert load_config(path) == config


@pytest.mark.parametrize(
    ("tls", "key", "problem"),
    [
        ({"ca": "ca.crt", "cert": "admin.crt"}, "tls.key", "set all three or none"),
        ({"ca": "missing.crt", "cert": "admin.crt", "key": "admin.key"}, "tls.ca", "no such file"),
        ({"ca": "ca.crt", "cert": "admin.key", "key": "admin.key"}, "tls.cert", "no PEM certificate"),
        (
            {"ca": "ca.crt", "cert": "admin.crt", "key": "admin.crt"},
            "tls.key",
            "no unencrypted PEM private key",
        ),
        ({"ca": "ca.crt", "cert": "admin.crt", "key": "alice.key"}, "tls.key", "is not the key of tls.cert"),
    ],
)
def test_a_bad_tls_table_names_its_key(certs: Certs, tls: dict[str, str], key: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as raised:
        node_config(tls, certs.admin.ca.parent)
    assert str(raised.value).startswith(f"{key}: ")


# the raw-TCP listener (data protocol; the Kafka listener is the same server) -------------


@asynccontextmanager
async def data_listener(tls: TlsFiles, served: list[str]) -> AsyncIterator[str]:
    async def metadata(request: broker_pb2.MetadataRequest) -> broker_pb2.MetadataResponse:
        served.append("metadata")
        return broker_pb2.MetadataResponse(cluster_id=CLUSTER)

    server = FrameServer({frames.METADATA.key: metadata})
    port = await server.start("127.0.0.1", 0, tls.server_ssl)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.close()


async def metadata_call(address: str, context: ssl.SSLContext | None) -> broker_pb2.MetadataResponse:
    client = BrokerClient(address, tls=context)
    try:
        return await client.Metadata(broker_pb2.MetadataRequest(), timeout=5)
    finally:
        client.close()


def test_the_data_listener_serves_a_client_with_a_certificate_of_the_cluster(certs: Certs) -> None:
    async def scenario() -> None:
        served: list[str] = []
        async with data_listener(certs.broker, served) as address:
            assert (await metadata_call(address, certs.admin.client_ssl)).cluster_id == CLUSTER
            assert (await metadata_call(address, certs.controller.client_ssl)).cluster_id == CLUSTER
        assert served == ["metadata", "metadata"]

    run(scenario())


@pytest.mark.parametrize("client", ["no certificate", "another CA", "expired", "plaintext"])
def test_the_data_listener_refuses_a_client_it_cannot_trust(certs: Certs, client: str) -> None:
    contexts = {
        "no certificate": certs.no_client_cert(),
        "another CA": certs.foreign.client_ssl,
        "expired": certs.expired.client_ssl,
        "plaintext": None,
    }

    async def scenario() -> None:
        served: list[str] = []
        async with data_listener(certs.broker, served) as address:
            with pytest.raises(WireError) as raised:
                await metadata_call(address, contexts[client])
            assert raised.value.code == "UNAVAILABLE"
            # the listener goes on serving the others
            assert (await metadata_call(address, certs.admin.client_ssl)).cluster_id == CLUSTER
        assert served == ["metadata"]

    run(scenario())


def test_a_client_refuses_a_server_of_another_ca(certs: Certs) -> None:
    async def scenario() -> None:
        served: list[str] = []
        async with data_listener(certs.foreign, served) as address:
            with pytest.raises(WireError, match="TLS handshake failed"):
                await metadata_call(address, certs.admin.client_ssl)
        assert served == []

    run(scenario())


# the gRPC server (quorum, controller API, broker API) ----------------------------------


@asynccontextmanager
async def grpc_node(tls: TlsFiles) -> AsyncIterator[str]:
    transport = GrpcTransport(
        1,
        "127.0.0.1:0",
        {},
        CLUSTER,
        describe=lambda: raft_pb2.DescribeQuorumResponse(cluster_id=CLUSTER, node_id=1),
        server_credentials=tls.server_credentials,
        channel_credentials=tls.channel_credentials,
    )
    await transport.start(FakeInbox())
    try:
        yield f"127.0.0.1:{transport.port}"
    finally:
        await transport.close()


async def describe(address: str, tls: TlsFiles | None) -> raft_pb2.DescribeQuorumResponse:
    async with aio_channel(address, tls) as channel:
        return await raft_pb2_grpc.RaftStub(channel).DescribeQuorum(
            raft_pb2.DescribeQuorumRequest(), timeout=5
        )


def test_the_grpc_server_serves_a_client_with_a_certificate_of_the_cluster(certs: Certs) -> None:
    async def scenario() -> None:
        async with grpc_node(certs.controller) as address:
            assert (await describe(address, certs.admin)).cluster_id == CLUSTER

    run(scenario())


@pytest.mark.parametrize("client", ["no certificate", "another CA", "expired", "plaintext"])
def test_the_grpc_server_refuses_a_client_it_cannot_trust(certs: Certs, client: str) -> None:
    async def scenario() -> None:
        async with grpc_node(certs.controller) as address:
            if client == "no certificate":
                credentials = grpc.ssl_channel_credentials(root_certificates=certs.admin.ca.read_bytes())
                channel = grpc.aio.secure_channel(address, credentials)
            elif client == "plaintext":
                channel = grpc.aio.insecure_channel(address)
            else:
                channel = aio_channel(address, certs.foreign if client == "another CA" else certs.expired)
            async with channel:
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await raft_pb2_grpc.RaftStub(channel).DescribeQuorum(
                        raft_pb2.DescribeQuorumRequest(), timeout=5
                    )
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE

    run(scenario())


# rotating a node's certificate ----------------------------------------------------------


class NodeFiles:
    """A node's three files in a folder, rewritten in place as an operator rotates them."""

    def __init__(self, directory: Path, authority: Authority) -> None:
        self.files = TlsFiles(directory / "ca.crt", directory / "node.crt", directory / "node.key")
        self.rotate(authority)

    def rotate(self, authority: Authority, *, key: bool = True) -> x509.Certificate:
        """A new certificate from ``authority``, which becomes the only CA; ``key=False``
        leaves the old key (a rotation caught half-way)."""
        issued = authority.issue("broker-101", BROKER_UNIT)
        self.files.ca.write_bytes(authority.cert_pem)
        self.files.cert.write_bytes(issued.cert_pem)
        if key:
            self.files.key.write_bytes(issued.key_pem)
        return x509.load_pem_x509_certificate(issued.cert_pem)


def client_of(directory: Path, name: str, authority: Authority, trusted: Sequence[Authority]) -> TlsFiles:
    issued = authority.issue(name, CLIENT_UNIT)
    ca = directory / f"{name}-ca.crt"
    ca.write_bytes(b"".join(a.cert_pem for a in trusted))
    (directory / f"{name}.crt").write_bytes(issued.cert_pem)
    (directory / f"{name}.key").write_bytes(issued.key_pem)
    return TlsFiles(ca, directory / f"{name}.crt", directory / f"{name}.key")


async def served_certificate(address: str, context: ssl.SSLContext) -> x509.Certificate:
    host, _, port = address.rpartition(":")
    _, writer = await asyncio.open_connection(host, int(port), ssl=context, server_hostname=host)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return x509.load_der_x509_certificate(der)


@pytest.fixture
def rotating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[NodeFiles, Authority, Authority]:
    monkeypatch.setattr(tls_module, "RELOAD_CHECK_INTERVAL_S", 0.0)  # look at every connection
    first, second = new_authority("first CA"), new_authority("second CA")
    return NodeFiles(tmp_path, first), first, second


def test_a_rotated_certificate_is_served_to_new_connections_and_old_ones_keep_theirs(
    rotating: tuple[NodeFiles, Authority, Authority], tmp_path: Path
) -> None:
    node, first, second = rotating
    old_client = client_of(tmp_path, "old", first, [first, second]).client_ssl
    new_client = client_of(tmp_path, "new", second, [first, second]).client_ssl

    async def scenario() -> None:
        served: list[str] = []
        async with data_listener(node.files, served) as address:
            before = await served_certificate(address, old_client)
            open_before = BrokerClient(address, tls=old_client)
            assert (await open_before.Metadata(broker_pb2.MetadataRequest(), timeout=5)).cluster_id == CLUSTER
            same_ca = node.rotate(first)
            assert (await served_certificate(address, old_client)).serial_number == same_ca.serial_number
            assert same_ca.serial_number != before.serial_number
            new_ca = node.rotate(second)  # the first CA is no longer trusted
            assert (await served_certificate(address, new_client)).serial_number == new_ca.serial_number
            assert (await metadata_call(address, new_client)).cluster_id == CLUSTER
            with pytest.raises(WireError) as refused:
                await metadata_call(address, old_client)
            assert refused.value.code == "UNAVAILABLE"
            # the connection made before the rotations keeps its certificate and serves on
            assert (await open_before.Metadata(broker_pb2.MetadataRequest(), timeout=5)).cluster_id == CLUSTER
            open_before.close()
        assert served == ["metadata", "metadata", "metadata"]

    run(scenario())


def test_files_caught_half_way_through_a_rotation_are_not_used(
    rotating: tuple[NodeFiles, Authority, Authority], tmp_path: Path
) -> None:
    node, first, _ = rotating
    client = client_of(tmp_path, "admin", first, [first]).client_ssl

    async def scenario() -> None:
        async with data_listener(node.files, []) as address:
            before = await served_certificate(address, client)
            with structlog.testing.capture_logs() as logs:
                node.rotate(first, key=False)  # the new certificate, the old key
                for _ in range(2):
                    assert (await served_certificate(address, client)).serial_number == before.serial_number
            warned = [e["error"] for e in logs if e["log_level"] == "warning"]
            assert len(warned) == 1 and "is not the key of" in warned[0]
            rotated = node.rotate(first)
            assert (await served_certificate(address, client)).serial_number == rotated.serial_number

    run(scenario())


def test_the_grpc_server_serves_a_rotated_certificate_and_ca_to_new_connections(
    rotating: tuple[NodeFiles, Authority, Authority], tmp_path: Path
) -> None:
    node, first, second = rotating
    of_first = client_of(tmp_path, "first", first, [first])
    of_second = client_of(tmp_path, "second", second, [second])

    async def scenario() -> None:
        async with grpc_node(node.files) as address:
            assert (await describe(address, of_first)).cluster_id == CLUSTER
            node.rotate(second)
            assert (await describe(address, of_second)).cluster_id == CLUSTER
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await describe(address, of_first)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

    run(scenario())


# which certificate a command presents --------------------------------------------------


def args(**values) -> argparse.Namespace:  # noqa: ANN003
    defaults = {"tls_ca": None, "tls_cert": None, "tls_key": None, "command_config": None, "dir": None}
    return argparse.Namespace(**(defaults | values))


def test_a_command_takes_its_certificate_from_flags(certs: Certs, tmp_path: Path) -> None:
    flags = args(
        tls_ca=str(certs.alice.ca), tls_cert=str(certs.alice.cert), tls_key=str(certs.alice.key), dir=tmp_path
    )
    assert client_tls(flags) == certs.alice
    with pytest.raises(CliError, match=r"^--tls-key: required with --tls-ca, --tls-cert"):
        client_tls(args(tls_ca=str(certs.alice.ca), tls_cert=str(certs.alice.cert), dir=tmp_path))


def test_a_command_takes_its_certificate_from_a_client_config_file(certs: Certs, tmp_path: Path) -> None:
    config = certs.alice.ca.parent / "client.toml"
    config.write_text('[tls]\nca = "ca.crt"\ncert = "alice.crt"\nkey = "alice.key"\n')
    assert client_tls(args(command_config=config, dir=tmp_path)) == certs.alice
    config.write_text('[tls]\nca = "ca.crt"\ncert = "alice.crt"\nkey = "alice.key"\nkeys = "x"\n')
    with pytest.raises(CliError, match="keys: unknown key"):
        client_tls(args(command_config=config, dir=tmp_path))
    config.write_text('[tls]\nca = "ca.crt"\ncert = "alice.crt"\nkey = "admin.key"\n')
    with pytest.raises(CliError, match="tls.key: .* is not the key of tls.cert"):
        client_tls(args(command_config=config, dir=tmp_path))


def test_a_command_finds_the_local_clusters_client_certificate(tmp_path: Path) -> None:
    plain = local.LocalCluster(tmp_path / "plain", "id", [])
    plain.dir.mkdir()
    local.save(plain)
    assert client_tls(args(dir=plain.dir)) is None
    secured = local.LocalCluster(tmp_path / "tls", "id", [], tls=True)
    secured.dir.mkdir()
    local.save(secured)
    found = client_tls(args(dir=secured.dir))
    assert found == TlsFiles(*(secured.certs_dir() / f for f in ("ca.crt", "admin.crt", "admin.key")))
    assert local.load(secured.dir).tls and not local.load(plain.dir).tls
    assert client_tls(args(dir=tmp_path / "none")) is None


def test_tls_files_name_the_flag_that_is_wrong(certs: Certs) -> None:
    with pytest.raises(TlsError, match=r"^--tls-ca: no such file"):
        tls_files(
            {"ca": "nope.crt", "cert": "admin.crt", "key": "admin.key"}, certs.admin.ca.parent, "--tls-"
        )
