"""``raftka perf reassign``: how long a partition takes to move to another broker, and
what a producer sees meanwhile (issue 22's figures: a partition holding 1 GB moved; a
steady acks=all producer's p99 before and during the move).

Through Kafka's protocol with librdkafka, against a running cluster of at least three
brokers: it creates ``--topic`` (one partition, replication factor 2), fills it with
``--fill-mb`` MB of incompressible records, then runs a steady producer on the same
partition (``--steady-rate`` records a second, acks=all, every latency kept) for
``--duration`` seconds before the move and on until the move is done. The move replaces
the partition's follower with a broker that holds no copy (AlterPartitionReassignments;
the leader stays, so the producer sees the copy's load, not a leader change), and the tool
polls ListPartitionReassignments until the move is over. With ``--throttle-bytes`` the
copy runs under Kafka's replication throttles (every broker's leader and follower rate and
the topic's throttled replicas, set with IncrementalAlterConfigs and removed at the end).
The topic is deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import threading
import time
from types import SimpleNamespace
from typing import Any

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

from raftka.command import output
from raftka.command.data_args import positive
from raftka.command.errors import CliError
from raftka.command.tls_args import client_tls
from raftka.tools.perf import kafka_request, perf_kafka
from raftka.tools.perf.latency import latency_summary

DEFAULT_TOPIC = "raftka-perf-reassign"
FILL_RECORD_BYTES = 10_000
CLIENT_ID = "raftka-perf-reassign"
POLL_S = 0.1
THROTTLED_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLED_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reassign = kinds.add_parser(
        "reassign",
        help="time to move a partition of --fill-mb MB to another broker, and a steady producer's "
        "p99 before and during the move (librdkafka)",
    )
    reassign.add_argument(
        "--fill-mb", type=positive, default=1_000, help="MB in the partition (default 1000)"
    )
    reassign.add_argument(
        "--steady-rate", type=positive, default=200, help="the steady producer's records/s (default 200)"
    )
    reassign.add_argument(
        "--record-size", type=positive, default=1_000, help="its bytes per record (default 1000)"
    )
    reassign.add_argument(
        "--duration", type=float, default=20.0, help="seconds measured before the move (default 20)"
    )
    reassign.add_argument(
        "--throttle-bytes",
        type=positive,
        help="replication throttle during the move, bytes/s (default: none)",
    )
    reassign.add_argument(
        "--move-timeout", type=float, default=1_800.0, help="seconds the move may take (default 1800)"
    )
    reassign.add_argument("--keep", action="store_true", help="keep the topic at the end")
    reassign.add_argument("--topic", default=DEFAULT_TOPIC, help=f"default {DEFAULT_TOPIC}")
    perf_kafka._client_options(reassign)
    reassign.set_defaults(func=run_reassign)


def run_reassign(args: argparse.Namespace) -> int:
    perf_kafka.check_topic(args.topic)
    if not args.duration > 0:
        raise CliError(f"--duration: expected a positive number of seconds, got {args.duration:g}")
    if args.record_size > perf_kafka.RECORD_SIZE_MAX:
        raise CliError(f"--record-size: at most {perf_kafka.RECORD_SIZE_MAX} bytes, got {args.record_size}")
    result = measure(args)
    if args.output == "json":
        print(output.to_json(result))
    else:
        before, during = result["steady_before"], result["steady_during"]
        rows = [
            ("partition moved (MB)", result["fill_mb"]),
            ("from / to broker", f"{result['moved_from']} -> {result['moved_to']}"),
            ("throttle (bytes/s)", result["throttle_bytes_per_s"] or "none"),
            ("move took (s)", result["move_s"]),
            ("copy rate (MB/s)", result["copy_mb_per_s"]),
            ("steady producer p99 before (ms)", before["p99_ms"]),
            ("steady producer p99 during (ms)", during["p99_ms"]),
            ("ratio", result["p99_ratio"]),
            ("steady records failed", before["failed"] + during["failed"]),
        ]
        print("\n".join(f"{name}: {value}" for name, value in rows))
    return 0 if result["steady_before"]["failed"] + result["steady_during"]["failed"] == 0 else 1


def measure(args: argparse.Namespace) -> dict[str, Any]:
    ck = perf_kafka._confluent_kafka()
    from confluent_kafka.admin import AdminClient

    bootstrap = perf_kafka.kafka_bootstrap(args)
    tls = client_tls(args)
    ssl_context = tls.client_ssl() if tls else None
    config = {
        "bootstrap.servers": bootstrap,
        **perf_kafka.ssl_properties(args),
        **perf_kafka.client_properties(args.config),
    }
    admin = AdminClient(config)
    brokers = sorted(perf_kafka._list_topics(admin, bootstrap).brokers)
    if len(brokers) < 3:
        raise CliError(
            f"the cluster has {len(brokers)} broker(s): moving a copy of replication factor 2 needs 3"
        )
    topic_args = SimpleNamespace(**vars(args), partitions=1, replication_factor=2, min_insync_replicas=None)
    perf_kafka.ensure_topic(bootstrap, topic_args)  # type: ignore[arg-type]
    try:
        _fill(ck, config, args)
        partition = perf_kafka._list_topics(admin, bootstrap).topics[args.topic].partitions[0]
        source = next(b for b in partition.replicas if b != partition.leader)
        destination = next(b for b in brokers if b not in partition.replicas)
        target = [partition.leader, destination]
        steady = _Steady(ck, config | {"acks": "all"}, args, os.urandom(args.record_size))
        steady.start()
        try:
            time.sleep(args.duration)  # the steady producer's "before" sample
            with _throttled(admin, ck, args, brokers):
                moved_at = time.perf_counter()
                _move(bootstrap, ssl_context, args.topic, target)
                _wait_moved(bootstrap, ssl_context, args.topic, args.move_timeout)
                done_at = time.perf_counter()
        finally:
            steady.stop()
        replicas = sorted(perf_kafka._list_topics(admin, bootstrap).topics[args.topic].partitions[0].replicas)
        if replicas != sorted(target):
            raise CliError(f"the move ended with replicas {replicas}, not {sorted(target)}")
    finally:
        if not args.keep:
            with contextlib.suppress(Exception):
                admin.delete_topics([args.topic], request_timeout=30)[args.topic].result(30)
    before = steady.summary(0.0, moved_at)
    during = steady.summary(moved_at, done_at)
    move_s = done_at - moved_at
    return {
        "bootstrap": bootstrap,
        "topic": args.topic,
        "fill_mb": args.fill_mb,
        "moved_from": source,
        "moved_to": destination,
        "throttle_bytes_per_s": args.throttle_bytes,
        "move_s": round(move_s, 2),
        "copy_mb_per_s": round(args.fill_mb / move_s, 1) if move_s > 0 else 0.0,
        "steady_before": before,
        "steady_during": during,
        "p99_ratio": round(during["p99_ms"] / before["p99_ms"], 3) if before["p99_ms"] > 0 else 0.0,
    }


def _fill(ck: Any, config: dict[str, Any], args: argparse.Namespace) -> None:
    """``--fill-mb`` MB of random records (nothing to compress), acks=1, big batches."""
    deliveries = perf_kafka.Deliveries(sample_every=1 << 30)
    producer = perf_kafka._client(
        ck.Producer,
        config | {"acks": "1", "linger.ms": 20, "batch.size": 1_000_000, "on_delivery": deliveries},
    )
    try:
        records = max(1, args.fill_mb * 1_000_000 // FILL_RECORD_BYTES)
        run = SimpleNamespace(records=records, throughput=0, topic=args.topic)
        perf_kafka.send(producer, run, os.urandom(FILL_RECORD_BYTES))  # type: ignore[arg-type]
    finally:
        perf_kafka._close(producer)
    if deliveries.failed:
        raise CliError(
            f"filling the partition: {deliveries.failed} records failed ({deliveries.first_error})"
        )


def _move(bootstrap: str, tls: Any, topic: str, target: list[int]) -> None:
    T = AlterPartitionReassignmentsRequest.ReassignableTopic
    request = AlterPartitionReassignmentsRequest(
        timeout_ms=30_000,
        topics=[T(name=topic, partitions=[T.ReassignablePartition(partition_index=0, replicas=target)])],
    )
    answer = kafka_request.call(bootstrap, tls, request, AlterPartitionReassignmentsResponse, 0, CLIENT_ID)
    errors = [(answer.error_code, answer.error_message)] + [
        (p.error_code, p.error_message) for t in answer.responses for p in t.partitions
    ]
    refused = [e for e in errors if e[0] != 0]
    if refused:
        raise CliError(f"the move was refused (Kafka error {refused[0][0]}): {refused[0][1]}")


def _wait_moved(bootstrap: str, tls: Any, topic: str, timeout_s: float) -> None:
    T = ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics
    deadline = time.monotonic() + timeout_s
    while True:
        request = ListPartitionReassignmentsRequest(
            timeout_ms=30_000, topics=[T(name=topic, partition_indexes=[0])]
        )
        answer = kafka_request.call(bootstrap, tls, request, ListPartitionReassignmentsResponse, 0, CLIENT_ID)
        if answer.error_code != 0:
            raise CliError(
                f"listing the move failed (Kafka error {answer.error_code}): {answer.error_message}"
            )
        if not any(t.partitions for t in answer.topics):
            return
        if time.monotonic() > deadline:
            raise CliError(f"the move was not done within {timeout_s:g} s (--move-timeout)")
        time.sleep(POLL_S)


@contextlib.contextmanager
def _throttled(admin: Any, ck: Any, args: argparse.Namespace, brokers: list[int]):  # noqa: ANN202
    """Kafka's replication throttles for the move when ``--throttle-bytes`` is given."""
    if args.throttle_bytes is None:
        yield
        return
    _alter(admin, ck, args, brokers, str(args.throttle_bytes), "*")
    try:
        yield
    finally:
        _alter(admin, ck, args, brokers, None, None)


