"""The data plane on real processes: ``raftka cluster up`` (3 controllers, 3 brokers).

- ``raftka chaos kill-broker`` SIGKILLs (then SIGSTOPs; ``power-cut-broker`` power-cuts:
  its logs lose everything past their recovery points before it restarts) the busiest
  partition leader twice (five times in ``make test-long``) under an acks=all load from the idempotent producer (RF 3,
  min.insync.replicas 2) while a group of two consumers reads along; afterwards every acknowledged record is
  read back once, in its partition's order, nothing appears that was never sent, the
  group processed every acknowledged record at least once and converged, every
  partition's replicas converge to the same bytes, and, the nodes stopped, still agree. A SIGKILL lands mid-write: each
  victim recovers its logs (and its producers' state) and rejoins every ISR before the
  next round starts.
- Every per-partition error a producer or consumer can get, from a real broker, with
  the partition's log unchanged after each and the broker still serving, the
  idempotent producer's refusals and InitProducerId included: over the data protocol
  (what clients use) and over the gRPC Broker service (for tools); and frames the data
  protocol cannot read close that one connection only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.types import NewTopic
from raftka.records.batch import CRC_START
from raftka.records.codec import BatchBuilder
from raftka.tools.chaos.chaos_broker import PARTITIONS
from raftka.v1 import broker_pb2 as pb
from raftka.v1 import broker_pb2_grpc, controller_pb2
from raftka.wire.client import BrokerClient
from raftka.wire.frames import REQUEST_FRAME_MAX_BYTES
from tests.integration.metadata_cluster import RAFTKA, MetadataCluster
from tests.integration.polling import wait_until

pytestmark = pytest.mark.integration
E = controller_pb2.ErrorCode
SESSION_TIMEOUT_MS = 2_000  # short, so a killed leader is fenced (and replaced) quickly
HEARTBEAT_MS = 300


@pytest.fixture
def cluster(tmp_path: Path):  # noqa: ANN201
    """A cluster of the test's own: the faults' rounds leave it to the test's checks alone."""
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up_configured(
            controller__controller={"session_timeout_ms": SESSION_TIMEOUT_MS},
            broker__broker={"heartbeat_interval_ms": HEARTBEAT_MS},
        )
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def serving_cluster(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """One cluster for the tests that only talk to it, each on a topic of its own."""
    cluster = MetadataCluster(tmp_path_factory.mktemp("data-plane") / "cluster")
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.close()


@pytest.mark.parametrize("rounds", [2, pytest.param(5, marks=pytest.mark.long)])  # 5: make test-long
@pytest.mark.parametrize(
    "fault",
    [("kill-broker", "--signal", "KILL"), ("kill-broker", "--signal", "STOP"), ("power-cut-broker",)],
    ids=["KILL", "STOP", "power-cut"],
)
def test_acknowledged_records_survive_leader_failures(
    cluster: MetadataCluster, fault: tuple[str, ...], rounds: int
) -> None:
    done = subprocess.run(
        [
            *RAFTKA,
            "chaos",
            *fault,
            "--rounds",
            str(rounds),
            "--rate",
            "500",
            "--group-consumers",
            "2",
            "--output",
            "json",
            "--dir",
            str(cluster.dir),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in (0, 1), f"chaos failed to run: {done.stderr[-3000:]}\n{cluster.log_tails()}"
    report = json.loads(done.stdout)
    summary = report["summary"]
    assert len(report["rounds"]) == rounds
    if fault[0] == "power-cut-broker":  # flush.ms is off: victims lose their unflushed tails
        cuts = [r["power_cut"] for r in report["rounds"]]
        assert sum(c["bytes_lost"] for c in cuts) > 0, cuts
    assert summary["acknowledged"] > 0 and summary["idempotent"]
    assert summary["lost"] == 0, summary
    assert summary["duplicated"] == 0, summary
    assert summary["out_of_order"] == 0, summary
    assert summary["read"] == summary["acknowledged"] + summary["unacknowledged_read"], summary
    assert summary["unknown"] == 0, summary
    assert summary["group_missed"] == 0 and summary["group_converged"], summary  # a group read along
    assert done.returncode == 0
    cluster.wait_for_replicas_to_agree(summary["topic"])  # the last victim may still be truncating
    cluster.down()
    compared, divergent = cluster.compare_replicas(summary["topic"])
    assert compared == PARTITIONS and divergent == {}, (
        f"replicas disagree on disk: {divergent}\n{cluster.replica_events()}"
    )


def _batch(
    *values: bytes, timestamp_ms: int | None = None, producer: tuple[int, int, int] = (-1, -1, -1)
) -> bytearray:
    producer_id, epoch, sequence = producer
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
    for value in values:
        builder.append(timestamp_ms if timestamp_ms is not None else int(time.time() * 1000), None, value)
    return builder.build()


@contextlib.asynccontextmanager
async def _data_client(cluster: MetadataCluster, broker_id: int) -> AsyncIterator[Any]:
    client = BrokerClient(cluster.node(broker_id).data_address)
    try:
        yield client
    finally:
        client.close()


@contextlib.asynccontextmanager
async def _grpc_stub(cluster: MetadataCluster, broker_id: int) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(cluster.node(broker_id).address) as channel:
        yield broker_pb2_grpc.BrokerStub(channel)


@pytest.mark.parametrize("transport", [_data_client, _grpc_stub], ids=["data-protocol", "grpc"])
def test_every_data_error_from_a_real_broker_leaves_the_log_unchanged(
    serving_cluster: MetadataCluster, transport: Any
) -> None:
    cluster, topic = serving_cluster, f"errors{transport.__name__}"
    with Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=20)) as admin:
        admin.create_topics([NewTopic(topic, 1, 3, {"max.message.bytes": "2000"})])[0].check()
        leader = wait_until(
            lambda: _leader(admin, topic), timeout_s=30, what=f"topic {topic!r} to have a leader"
        )

    async def scenario() -> None:
        async with transport(cluster, leader) as stub:
            good = await _produce(stub, bytes(_batch(b"ok")), topic)
            assert good.error == E.NONE, good
            end = await _log_end(stub, topic)

            corrupt = _batch(b"x")
            corrupt[CRC_START + 5] ^= 0xFF
            old_magic = _batch(b"x")
            old_magic[16] = 1
            cases = {
                E.CORRUPT_MESSAGE: bytes(corrupt),
                E.INVALID_RECORD: bytes(old_magic),
                E.MESSAGE_TOO_LARGE: bytes(_batch(b"v" * 3000)),
                E.INVALID_TIMESTAMP: bytes(
                    _batch(b"x", timestamp_ms=int(time.time() * 1000) + 2 * 3_600_000)
                ),
            }
            for code, payload in cases.items():
                result = await _produce(stub, payload, topic)
                assert result.error == code, (E.Name(code), result)
                assert result.message
                assert await _log_end(stub, topic) == end, f"{E.Name(code)} wrote to the log"
            unknown = await _produce(stub, bytes(_batch(b"x")), "no-such-topic")
            assert unknown.error == E.UNKNOWN_TOPIC_OR_PARTITION

            fetch = pb.FetchRequest(replica_id=-1, max_bytes=1 << 20)
            fetch.topics.add(name=topic).partitions.add(
                partition=0, fetch_offset=end + 10, partition_max_bytes=1 << 20
            )
            answer = (await stub.Fetch(fetch, timeout=10)).topics[0].partitions[0]
            assert answer.error == E.OFFSET_OUT_OF_RANGE

            bad = pb.ProduceRequest(acks=7, timeout_ms=1000)
            response = await stub.Produce(bad, timeout=10)
            assert response.status.error == E.INVALID_REQUEST and "acks" in response.status.message
            bad_fetch = pb.FetchRequest(replica_id=-1, max_bytes=-5)
            response = await stub.Fetch(bad_fetch, timeout=10)
            assert response.status.error == E.INVALID_REQUEST and "max_bytes" in response.status.message

            assert (await _produce(stub, bytes(_batch(b"still serving")), topic)).error == E.NONE
            assert await _log_end(stub, topic) == end + 1

            init = await stub.InitProducerId(
                pb.InitProducerIdRequest(producer_id=-1, producer_epoch=-1), timeout=10
            )
            assert init.status.error == E.NONE and init.producer_id >= 0 and init.producer_epoch == 0
            first = bytes(_batch(b"once", producer=(init.producer_id, 0, 0)))
            written = await _produce(stub, first, topic)
            assert written.error == E.NONE and written.base_offset == end + 1
            retried = await _produce(stub, first, topic)
            assert (retried.error, retried.base_offset) == (E.NONE, end + 1), "a retry gets its offset"
            for payload, code in (
                (_batch(b"gap", producer=(init.producer_id, 0, 5)), E.OUT_OF_ORDER_SEQUENCE_NUMBER),
                (_batch(b"new epoch", producer=(init.producer_id, 1, 3)), E.OUT_OF_ORDER_SEQUENCE_NUMBER),
            ):
                result = await _produce(stub, bytes(payload), topic)
                assert result.error == code and str(init.producer_id) in result.message, result
            assert (
                await _produce(stub, bytes(_batch(b"bumped", producer=(init.producer_id, 1, 0))), topic)
            ).error == E.NONE
            stale = await _produce(stub, bytes(_batch(b"stale", producer=(init.producer_id, 0, 1))), topic)
            assert stale.error == E.INVALID_PRODUCER_EPOCH
            assert await _log_end(stub, topic) == end + 3

    asyncio.run(scenario())


def test_frames_the_data_protocol_cannot_read_close_that_connection_only(
    serving_cluster: MetadataCluster,
) -> None:
    cluster = serving_cluster
    broker = cluster.nodes("broker")[0]
    host, _, port = broker.data_address.rpartition(":")

    async def raw(frame: bytes) -> bytes:
        """What the broker sends back before it closes the connection or 2 s pass."""
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(frame)
        try:
            return await asyncio.wait_for(reader.read(1 << 16), 2.0)
        except TimeoutError:
            return b"(still open)"
        finally:
            writer.close()

    async def scenario() -> None:
        unknown_api = struct.pack(">IHHI", 8, 999, 0, 7)
        answer = await raw(unknown_api)
        (length, correlation_id), body = struct.unpack_from(">II", answer), answer[8:]
        assert correlation_id == 7 and length == len(answer) - 4
        status = pb.MetadataResponse.FromString(body).status
        assert status.error == E.UNSUPPORTED_VERSION and "999" in status.message
        assert await raw(struct.pack(">I", REQUEST_FRAME_MAX_BYTES + 1)) == b""  # closed, nothing buffered
        assert await raw(struct.pack(">IH", 8, 1)) == b"(still open)"  # half a frame: waits for the rest
        assert await raw(struct.pack(">I", 3) + b"abc") == b""  # a frame shorter than a header: closed
        async with _data_client(cluster, broker.id) as client:
            metadata = await client.Metadata(pb.MetadataRequest(), timeout=10)
        assert metadata.status.error == E.NONE and len(metadata.brokers) == 3

    asyncio.run(scenario())


def _leader(admin: Admin, topic: str) -> int | None:
    description = admin.describe_topics([topic])[0]
    partitions = description.partitions
    if not partitions or partitions[0].leader < 0 or len(partitions[0].isr) < 3:
        return None
    return partitions[0].leader


async def _produce(stub: Any, payload: bytes, topic: str) -> pb.ProducePartitionResult:
    request = pb.ProduceRequest(acks=-1, timeout_ms=10_000)
    request.topics.add(name=topic).partitions.add(partition=0, records=payload)
    return (await stub.Produce(request, timeout=15)).topics[0].partitions[0]


async def _log_end(stub: Any, topic: str) -> int:
    request = pb.ListOffsetsRequest()
    request.topics.add(name=topic).partitions.add(partition=0, timestamp=-1)
    return (await stub.ListOffsets(request, timeout=10)).topics[0].partitions[0].offset
