"""``raftka perf metadata``: closed-loop offset commits against the active controller.

The load has the shape of the etcd anchor's ``throughput`` mode, so the two can run
side by side on one machine: one grpc.aio channel, N requests kept in flight, each an
``OffsetCommit`` of one partition with a 100-byte metadata string (one record, one raft
batch), a warm-up before measuring, latency per request, nearest-rank percentiles. The
hot loop uses the raw gRPC stub, not ``raftka.client.admin``: retries and backoff there would
be measured instead of the server. A failed request is counted, not timed.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from raftka.command import local, output  # perf registers this module: import it whole
from raftka.command.addresses import bootstrap_addresses
from raftka.command.errors import CliError
from raftka.command.tls_args import add_tls_options, client_tls
from raftka.rpc.stubs import NotControllerError, Stubs, controller_answer
from raftka.security.tls import TlsFiles
from raftka.tools.perf import perf, proc_cpu
from raftka.tools.perf.latency import percentile
from raftka.v1 import controller_pb2, controller_pb2_grpc

E = controller_pb2.ErrorCode
TOPIC = "raftka-perf-metadata"
GROUP_PREFIX = "raftka-perf-"
METADATA = "m" * 100
REQUEST_TIMEOUT_S = 10.0  # as the etcd anchor's
FIND_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 1.0
PROBE_INTERVAL_S = 0.1


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = kinds.add_parser(
        "metadata", help="offset-commit throughput/latency at the active controller of a running cluster"
    )
    perf.add_load_options(parser, "requests")
    parser.add_argument(
        "--bootstrap-controller",
        metavar="HOST:PORT,...",
        help="controllers to ask (default: the local cluster from 'raftka cluster up')",
    )
    parser.add_argument("--dir", type=Path, help="local cluster directory (default: .raftka/local)")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="also report CPU ms per commit of every node of the local cluster (from /proc)",
    )
    add_tls_options(parser)
    parser.set_defaults(func=run_metadata)


def run_metadata(args: argparse.Namespace) -> int:
    levels = perf.load_levels(args)
    if args.cpu and args.bootstrap_controller:
        raise CliError(
            "--cpu reads the local cluster's processes: it cannot be used with --bootstrap-controller"
        )
    addresses = bootstrap_addresses(args.bootstrap_controller, args.dir)
    cpu = None
    if args.cpu:
        nodes = local.load(local.resolve_dir(args.dir)).nodes
        cpu = functools.partial(proc_cpu.sample, nodes)
    results = asyncio.run(measure(addresses, levels, args.duration, args.warmup, cpu, client_tls(args)))
    if args.output == "json":
        print(output.to_json(results))
        return 0
    rows = [
        (r["concurrency"], f"{r['ops_per_s']:,.0f}", r["p50_ms"], r["p99_ms"], r["errors"]) for r in results
    ]
    print(output.table(["IN FLIGHT", "OPS/S", "P50 MS", "P99 MS", "ERRORS"], rows))
    print(f"Active controller: {results[0]['controller']}")
    if cpu is not None:
        labels = list(results[0]["cpu_ms_per_op"])
        rows = [(r["concurrency"], *(r["cpu_ms_per_op"][label] for label in labels)) for r in results]
        print("CPU ms per commit:")
        print(output.table(["IN FLIGHT", *(label.upper() for label in labels)], rows))
    return 0


CpuSampler = Callable[[], dict[str, float]]


async def measure(
    addresses: Sequence[str],
    levels: Sequence[int],
    duration_s: float,
    warmup_s: float,
    cpu: CpuSampler | None = None,
    tls: TlsFiles | None = None,
) -> list[dict[str, Any]]:
    stubs = Stubs(controller_pb2_grpc.ControllerStub, tls)
    try:
        active = await find_active(stubs, addresses, FIND_TIMEOUT_S)
        await ensure_topic(stubs[active])
        return [
            {**await closed_loop(stubs[active], n, duration_s, warmup_s, cpu), "controller": active}
            for n in levels
        ]
    finally:
        await stubs.close()


async def find_active(
    stubs: Stubs[controller_pb2_grpc.ControllerStub], addresses: Sequence[str], timeout_s: float
) -> str:
    """The address whose DescribeCluster succeeds; a standby's NOT_CONTROLLER hint is
    followed. Polls until ``timeout_s``, so a run started mid-election waits it out."""
    deadline = time.monotonic() + timeout_s
    problems: dict[str, str] = {}
    while True:
        candidates = list(addresses)
        for address in candidates:
            try:
                response = controller_answer(
                    address,
                    await stubs[address].DescribeCluster(
                        controller_pb2.DescribeClusterRequest(), timeout=PROBE_TIMEOUT_S
                    ),
                )
            except grpc.aio.AioRpcError as e:
                problems[address] = e.code().name
                continue
            except NotControllerError as e:
                problems[address] = "NOT_CONTROLLER"
                if e.redirect and e.redirect not in candidates:
                    candidates.append(e.redirect)  # iterated in this same pass
                continue
            if response.status.error == E.NONE:
                return address
            problems[address] = E.Name(response.status.error)
        if time.monotonic() >= deadline:
            seen = ", ".join(f"{a}: {p}" for a, p in problems.items())
            raise CliError(f"no active controller found within {timeout_s:g} s ({seen})")
        await asyncio.sleep(PROBE_INTERVAL_S)


async def ensure_topic(stub: controller_pb2_grpc.ControllerStub) -> None:
    """The one-partition topic the commits are for; one left by an earlier run is fine."""
    request = controller_pb2.CreateTopicsRequest(
        topics=[controller_pb2.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1)]
    )
    response = await stub.CreateTopics(request, timeout=REQUEST_TIMEOUT_S)
    if response.status.error != E.NONE:
        raise CliError(f"creating topic {TOPIC}: {E.Name(response.status.error)}: {response.status.message}")
    result = response.topics[0]
    if result.error not in (E.NONE, E.TOPIC_ALREADY_EXISTS):
        raise CliError(f"creating topic {TOPIC}: {E.Name(result.error)}: {result.message}")


def commit_request(group: str, offset: int) -> controller_pb2.OffsetCommitRequest:
    partition = controller_pb2.OffsetCommitPartition(partition=0, offset=offset, metadata=METADATA)
    return controller_pb2.OffsetCommitRequest(
        group=group, topics=[controller_pb2.OffsetCommitTopic(topic=TOPIC, partitions=[partition])]
    )


async def closed_loop(
    stub: controller_pb2_grpc.ControllerStub,
    concurrency: int,
    duration_s: float,
    warmup_s: float,
    cpu: CpuSampler | None = None,
) -> dict[str, Any]:
    latencies_s: list[float] = []
    errors: dict[str, int] = {}
    measuring = False
    stop = False

    async def worker(number: int) -> None:
        group = f"{GROUP_PREFIX}{number}"
        offset = 0
        while not stop:
            offset += 1
            start = time.perf_counter()
            try:
                response = await stub.OffsetCommit(commit_request(group, offset), timeout=REQUEST_TIMEOUT_S)
                code = response.status.error or (
                    response.partitions[0].error if response.partitions else E.NONE
                )
                problem = E.Name(code) if code != E.NONE else None
            except grpc.aio.AioRpcError as e:
                problem = e.code().name
            if problem is not None:
                errors[problem] = errors.get(problem, 0) + 1
            elif measuring:
                latencies_s.append(time.perf_counter() - start)

    tasks = [asyncio.create_task(worker(n)) for n in range(concurrency)]
    try:
        await asyncio.sleep(warmup_s)
        cpu_before = cpu() if cpu else {}
        measuring = True
        started = time.perf_counter()
        await asyncio.sleep(duration_s)
        measuring = False
        elapsed_s = time.perf_counter() - started
        cpu_after = cpu() if cpu else {}
    finally:
        stop = True
        await asyncio.gather(*tasks)
    if not latencies_s:
        raise CliError(f"no offset commit succeeded at concurrency {concurrency}; errors: {errors}")
    latencies_s.sort()
    cpu_ms = (
        {"cpu_ms_per_op": proc_cpu.per_operation_ms(cpu_before, cpu_after, len(latencies_s))} if cpu else {}
    )
    return {
        **cpu_ms,
        "concurrency": concurrency,
        "ops_per_s": round(len(latencies_s) / elapsed_s, 1),
        "p50_ms": round(percentile(latencies_s, 50) * 1e3, 2),
        "p99_ms": round(percentile(latencies_s, 99) * 1e3, 2),
        "ops": len(latencies_s),
        "errors": sum(errors.values()),
        "error_codes": errors,
    }
