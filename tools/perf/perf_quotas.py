"""``raftka perf quotas``: does a client quota keep a greedy producer from taking a
broker's bandwidth from the rest? (issue 20's measure: with one greedy producer at 10x its
quota, a well-behaved producer's p99 stays within 1.5x its solo p99.)

Through Kafka's protocol with librdkafka, as ``perf kafka``: it sets ``producer_byte_rate``
``--quota-bytes`` for the greedy producer's client id (AlterClientQuotas on a broker),
then runs the well-behaved producer (client id ``raftka-perf-steady``, ``--steady-rate``
records a second, every record's latency kept) alone for ``--duration`` seconds, and again
as long beside the greedy one (client id ``raftka-perf-greedy``), which offers
``--greedy-factor`` times its quota. It prints both p99s and their ratio, and the bytes a
second the greedy producer got through (near its quota if the quota holds); the quota is
removed at the end. The topic is created as ``perf kafka`` creates it.
"""

from __future__ import annotations

import argparse
import os
import ssl
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from kafka.protocol.admin import AlterClientQuotasRequest, AlterClientQuotasResponse

from raftka.command import output
from raftka.command.data_args import positive
from raftka.command.errors import CliError
from raftka.command.tls_args import client_tls
from raftka.tools.perf import kafka_request, perf_kafka
from raftka.tools.perf.latency import latency_summary

DEFAULT_TOPIC = "raftka-perf-quotas"
STEADY, GREEDY = "raftka-perf-steady", "raftka-perf-greedy"
GREEDY_QUEUE_KBYTES = 16_384  # librdkafka's queue for the greedy producer: it waits, not hoards


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    quotas = kinds.add_parser(
        "quotas",
        help="a well-behaved producer's p99 alone and beside a greedy one held by its quota (librdkafka)",
    )
    quotas.add_argument(
        "--quota-bytes", type=positive, default=1_048_576, help="the greedy producer's producer_byte_rate"
    )
    quotas.add_argument(
        "--greedy-factor", type=positive, default=10, help="the greedy producer offers this times its quota"
    )
    quotas.add_argument(
        "--steady-rate",
        type=positive,
        default=200,
        help="the well-behaved producer's records/s (default 200)",
    )
    quotas.add_argument("--record-size", type=positive, default=1_000, help="bytes per record (default 1000)")
    quotas.add_argument("--duration", type=float, default=30.0, help="seconds of each run (default 30)")
    quotas.add_argument("--acks", choices=perf_kafka.ACKS, default="all", help="default all")
    perf_kafka.topic_options(quotas)
    quotas.set_defaults(func=run_quotas, topic=DEFAULT_TOPIC)


def run_quotas(args: argparse.Namespace) -> int:
    perf_kafka.check_topic(args.topic)
    if not args.duration > 0:
        raise CliError(f"--duration: expected a positive number of seconds, got {args.duration:g}")
    if args.record_size > perf_kafka.RECORD_SIZE_MAX:
        raise CliError(f"--record-size: at most {perf_kafka.RECORD_SIZE_MAX} bytes, got {args.record_size}")
    result = measure(args)
    if args.output == "json":
        print(output.to_json(result))
    else:
        solo, beside = result["steady_solo"], result["steady_beside_greedy"]
        rows = [
            ("well-behaved p99 alone (ms)", solo["p99_ms"]),
            ("well-behaved p99 beside the greedy one (ms)", beside["p99_ms"]),
            ("ratio (goal: at most 1.5)", result["p99_ratio"]),
            ("greedy producer offered (bytes/s)", result["greedy_offered_bytes_per_s"]),
            ("greedy producer got through (bytes/s)", result["greedy_bytes_per_s"]),
            ("its quota (bytes/s)", result["quota_bytes_per_s"]),
        ]
        print("\n".join(f"{name}: {value}" for name, value in rows))
    failed = result["steady_solo"]["failed"] + result["steady_beside_greedy"]["failed"]
    return 0 if failed == 0 else 1


