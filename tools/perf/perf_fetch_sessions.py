"""``raftka perf kafka-fetch-sessions``: what incremental fetch sessions (KIP-227) save a
broker when one consumer reads many partitions.

The same consumer (kafka-python, which speaks KIP-227; librdkafka does not) is assigned
every partition of ``--topic`` (created with ``--partitions``, 1,000 by default, and
``--replication-factor`` 1, so only fetching is measured) twice in a row: first with
``enable_incremental_fetch_sessions`` off (every fetch names every partition and gets
every partition back, as before raftka had sessions), then on. Meanwhile a producer in
this process writes ``--rate`` records/s to partitions in turn, so fetches come back with
some records as a live topic's do. Each run lasts ``--seconds`` after a second's warm-up
and reports the fetch requests the consumer sent, the records read,
and the CPU of every local node per fetch and per second: the ratio of the two runs is
the figure (one run each, on the same cluster, same minute).
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from raftka.command import output
from raftka.command.data_args import add_broker_options, positive
from raftka.command.errors import CliError
from raftka.tools.perf import perf_kafka
from raftka.tools.perf.perf_data import CpuMeter

DEFAULT_TOPIC = "raftka-perf-fetch-sessions"
WARM_UP_S = 1.0
POLL_MS = 100


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = kinds.add_parser(
        "kafka-fetch-sessions",
        help="a broker's CPU per fetch for a consumer of many partitions, without and with KIP-227 sessions",
    )
    parser.add_argument("--topic", default=DEFAULT_TOPIC, help=f"default {DEFAULT_TOPIC}")
    parser.add_argument(
        "--partitions", type=positive, default=1_000, help="if the topic is created (default 1000)"
    )
    parser.add_argument(
        "--replication-factor", type=positive, default=1, help="if the topic is created (default 1)"
    )
    parser.add_argument("--seconds", type=positive, default=10, help="measured per run (default 10)")
    parser.add_argument(
        "--rate", type=positive, default=200, help="records/s written meanwhile (default 200)"
    )
    add_broker_options(parser, "any Kafka brokers (default: the Kafka listeners of the local cluster)")
    parser.set_defaults(func=run, min_insync_replicas=1, config=[])


def run(args: argparse.Namespace) -> int:
    if args.bootstrap_server is not None:
        raise CliError(
            "--bootstrap-server: this measure reads the local brokers' CPU; run it on 'raftka cluster up'"
        )
    bootstrap = perf_kafka.kafka_bootstrap(args)
    partitions = perf_kafka.ensure_topic(bootstrap, args)
    runs = {
        mode: measure(args, bootstrap, partitions, sessions=mode == "sessions")
        for mode in ("full", "sessions")
    }
    full, sessions = runs["full"], runs["sessions"]
    result: dict[str, Any] = {"topic": args.topic, "partitions": partitions, **runs}
    result["broker_cpu_per_fetch_ratio"] = _ratio(
        full["broker_cpu_ms_per_fetch"], sessions["broker_cpu_ms_per_fetch"]
    )
    if args.output == "json":
        print(output.to_json(result))
    else:
        rows = [[mode, r["fetches"], r["records"], r["broker_cpu_ms_per_fetch"], r["broker_cpu_ms_per_s"]]
                for mode, r in runs.items()]  # fmt: skip
        print(output.table(["FETCHES", "COUNT", "RECORDS", "BROKER CPU MS/FETCH", "BROKER CPU MS/S"], rows))
        print(f"broker CPU per fetch, full / sessions: {result['broker_cpu_per_fetch_ratio']}")
    return 0 if full["fetches"] and sessions["fetches"] else 1


def measure(args: argparse.Namespace, bootstrap: str, partitions: int, *, sessions: bool) -> dict[str, Any]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    stop = threading.Event()
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), linger_ms=5)
    writer = threading.Thread(target=_write, args=(producer, args, partitions, stop), daemon=True)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False,
                             auto_offset_reset="latest", enable_incremental_fetch_sessions=sessions)  # fmt: skip
    try:
        counter = _FetchCounter(consumer)
        consumer.assign([TopicPartition(args.topic, p) for p in range(partitions)])
        writer.start()
        _poll_for(consumer, WARM_UP_S)
        fetches_before = counter.count
        cpu = CpuMeter(args)
        started = time.monotonic()
        records = _poll_for(consumer, args.seconds)
        elapsed = time.monotonic() - started
        fetches = counter.count - fetches_before
        cpu_s = cpu.per_million(1_000_000)  # CPU seconds per process over the run
    finally:
        stop.set()
        consumer.close()
        producer.close()
    brokers = sum(v for k, v in cpu_s.items() if k.startswith("broker"))
    return {
        "fetches": fetches,
        "records": records,
        "seconds": round(elapsed, 2),
        "broker_cpu_ms_per_fetch": round(brokers * 1e3 / max(fetches, 1), 3),
        "broker_cpu_ms_per_s": round(brokers * 1e3 / elapsed, 1),
        "cpu_s": cpu_s,
    }


def _write(producer: Any, args: argparse.Namespace, partitions: int, stop: threading.Event) -> None:
    interval, sent = 1.0 / args.rate, 0
    started = time.monotonic()
    while not stop.is_set():
        producer.send(args.topic, value=b"x" * 100, partition=sent % partitions)
        sent += 1
        time.sleep(max(0.0, started + sent * interval - time.monotonic()))


def _poll_for(consumer: Any, seconds: float) -> int:
    records, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        records += sum(len(r) for r in consumer.poll(timeout_ms=POLL_MS).values())
    return records


class _FetchCounter:
    """Counts the fetch requests kafka-python builds (one per broker per round): it keeps
    no total of its own (only a rate)."""

    def __init__(self, consumer: Any) -> None:
        self.count = 0
        fetcher = consumer._fetcher
        create = fetcher._create_fetch_requests

        def counted() -> Any:
            requests = create()
            self.count += len(requests)
            return requests

        fetcher._create_fetch_requests = counted


def _ratio(full: float, sessions: float) -> float | None:
    return round(full / sessions, 2) if sessions else None
