"""``raftka perf produce|consume|e2e``: Kafka's producer-perf-test, consumer-perf-test and
end-to-end latency tool, against a running cluster.

The load runs in this process with raftka's own asyncio Producer and Consumer, so the
figures are what an application gets. The topic (``--topic``, default ``raftka-perf``)
is created if missing with ``--partitions``, ``--replication-factor`` and
``--min-insync-replicas``. With the local cluster, each run also reports the CPU
seconds every process spent per million records (this one included), read from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.consumer import AsyncConsumer
from raftka.client.errors import AdminError
from raftka.client.producer import AsyncProducer, RecordFuture
from raftka.client.types import NewTopic
from raftka.command import data_args, local, output
from raftka.command.addresses import bootstrap_addresses
from raftka.command.data_args import add_broker_options, broker_addresses, not_negative, positive
from raftka.command.errors import CliError
from raftka.command.tls_args import client_tls
from raftka.tools.perf import proc_cpu
from raftka.tools.perf.latency import LATENCY_SAMPLES_MAX, latency_summary

DEFAULT_TOPIC = "raftka-perf"
ACKS = {"all": -1, "1": 1, "0": 0}
_STAMP = struct.Struct(">q")  # e2e: the send time in ns, at the start of each value


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    produce = kinds.add_parser("produce", help="producer throughput and latency (kafka-producer-perf-test)")
    produce.add_argument("--records", type=positive, required=True, help="how many records to send")
    produce.add_argument("--record-size", type=positive, default=100, help="bytes per record value")
    produce.add_argument("--throughput", type=int, default=-1, help="records/s cap; -1: as fast as it goes")
    produce.add_argument("--acks", choices=sorted(ACKS), default="all")
    produce.add_argument("--batch-size", type=positive, default=256 * 1024, help="bytes per partition batch")
    produce.add_argument("--linger-ms", type=not_negative, default=5)
    produce.add_argument("--compression", default="none", choices=("none", "gzip", "snappy", "lz4", "zstd"))
    data_args.add_idempotence_option(produce)
    _topic_options(produce)
    produce.set_defaults(func=run_produce)

    consume = kinds.add_parser(
        "consume", help="consumer throughput from the beginning (kafka-consumer-perf-test)"
    )
    consume.add_argument("--records", type=positive, required=True, help="how many records to read")
    consume.add_argument("--timeout-s", type=float, default=60.0, help="give up if the topic has fewer")
    _topic_options(consume)
    consume.set_defaults(func=run_consume)

    e2e = kinds.add_parser("e2e", help="produce-to-consume latency at a fixed rate")
    e2e.add_argument("--rate", type=positive, default=10_000, help="records per second")
    e2e.add_argument("--duration", type=float, default=10.0, help="seconds of load")
    e2e.add_argument("--record-size", type=positive, default=100, help="bytes per record value (at least 8)")
    e2e.add_argument("--acks", choices=sorted(ACKS), default="all")
    data_args.add_idempotence_option(e2e)
    _topic_options(e2e)
    e2e.set_defaults(func=run_e2e)


def _topic_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", default=DEFAULT_TOPIC)
    parser.add_argument("--partitions", type=positive, default=6, help="if the topic is created")
    parser.add_argument("--replication-factor", type=positive, default=3, help="if the topic is created")
    parser.add_argument("--min-insync-replicas", type=positive, default=2, help="if the topic is created")
    parser.add_argument(
        "--bootstrap-controller", metavar="HOST:PORT,...", help="controllers, to create the topic"
    )
    add_broker_options(parser)


def ensure_topic(args: argparse.Namespace) -> None:
    topic = NewTopic(
        args.topic,
        args.partitions,
        args.replication_factor,
        {"min.insync.replicas": str(args.min_insync_replicas)},
    )
    addresses = bootstrap_addresses(args.bootstrap_controller, args.dir)
    with Admin(addresses, RetryPolicy(total_timeout_s=30), client_tls(args)) as admin:
        result = admin.create_topics([topic])[0]
    if result.error not in (None, "TOPIC_ALREADY_EXISTS"):
        raise AdminError(result.error, result.message)


class CpuMeter:
    """CPU seconds per million records of every local node, of this process and of any
    other process named in ``others`` (label -> pid, such as another broker under test)."""

    def __init__(self, args: argparse.Namespace, others: Mapping[str, int] | None = None) -> None:
        self._nodes = []
        if args.bootstrap_server is None:
            self._nodes = [n for n in local.load(local.resolve_dir(args.dir)).nodes if n.pid is not None]
        self._others = dict(others or {})
        self._before = self._sample()

    def _sample(self) -> dict[str, float]:
        samples = proc_cpu.sample(self._nodes) if self._nodes else {}
        samples.update({label: proc_cpu.cpu_seconds(pid) for label, pid in self._others.items()})
        samples["perf-client"] = proc_cpu.cpu_seconds(os.getpid())
        return samples

    def per_million(self, records: int) -> dict[str, float]:
        after = self._sample()
        return {k: round((after[k] - self._before[k]) * 1e6 / max(records, 1), 2) for k in self._before}


# produce ----------------------------------------------------------------------------------


def run_produce(args: argparse.Namespace) -> int:
    ensure_topic(args)
    result = asyncio.run(measure_produce(args))
    print_result(args, result, "produce")
    return 0 if result["errors"] == 0 else 1


async def measure_produce(args: argparse.Namespace) -> dict[str, Any]:
    """Kafka's producer-perf-test: send as fast as allowed, latency per sampled record
    (send to acknowledgement), errors from the producer's own counts."""
    producer = AsyncProducer(
        broker_addresses(args),
        acks=ACKS[args.acks],
        batch_size=args.batch_size,
        linger_ms=args.linger_ms,
        compression=args.compression,
        enable_idempotence=data_args.idempotence(args),
        tls=client_tls(args),
    )
    value = os.urandom(args.record_size)
    sample_every = max(1, args.records // LATENCY_SAMPLES_MAX)
    latencies_ms: list[float] = []
    errors: list[str] = []
    clock = time.perf_counter

    def sampled(sent_at: float) -> Callable[[RecordFuture], None]:
        def record(future: RecordFuture) -> None:
            if future.exception() is not None:
                errors.append(str(future.exception()))
            else:
                latencies_ms.append((clock() - sent_at) * 1000)

        return record

    try:
        await producer.wait_ready(args.topic)
        cpu = CpuMeter(args)
        start = clock()
        for i in range(args.records):
            if args.throughput > 0:
                ahead_s = i / args.throughput - (clock() - start)
                if ahead_s > 0.001:
                    await asyncio.sleep(ahead_s)
            future = await producer.send(args.topic, value)
            if i % sample_every == 0:
                future.add_done_callback(sampled(clock()))
        await producer.flush()
        elapsed = clock() - start
        cpu_per_million = cpu.per_million(args.records)
    finally:
        await producer.close()
    failed = producer.failed_records
    return {
        "records": args.records,
        "record_size": args.record_size,
        "acks": args.acks,
        "idempotent": producer.idempotent,
        "records_per_s": round(args.records / elapsed),
        "mb_per_s": round(args.records * args.record_size / elapsed / 1e6, 2),
        **latency_summary(latencies_ms),
        "latency_samples": len(latencies_ms),
        "errors": failed,
        "first_error": errors[0] if errors else (f"{failed} records failed" if failed else None),
        "cpu_s_per_million_records": cpu_per_million,
    }


# consume ----------------------------------------------------------------------------------


def run_consume(args: argparse.Namespace) -> int:
    result = asyncio.run(measure_consume(args))
    print_result(args, result, "consume")
    return 0 if result["records"] >= args.records else 1


async def measure_consume(args: argparse.Namespace) -> dict[str, Any]:
    consumer = AsyncConsumer(
        broker_addresses(args),
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 << 20,
        tls=client_tls(args),
    )
    records = 0
    size = 0
    try:
        await consumer.assign_topic(args.topic)
        cpu = CpuMeter(args)
        start = time.perf_counter()
        deadline = start + args.timeout_s
        while records < args.records and time.perf_counter() < deadline:
            batch = await consumer.poll(500, 10_000)
            records += len(batch)
            size += sum(len(r.value or b"") for r in batch)
        elapsed = time.perf_counter() - start
        cpu_per_million = cpu.per_million(records)
    finally:
        await consumer.close()
    return {
        "records": records,
        "seconds": round(elapsed, 2),
        "records_per_s": round(records / elapsed),
        "mb_per_s": round(size / elapsed / 1e6, 2),
        "cpu_s_per_million_records": cpu_per_million,
    }


# e2e --------------------------------------------------------------------------------------


def run_e2e(args: argparse.Namespace) -> int:
    if args.record_size < _STAMP.size:
        raise CliError(f"--record-size: at least {_STAMP.size} bytes (the send time rides in the value)")
    if args.duration <= 0:
        raise CliError(f"--duration: expected a positive number of seconds, got {args.duration:g}")
    ensure_topic(args)
    result = asyncio.run(measure_e2e(args))
    print_result(args, result, "e2e")
    return 0 if result["errors"] == 0 else 1


async def measure_e2e(args: argparse.Namespace) -> dict[str, Any]:
    addresses = broker_addresses(args)
    tls = client_tls(args)
    producer = AsyncProducer(
        addresses, acks=ACKS[args.acks], linger_ms=0, enable_idempotence=data_args.idempotence(args), tls=tls
    )
    consumer = AsyncConsumer(addresses, auto_offset_reset="latest", fetch_max_wait_ms=100, tls=tls)
    padding = os.urandom(args.record_size - _STAMP.size)
    total = int(args.rate * args.duration)
    latencies_ms: list[float] = []
    errors = 0
    try:
        await producer.wait_ready(args.topic)
        await consumer.assign_topic(args.topic)
        await consumer.seek_to_end()
        await consumer.poll(0, 1)  # positions resolved before the first send

        async def read_all() -> None:
            while len(latencies_ms) < total:
                for record in await consumer.poll(100, 10_000):
                    sent_ns = _STAMP.unpack_from(record.value)[0]
                    latencies_ms.append((time.perf_counter_ns() - sent_ns) / 1e6)

        reader = asyncio.create_task(read_all())
        cpu = CpuMeter(args)
        start = time.perf_counter()
        futures = []
        for i in range(total):
            ahead_s = i / args.rate - (time.perf_counter() - start)
            if ahead_s > 0.0005:
                await asyncio.sleep(ahead_s)
            futures.append(await producer.send(args.topic, _STAMP.pack(time.perf_counter_ns()) + padding))
        await producer.flush()
        errors = sum(1 for f in futures if f.exception() is not None)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader, timeout=30)
        cpu_per_million = cpu.per_million(total)
    finally:
        await producer.close()
        await consumer.close()
    return {
        "rate": args.rate,
        "idempotent": producer.idempotent,
        "sent": total,
        "received": len(latencies_ms),
        **latency_summary(latencies_ms),
        "errors": errors,
        "cpu_s_per_million_records": cpu_per_million,
    }


def print_result(args: argparse.Namespace, result: dict[str, Any], kind: str) -> None:
    if args.output == "json":
        print(output.to_json(result))
        return
    cpu = result.pop("cpu_s_per_million_records")
    print(output.fields([(k.replace("_", " "), v) for k, v in result.items()]))
    print(f"CPU seconds per million records ({kind}):")
    print(output.table(["PROCESS", "CPU S"], sorted(cpu.items())))