def _alter(
    admin: Any, ck: Any, args: argparse.Namespace, brokers: list[int], rate: str | None, replicas: str | None
) -> None:
    """Each broker's rates, one call each (librdkafka takes one broker resource per call),
    then the topic's throttled replicas; None deletes them."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    op = AlterConfigOpType.SET if rate is not None else AlterConfigOpType.DELETE
    calls = [
        ConfigResource(
            ConfigResource.Type.BROKER,
            str(broker),
            incremental_configs=[ConfigEntry(key, rate, incremental_operation=op) for key in THROTTLED_RATES],
        )
        for broker in brokers
    ]
    calls.append(
        ConfigResource(
            ConfigResource.Type.TOPIC,
            args.topic,
            incremental_configs=[
                ConfigEntry(key, replicas, incremental_operation=op) for key in THROTTLED_REPLICAS
            ],
        )
    )
    try:
        for resource in calls:
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(30)
    except ck.KafkaException as e:
        raise CliError(f"setting the replication throttle: {e.args[0].str()}") from None


class _Steady:
    """The steady producer on a thread of its own: every record's send time and latency."""

    def __init__(self, ck: Any, config: dict[str, Any], args: argparse.Namespace, value: bytes) -> None:
        self._producer = perf_kafka._client(
            ck.Producer, config | {"client.id": "raftka-perf-steady", "linger.ms": 0}
        )
        perf_kafka.warm_up(self._producer, args.topic, 1, value)
        self._topic, self._value, self._rate = args.topic, value, args.steady_rate
        self._sent: list[tuple[float, float]] = []  # (sent at, latency ms)
        self._failed: list[float] = []  # sent at
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)
        self._started = 0.0

    def start(self) -> None:
        self._started = time.perf_counter()
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        while self._producer.flush(1.0) > 0:
            pass
        perf_kafka._close(self._producer)

    def summary(self, start: float, end: float) -> dict[str, Any]:
        """Latency of the records sent in [start, end) and how many of them failed."""
        latencies = [ms for sent, ms in self._sent if start <= sent < end]
        failed = sum(1 for sent in self._failed if start <= sent < end)
        return {**latency_summary(latencies), "records": len(latencies), "failed": failed}

    def _delivered(self, sent: float, error: Any, message: Any) -> None:
        if error is not None:
            self._failed.append(sent)
        else:
            self._sent.append((sent, (time.perf_counter() - sent) * 1000))

    def _run(self) -> None:
        producer, clock = self._producer, time.perf_counter
        count = 0
        while not self._stopping.is_set():
            ahead_s = count / self._rate - (clock() - self._started)
            if ahead_s > 0.001:
                producer.poll(min(ahead_s, 0.1))
                continue
            now = clock()
            try:
                producer.produce(
                    self._topic, self._value, partition=0, on_delivery=functools.partial(self._delivered, now)
                )
                count += 1
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
