"""SIGKILL the active controller, round after round, under a stream of topic creates,
deletes and describes and of offset commits and fetches from 8 concurrent clients.

What must hold afterwards: the recorded history is linearizable (every acknowledged
operation is visible to the reads that follow it, nothing is undone, nothing happens
twice), checked per topic name and per committed-offset slot by
``tests.linearizability``; and the metadata log holds every acknowledged write exactly
once and any ambiguous one at most once. A request that timed out or was answered
``NOT_CONTROLLER`` (which a controller that lost its lead after appending also answers)
is ambiguous: it may or may not have taken effect.

Clients talk to the controllers through raw gRPC stubs, one attempt per recorded
operation: a retrying client would turn one create into two attempts and report the
second one's TOPIC_ALREADY_EXISTS for the first one's success. After an error a client
asks which controller is active (DescribeCluster, not recorded) before it writes again,
so a failover costs each client about one ambiguous operation, not one per retry.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from raftka.metadata.dump import iter_metadata_dump
from raftka.tools.chaos import netns
from raftka.v1 import controller_pb2
from tests.integration.metadata_cluster import Controllers, MetadataCluster
from tests.integration.netns_cluster import NetnsCluster, netns_cluster
from tests.linearizability.checker import check
from tests.linearizability.history import HistoryRecorder
from tests.linearizability.models import (
    CommitOffset,
    CreateTopic,
    DeleteTopic,
    FetchOffset,
    OffsetModel,
    TopicExists,
    TopicModel,
)

pytestmark = [pytest.mark.integration, pytest.mark.long]  # make test-long

E = controller_pb2.ErrorCode
CLIENTS = 8
ROUNDS = 4
NAMES = tuple(f"lin-{i}" for i in range(6))
OFFSETS_TOPIC = "lin-offsets"
OFFSET_PARTITIONS = 3
GROUP = "lin"
OP_TIMEOUT_S = 2.0
FIND_TIMEOUT_S = 20.0
KINDS = ("create", "delete", "describe", "commit", "fetch")
KIND_WEIGHTS = (2, 2, 1.5, 3, 1.5)
PROGRESS_OPS = 150  # definite answers between kills, and after each kill
PROGRESS_TIMEOUT_S = 30.0
SEED = 20240607


@dataclass
class Run:
    """Both histories, and what the log check needs: which writes were acked or ambiguous."""

    topics: HistoryRecorder = field(default_factory=HistoryRecorder)
    offsets: HistoryRecorder = field(default_factory=HistoryRecorder)
    definite: int = 0  # operations with a definite answer, for progress
    outcomes: Counter[str] = field(default_factory=Counter)
    acked_creates: Counter[str] = field(default_factory=Counter)
    ambiguous_creates: Counter[str] = field(default_factory=Counter)
    acked_commits: set[int] = field(default_factory=set)
    sent_commits: set[int] = field(default_factory=set)
    ambiguous_writes: int = 0


class Ambiguous(Exception):
    """The request may have taken effect: a timeout, a dropped connection, NOT_CONTROLLER."""


class Rejected(Exception):
    """A definite answer outside the model (e.g. INVALID_REPLICATION_FACTOR): no effect."""


KEEP_EVERY_RECORD = {"snapshot_interval_records": 10_000_000}


def test_active_controller_sigkill_under_concurrent_clients_is_linearizable(tmp_path: Path) -> None:
    cluster = MetadataCluster(tmp_path / "cluster")
    try:
        cluster.up_configured(controller__metadata=KEEP_EVERY_RECORD)
        run = asyncio.run(asyncio.wait_for(scenario(cluster, kill_active_controller), 300))
        cluster.down()
    finally:
        cluster.close()
    check_run(cluster, run)


def test_active_controller_cut_off_its_peers_under_concurrent_clients_is_linearizable(tmp_path: Path) -> None:
    """The same, with the active controller cut off the other controllers (iptables, in its
    own network namespace) instead of killed: the clients still reach it, so whatever it
    answers alone, reads included, must not contradict what the new majority does."""
    with netns_cluster(tmp_path / "cluster", controller__metadata=KEEP_EVERY_RECORD) as cluster:
        run = asyncio.run(asyncio.wait_for(scenario(cluster, partition_active_controller), 300))
        cluster.down()
    check_run(cluster, run)


def check_run(cluster: MetadataCluster, run: Run) -> None:
    """Both histories linearizable, and the metadata logs hold what check_logs says."""
    print(f"outcomes: {dict(run.outcomes)}")
    assert run.ambiguous_writes > 0, "no write was in flight at a fault: the faults were not exercised"
    for model, history in ((TopicModel(), run.topics), (OffsetModel(), run.offsets)):
        result = check(model, history.operations())
        assert result.ok, result.summary()
    check_logs([Path(node.data_dir) for node in cluster.nodes("controller")], run)


Fault = Callable[[Any, Controllers, Run], Awaitable[None]]


async def scenario(cluster: MetadataCluster, fault: Fault) -> Run:
    controllers = Controllers(cluster.controller_addresses())
    run = Run()
    stop = asyncio.Event()
    try:
        await create_offsets_topic(controllers)
        clients = [asyncio.create_task(client(n, controllers, run, stop)) for n in range(CLIENTS)]
        try:
            for _ in range(ROUNDS):
                await fault(cluster, controllers, run)
        finally:
            stop.set()
            await asyncio.gather(*clients)
        await final_reads(controllers, run)
    finally:
        await controllers.close()
    return run


async def create_offsets_topic(controllers: Controllers) -> None:
    stub = controllers.stubs[await controllers.active(FIND_TIMEOUT_S)]
    topic = controller_pb2.CreatableTopic(
        name=OFFSETS_TOPIC, num_partitions=OFFSET_PARTITIONS, replication_factor=3
    )
    response = await stub.CreateTopics(controller_pb2.CreateTopicsRequest(topics=[topic]), timeout=10)
    assert (response.status.error, response.topics[0].error) == (E.NONE, E.NONE), response


async def kill_active_controller(cluster: MetadataCluster, controllers: Controllers, run: Run) -> None:
    """Let the clients make progress, SIGKILL the active controller, see progress at the
    survivors, then restart it (``cluster up``) and let it catch up."""
    await wait_progress(run, PROGRESS_OPS)
    address = await controllers.active(FIND_TIMEOUT_S)
    victim = next(n for n in cluster.nodes("controller") if n.address == address)
    await asyncio.to_thread(cluster.kill, victim.id)
    await wait_progress(run, PROGRESS_OPS)
    await asyncio.to_thread(cluster.up)


async def partition_active_controller(cluster: NetnsCluster, controllers: Controllers, run: Run) -> None:
    """Let the clients make progress, cut the active controller off the other controllers,
    see progress at the survivors, then heal and let it catch up."""
    await wait_progress(run, PROGRESS_OPS)
    address = await controllers.active(FIND_TIMEOUT_S)
    victim = next(n for n in cluster.nodes("controller") if n.address == address)
    peers = [n.address.rpartition(":")[0] for n in cluster.nodes("controller") if n.id != victim.id]
    await asyncio.to_thread(netns.partition, victim.netns, peers)
    try:
        await wait_progress(run, PROGRESS_OPS)
    finally:
        await asyncio.to_thread(netns.heal, victim.netns)


async def wait_progress(run: Run, ops: int) -> None:
    target = run.definite + ops
    deadline = time.monotonic() + PROGRESS_TIMEOUT_S
    while run.definite < target:
        assert time.monotonic() < deadline, f"clients made no progress: {dict(run.outcomes)}"
        await asyncio.sleep(0.02)


async def client(number: int, controllers: Controllers, run: Run, stop: asyncio.Event) -> None:
    """Random operations, one at a time; after any error, find the active controller again."""
    rng = random.Random(SEED + number)
    address: str | None = None
    sequence = 0
    while not stop.is_set():
        if address is None:
            address = await controllers.active(FIND_TIMEOUT_S)
        stub = controllers.stubs[address]
        sequence += 1
        ok = await one_operation(stub, rng, number, number * 1_000_000 + sequence, run)
        if not ok:
            address = None


async def one_operation(stub: Any, rng: random.Random, number: int, value: int, run: Run) -> bool:
    """One recorded operation; False if its answer was not definite."""
    name = rng.choice(NAMES)
    partition = rng.randrange(OFFSET_PARTITIONS)
    kind = rng.choices(KINDS, weights=KIND_WEIGHTS)[0]
    recorder = run.offsets if kind in ("commit", "fetch") else run.topics
    op_input: Any
    call: Coroutine[Any, Any, Any]  # not started before the operation is invoked
    if kind == "create":
        op_input, call = CreateTopic(name), create(stub, name)
    elif kind == "delete":
        op_input, call = DeleteTopic(name), delete(stub, name)
    elif kind == "describe":
        op_input, call = TopicExists(name), exists(stub, name)
    elif kind == "commit":
        op_input, call = CommitOffset(GROUP, OFFSETS_TOPIC, partition, value), commit(stub, partition, value)
        run.sent_commits.add(value)
    else:
        op_input, call = FetchOffset(GROUP, OFFSETS_TOPIC, partition), fetch(stub, partition)
    token = recorder.invoke(number, op_input)
    try:
        output = await call
    except Ambiguous as e:
        run.outcomes[f"{kind} {e}"] += 1
        if kind in ("describe", "fetch"):
            recorder.discard(token)  # a read that got no answer says nothing
        else:
            recorder.ambiguous(token)
            run.ambiguous_writes += 1
            run.ambiguous_creates[name] += kind == "create"
        return False
    except Rejected as e:
        recorder.discard(token)
        run.outcomes[f"{kind} {e}"] += 1
        run.definite += 1
        return True
    recorder.complete(token, output)
    run.outcomes[f"{kind} {'ok' if kind == 'fetch' else output}"] += 1
    run.definite += 1
    run.acked_creates[name] += kind == "create" and output == "NONE"
    if kind == "commit":
        run.acked_commits.add(value)
    return True


async def rpc(method: Any, request: Any) -> Any:
    """Call; a transport error or a status other than NONE is ambiguous."""
    try:
        response = await method(request, timeout=OP_TIMEOUT_S)
    except grpc.aio.AioRpcError as e:
        raise Ambiguous(e.code().name) from None
    if response.status.error != E.NONE:
        raise Ambiguous(E.Name(response.status.error))
    return response


def topic_outcome(error: int, allowed: tuple[int, ...]) -> str:
    if error not in allowed:
        raise Rejected(E.Name(error))
    return E.Name(error)


async def create(stub: Any, name: str) -> str:
    topic = controller_pb2.CreatableTopic(name=name, num_partitions=1, replication_factor=1)
    response = await rpc(stub.CreateTopics, controller_pb2.CreateTopicsRequest(topics=[topic]))
    return topic_outcome(response.topics[0].error, (E.NONE, E.TOPIC_ALREADY_EXISTS))


async def delete(stub: Any, name: str) -> str:
    response = await rpc(stub.DeleteTopics, controller_pb2.DeleteTopicsRequest(names=[name]))
    return topic_outcome(response.topics[0].error, (E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION))


async def exists(stub: Any, name: str) -> bool:
    response = await rpc(stub.DescribeTopics, controller_pb2.DescribeTopicsRequest(names=[name]))
    return topic_outcome(response.topics[0].error, (E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION)) == "NONE"


async def commit(stub: Any, partition: int, value: int) -> str:
    entry = controller_pb2.OffsetCommitPartition(partition=partition, offset=value)
    request = controller_pb2.OffsetCommitRequest(
        group=GROUP, topics=[controller_pb2.OffsetCommitTopic(topic=OFFSETS_TOPIC, partitions=[entry])]
    )
    response = await rpc(stub.OffsetCommit, request)
    return topic_outcome(response.partitions[0].error, (E.NONE,))


async def fetch(stub: Any, partition: int) -> int:
    wanted = controller_pb2.TopicPartitions(topic=OFFSETS_TOPIC, partitions=[partition])
    response = await rpc(stub.OffsetFetch, controller_pb2.OffsetFetchRequest(group=GROUP, topics=[wanted]))
    (fetched,) = response.offsets
    topic_outcome(fetched.error, (E.NONE,))
    return fetched.offset


async def final_reads(controllers: Controllers, run: Run) -> None:
    """Read every name and every offset slot once more, after all the faults: each read
    is part of the history, so an acknowledged write that was lost fails the check."""
    reads: list[tuple[HistoryRecorder, Any, Callable[[Any], Awaitable[Any]]]] = [
        (run.topics, TopicExists(name), lambda stub, name=name: exists(stub, name)) for name in NAMES
    ] + [
        (run.offsets, FetchOffset(GROUP, OFFSETS_TOPIC, p), lambda stub, p=p: fetch(stub, p))
        for p in range(OFFSET_PARTITIONS)
    ]
    for recorder, op_input, call in reads:
        deadline = time.monotonic() + FIND_TIMEOUT_S
        while True:
            stub = controllers.stubs[await controllers.active(FIND_TIMEOUT_S)]
            token = recorder.invoke(-1, op_input)
            try:
                recorder.complete(token, await call(stub))
                break
            except (Ambiguous, Rejected):
                recorder.discard(token)
                assert time.monotonic() < deadline, f"no answer to the final read {op_input}"


def check_logs(data_dirs: list[Path], run: Run) -> None:
    """In every controller's metadata log: no commit and no create applied twice, nothing
    nobody sent. In the longest one (the others may trail by the last few batches):
    every acknowledged write."""
    counts = {data_dir: count_records(data_dir) for data_dir in data_dirs}
    for data_dir, (commits, creates) in counts.items():
        twice = sorted(v for v, n in commits.items() if n > 1)
        assert not twice, f"{data_dir}: commits applied twice: {twice[:10]}"
        invented = sorted(set(commits) - run.sent_commits)
        assert not invented, f"{data_dir}: commits nobody sent: {invented[:10]}"
        for name in NAMES:
            most = run.acked_creates[name] + run.ambiguous_creates[name]
            assert creates[name] <= most, f"{data_dir}: {name} created {creates[name]} times, sent {most}"
    longest = max(counts, key=lambda d: sum(counts[d][0].values()) + sum(counts[d][1].values()))
    commits, creates = counts[longest]
    missing = sorted(run.acked_commits - set(commits))
    assert not missing, f"{longest}: acknowledged commits not in the log: {missing[:10]}"
    for name in NAMES:
        assert creates[name] >= run.acked_creates[name], (
            f"{longest}: {name} created {creates[name]} times, {run.acked_creates[name]} acknowledged"
        )


def count_records(data_dir: Path) -> tuple[Counter[int], Counter[str]]:
    """(how often each committed offset value occurs, how often each name is created)."""
    commits: Counter[int] = Counter()
    creates: Counter[str] = Counter()
    for line in iter_metadata_dump(data_dir):
        assert "snapshot" not in line, f"{data_dir}: a snapshot replaced the log; raise the interval"
        if line["type"] == "OFFSET_COMMIT_RECORD" and line["data"]["group"] == GROUP:
            commits[int(line["data"]["offset"])] += 1
        elif line["type"] == "TOPIC_RECORD" and line["data"]["name"] in NAMES:
            creates[line["data"]["name"]] += 1
    return commits, creates