def measure(args: argparse.Namespace) -> dict[str, Any]:
    ck = perf_kafka._confluent_kafka()
    bootstrap = perf_kafka.kafka_bootstrap(args)
    config = {
        "bootstrap.servers": bootstrap,
        "acks": args.acks,
        **perf_kafka.ssl_properties(args),
        **perf_kafka.client_properties(args.config),
    }
    partitions = perf_kafka.ensure_topic(bootstrap, args)
    value = os.urandom(args.record_size)
    tls = client_tls(args)
    alter_client_quota(bootstrap, tls.client_ssl() if tls else None, GREEDY, args.quota_bytes)
    try:
        solo = _steady(ck, config, args, partitions, value)
        greedy = _Greedy(ck, config, args, partitions, value)
        greedy.start()
        try:
            beside = _steady(ck, config, args, partitions, value)
        finally:
            greedy.stop()
    finally:
        alter_client_quota(bootstrap, tls.client_ssl() if tls else None, GREEDY, None)
    ratio = beside["p99_ms"] / solo["p99_ms"] if solo["p99_ms"] > 0 else 0.0
    return {
        "bootstrap": bootstrap,
        "topic": args.topic,
        "quota_bytes_per_s": args.quota_bytes,
        "greedy_offered_bytes_per_s": args.quota_bytes * args.greedy_factor,
        "greedy_bytes_per_s": round(greedy.bytes_per_s, 1),
        "steady_solo": solo,
        "steady_beside_greedy": beside,
        "p99_ratio": round(ratio, 3),
    }


def _steady(ck: Any, config: dict[str, Any], args: argparse.Namespace, partitions: int, value: bytes) -> dict:
    """The well-behaved producer for ``--duration``: its latency summary and failures."""
    deliveries = perf_kafka.Deliveries(sample_every=1)
    producer = perf_kafka._client(ck.Producer, config | {"client.id": STEADY, "on_delivery": deliveries})
    try:
        perf_kafka.warm_up(producer, args.topic, partitions, value)
        records = max(1, round(args.steady_rate * args.duration))
        run = SimpleNamespace(records=records, throughput=args.steady_rate, topic=args.topic)
        perf_kafka.send(producer, run, value)  # type: ignore[arg-type]
    finally:
        perf_kafka._close(producer)
    return {
        **latency_summary(deliveries.latencies_ms),
        "records": deliveries.delivered,
        "failed": deliveries.failed,
    }


@dataclass
class _Delivered:
    bytes: int = 0

    def __call__(self, error: Any, message: Any) -> None:
        if error is None:
            self.bytes += len(message.value() or b"")


class _Greedy:
    """The greedy producer on a thread of its own, offering ``--greedy-factor`` x its quota."""

    def __init__(
        self, ck: Any, config: dict[str, Any], args: argparse.Namespace, partitions: int, value: bytes
    ):
        self._delivered = _Delivered()
        self._producer = perf_kafka._client(
            ck.Producer,
            config
            | {
                "client.id": GREEDY,
                "on_delivery": self._delivered,
                "queue.buffering.max.kbytes": GREEDY_QUEUE_KBYTES,
            },
        )
        perf_kafka.warm_up(self._producer, args.topic, partitions, value)
        self._topic = args.topic
        self._value = value
        self._rate = args.quota_bytes * args.greedy_factor / len(value)  # records/s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="greedy-producer", daemon=True)
        self._started = self._ended = 0.0
        self.bytes_per_s = 0.0

    def start(self) -> None:
        self._started = time.perf_counter()
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        elapsed_s = time.perf_counter() - self._started
        self.bytes_per_s = self._delivered.bytes / elapsed_s if elapsed_s > 0 else 0.0
        perf_kafka._close(self._producer)

    def _run(self) -> None:
        producer, clock = self._producer, time.perf_counter
        sent = 0
        while not self._stopping.is_set():
            ahead_s = sent / self._rate - (clock() - self._started)
            if ahead_s > 0.001:
                producer.poll(min(ahead_s, 0.1))
                continue
            try:
                producer.produce(self._topic, self._value)
                sent += 1
            except BufferError:  # its queue is full: the quota holds it back
                producer.poll(0.01)
            producer.poll(0)


def alter_client_quota(bootstrap: str, tls: ssl.SSLContext | None, client_id: str, rate: int | None) -> None:
    """Set (or remove, None) ``producer_byte_rate`` of ``client_id`` with Kafka's
    AlterClientQuotas on the first bootstrap broker (confluent-kafka has no call for it)."""
    op = AlterClientQuotasRequest.EntryData.OpData
    entry = AlterClientQuotasRequest.EntryData(
        entity=[
            AlterClientQuotasRequest.EntryData.EntityData(entity_type="client-id", entity_name=client_id)
        ],
        ops=[op(key="producer_byte_rate", value=float(rate or 0), remove=rate is None)],
    )
    request = AlterClientQuotasRequest(entries=[entry], validate_only=False)
    answer = kafka_request.call(bootstrap, tls, request, AlterClientQuotasResponse, 0, "raftka-perf-quotas")
    result = answer.entries[0]
    if result.error_code != 0:
        raise CliError(
            f"the broker refused the quota (Kafka error {result.error_code}): {result.error_message}"
        )
