"""``raftka perf transactions``: what Kafka's transactions cost, through Kafka's protocol
with librdkafka (confluent-kafka) on any Kafka-compatible broker, and through raftka's
own producer on the local cluster.

Two figures, one run:

- Transactions/s: each transactional producer of ``--clients`` (librdkafka's through the
  Kafka listeners, raftka's own through its data listeners), one after the other, runs
  ``--transactions`` transactions back to back, each writing ``--records-per-partition``
  records of ``--record-size`` bytes to every one of ``--partitions`` partitions (10 by
  default: the topic is created with that many, as ``perf kafka`` creates its topic) and
  committing; every ``--abort-every``-th is aborted instead (its records flushed first:
  librdkafka's abort drops what it has not sent), so the logs hold aborted transactions
  for the second figure. Each transaction's time from begin to the end of its commit (or
  abort) is its latency; one committed transaction first is a warm-up, outside the counts.
- The cost of ``read_committed``: the run's records read back from where it began, in
  turns, with ``isolation.level`` read_uncommitted and read_committed (``--reads`` each,
  alternating, so neither always reads a colder cache), each by a fresh consumer that
  reads until it has every record its level shows. The medians of records/s and of the
  brokers' CPU per record (local cluster: every node's CPU is read from /proc, as the
  other perf kinds do) are compared as read_committed / read_uncommitted.

It measures; it does not judge. Do not run it on a shared machine for figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from raftka.command import output
from raftka.command.data_args import broker_addresses, positive
from raftka.command.errors import CliError
from raftka.command.tls_args import client_tls
from raftka.tools.perf import perf_kafka
from raftka.tools.perf.latency import latency_summary
from raftka.tools.perf.perf_data import CpuMeter

DEFAULT_TOPIC = "raftka-perf-transactions"
TRANSACTION_TIMEOUT_S = 60.0  # one commit or abort; the run fails rather than waits forever
READ_TIMEOUT_S = 120.0
CONSUME_BATCH_MAX = 10_000
WARM_UP = 1  # transactions committed before the clock starts
CLIENTS = ("confluent-kafka", "raftka")
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = kinds.add_parser(
        "transactions",
        help="transactions/s over many partitions, and read_committed's cost against read_uncommitted "
        "(librdkafka, any Kafka broker)",
    )
    parser.add_argument("--transactions", type=positive, default=200, help="how many to run (default 200)")
    parser.add_argument(
        "--records-per-partition", type=positive, default=10, help="per transaction (default 10)"
    )
    parser.add_argument("--record-size", type=positive, default=100, help="bytes per value (default 100)")
    parser.add_argument(
        "--abort-every",
        type=int,
        default=10,
        help="abort every N-th transaction instead of committing it; 0: abort none (default 10)",
    )
    parser.add_argument("--reads", type=positive, default=3, help="reads per isolation level (default 3)")
    parser.add_argument(
        "--clients",
        help=f"producers to run, one after the other, comma separated, of {', '.join(CLIENTS)} "
        "(default: both on the local cluster; confluent-kafka with --bootstrap-server, as raftka's "
        "producer speaks raftka's data protocol)",
    )
    perf_kafka.topic_options(parser, DEFAULT_TOPIC, partitions=10)
    parser.set_defaults(func=run)


def check_args(args: argparse.Namespace) -> None:
    perf_kafka.check_topic(args.topic)
    perf_kafka.client_properties(args.config)
    if args.record_size > perf_kafka.RECORD_SIZE_MAX:
        raise CliError(f"--record-size: at most {perf_kafka.RECORD_SIZE_MAX} bytes, got {args.record_size}")
    if args.abort_every < 0:
        raise CliError(f"--abort-every: expected 0 (none) or more, got {args.abort_every}")
    if args.min_insync_replicas is not None and args.min_insync_replicas > args.replication_factor:
        raise CliError(
            f"--min-insync-replicas: at most --replication-factor ({args.replication_factor}), "
            f"got {args.min_insync_replicas}"
        )
    clients(args)


def clients(args: argparse.Namespace) -> list[str]:
    """``--clients`` checked, or its default for where the command points."""
    if args.clients is None:
        return list(CLIENTS) if args.bootstrap_server is None else ["confluent-kafka"]
    chosen = [c.strip() for c in args.clients.split(",")]
    unknown = [c for c in chosen if c not in CLIENTS]
    if unknown or not chosen or len(set(chosen)) != len(chosen):
        raise CliError(f"--clients: expected some of {', '.join(CLIENTS)}, each once, got {args.clients!r}")
    if "raftka" in chosen and args.bootstrap_server is not None:
        raise CliError(
            "--clients: raftka's producer speaks raftka's data protocol, which --bootstrap-server "
            "(Kafka listeners) does not name; run it on the local cluster"
        )
    return chosen


def aborts(transaction: int, abort_every: int) -> bool:
    """Whether the ``transaction``-th (from 1) is aborted."""
    return abort_every > 0 and transaction % abort_every == 0


def run(args: argparse.Namespace) -> int:
    check_args(args)
    ck = perf_kafka._confluent_kafka()
    bootstrap = perf_kafka.kafka_bootstrap(args)
    # before the topic: a property librdkafka refuses is reported at once
    producers = [_producer(ck, bootstrap, args, name) for name in clients(args)]
    try:
        partitions = perf_kafka.ensure_topic(bootstrap, args)
        if partitions < args.partitions:
            raise CliError(
                f"--topic: {args.topic!r} has {partitions} partitions, fewer than --partitions {args.partitions}"
            )
        starts = _end_offsets(ck, bootstrap, args, partitions)
    except BaseException:
        for producer in producers:
            producer.close()
        raise
    produced = {producer.name: _produce(producer, args) for producer in producers}
    committed = sum(WARM_UP + p["committed"] for p in produced.values())
    aborted = sum(p["aborted"] for p in produced.values())
    expected = {
        "read_uncommitted": (committed + aborted) * _per_transaction(args),
        "read_committed": committed * _per_transaction(args),
    }
    reads: dict[str, list[dict[str, Any]]] = {level: [] for level in ISOLATION_LEVELS}
    for _ in range(args.reads):
        for level in ISOLATION_LEVELS:
            reads[level].append(_read(ck, bootstrap, args, starts, level, expected[level]))
    result: dict[str, Any] = {
        "topic": args.topic,
        "partitions": args.partitions,
        "transactions": args.transactions,
        "records_per_partition": args.records_per_partition,
        "record_size": args.record_size,
        "warmup_transactions": WARM_UP,  # per producer: committed, outside the counts; the reads cover them
        "producers": produced,
    }
    result.update({level: _medians(reads[level]) for level in ISOLATION_LEVELS})
    read_committed, read_uncommitted = result["read_committed"], result["read_uncommitted"]
    result["read_committed_throughput_ratio"] = _ratio(
        read_committed["records_per_s"], read_uncommitted["records_per_s"]
    )
    result["read_committed_cost_ratio"] = _ratio(
        read_committed["broker_cpu_us_per_record"], read_uncommitted["broker_cpu_us_per_record"]
    )
    _print(result, args.output)
    complete = all(r["records"] == expected[level] for level in ISOLATION_LEVELS for r in reads[level])
    return 0 if complete else 1


def _per_transaction(args: argparse.Namespace) -> int:
    return args.records_per_partition * args.partitions


class _Librdkafka:
    """confluent-kafka's transactional producer through the Kafka listeners."""

    name = "confluent-kafka"

    def __init__(self, ck: Any, bootstrap: str, args: argparse.Namespace) -> None:
        config = {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"raftka-perf-transactions-{os.getpid()}-{self.name}",
            **perf_kafka.ssl_properties(args),
            **perf_kafka.client_properties(args.config),
        }
        self._producer = perf_kafka._client(ck.Producer, config)
        self._topic = args.topic
        self.errors: tuple[type[BaseException], ...] = (ck.KafkaException,)

    def init(self) -> None:
        self._producer.init_transactions(TRANSACTION_TIMEOUT_S)

    def begin(self) -> None:
        self._producer.begin_transaction()

    def send(self, value: bytes, partition: int) -> None:
        while True:
            try:
                self._producer.produce(self._topic, value, partition=partition)
                return
            except BufferError:  # librdkafka's queue is full: let deliveries drain it
                self._producer.poll(0.01)

    def flush(self) -> bool:
        return self._producer.flush(TRANSACTION_TIMEOUT_S) == 0

    def commit(self) -> None:
        self._producer.commit_transaction(TRANSACTION_TIMEOUT_S)

    def abort(self) -> None:
        self._producer.abort_transaction(TRANSACTION_TIMEOUT_S)

    def close(self) -> None:
        perf_kafka._close(self._producer)


class _Raftka:
    """raftka's transactional producer (the same API) through the data listeners."""

    name = "raftka"

    def __init__(self, args: argparse.Namespace) -> None:
        from raftka.client.errors import KafkaError
        from raftka.client.producer import Producer

        self._producer = Producer(
            broker_addresses(args),
            transactional_id=f"raftka-perf-transactions-{os.getpid()}-{self.name}",
            tls=client_tls(args),
        )
        self._topic = args.topic
        self.errors = (KafkaError,)

    def init(self) -> None:
        self._producer.init_transactions()

    def begin(self) -> None:
        self._producer.begin_transaction()

    def send(self, value: bytes, partition: int) -> None:
        self._producer.send(self._topic, value, partition=partition)  # a failure fails the commit

    def flush(self) -> bool:
        self._producer.flush()
        return True

    def commit(self) -> None:
        self._producer.commit_transaction()

    def abort(self) -> None:
        self._producer.abort_transaction()

    def close(self) -> None:
        self._producer.close()


def _producer(ck: Any, bootstrap: str, args: argparse.Namespace, name: str) -> _Librdkafka | _Raftka:
    return _Librdkafka(ck, bootstrap, args) if name == _Librdkafka.name else _Raftka(args)


def _produce(producer: _Librdkafka | _Raftka, args: argparse.Namespace) -> dict[str, Any]:
    """Run the transactions; the producer is closed afterwards."""
    value = os.urandom(args.record_size)
    latencies_ms: list[float] = []
    committed = aborted = 0
    clock = time.perf_counter
    try:
        producer.init()
        _transaction(producer, args, value, abort=False)  # warm-up: connections, metadata, coordinator
        start = clock()
        for n in range(1, args.transactions + 1):
            began = clock()
            abort = aborts(n, args.abort_every)
            _transaction(producer, args, value, abort=abort)
            latencies_ms.append((clock() - began) * 1000)
            aborted += abort
            committed += not abort
        elapsed_s = clock() - start
    except producer.errors as e:
        raise CliError(f"a transaction of {producer.name}'s producer failed: {e}") from None
    finally:
        producer.close()
    return {
        "committed": committed,
        "aborted": aborted,
        "seconds": round(elapsed_s, 3),
        "transactions_per_s": round(args.transactions / elapsed_s, 1),
        "records_per_s": round(args.transactions * _per_transaction(args) / elapsed_s),
        **latency_summary(latencies_ms),
    }


def _transaction(
    producer: _Librdkafka | _Raftka, args: argparse.Namespace, value: bytes, *, abort: bool
) -> None:
    producer.begin()
    for partition in range(args.partitions):
        for _ in range(args.records_per_partition):
            producer.send(value, partition)
    if abort:  # its records in the logs first (librdkafka's abort drops what it has not sent)
        if not producer.flush():
            raise CliError(f"a transaction's records were not sent within {TRANSACTION_TIMEOUT_S:g} s")
        producer.abort()
    else:
        producer.commit()


def _consumer(ck: Any, bootstrap: str, args: argparse.Namespace, isolation: str) -> Any:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": f"raftka-perf-transactions-{os.getpid()}",  # librdkafka wants one; nothing committed
        "enable.auto.commit": False,
        "isolation.level": isolation,
        **perf_kafka.CONSUMER_DEFAULTS,
        **perf_kafka.ssl_properties(args),
        **perf_kafka.client_properties(args.config),
    }
    return perf_kafka._client(ck.Consumer, config)


def _end_offsets(ck: Any, bootstrap: str, args: argparse.Namespace, partitions: int) -> dict[int, int]:
    """Where each partition ends before the run: the reads start there."""
    consumer = _consumer(ck, bootstrap, args, "read_uncommitted")
    try:
        return {
            p: consumer.get_watermark_offsets(
                ck.TopicPartition(args.topic, p), timeout=perf_kafka.METADATA_TIMEOUT_S
            )[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def _read(
    ck: Any, bootstrap: str, args: argparse.Namespace, starts: dict[int, int], isolation: str, expected: int
) -> dict[str, Any]:
    """Read the run's records with ``isolation`` until ``expected`` are read (or the
    timeout); rates over the reading time, from the call that brought the first records."""
    consumer = _consumer(ck, bootstrap, args, isolation)
    records = errors = 0
    clock = time.perf_counter
    try:
        consumer.assign([ck.TopicPartition(args.topic, p, offset) for p, offset in starts.items()])
        cpu = CpuMeter(args)
        deadline = clock() + READ_TIMEOUT_S
        first_at = None
        while records < expected and clock() < deadline:
            called_at = clock()
            for message in consumer.consume(
                min(CONSUME_BATCH_MAX, expected - records), 0.5 if first_at else 0.01
            ):
                if message.error() is not None:
                    errors += 1
                    continue
                records += 1
            if first_at is None and records:
                first_at = called_at
        elapsed_s = clock() - (first_at if first_at is not None else clock())
        cpu_s = cpu.per_million(1_000_000)  # CPU seconds per process over the read
    finally:
        consumer.close()
    brokers = sum(v for k, v in cpu_s.items() if k.startswith("broker"))
    return {
        "records": records,
        "errors": errors,
        "seconds": round(elapsed_s, 3),
        "records_per_s": round(records / elapsed_s) if elapsed_s > 0 else 0,
        "broker_cpu_us_per_record": round(brokers * 1e6 / records, 2) if records else 0.0,
    }


def _medians(reads: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "reads": len(reads),
        "records": reads[0]["records"],
        "errors": sum(r["errors"] for r in reads),
        "records_per_s": statistics.median(r["records_per_s"] for r in reads),
        "broker_cpu_us_per_record": statistics.median(r["broker_cpu_us_per_record"] for r in reads),
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None


def _print(result: dict[str, Any], output_format: str) -> None:
    if output_format == "json":
        print(output.to_json(result))
        return
    scalars = [(k.replace("_", " "), v) for k, v in result.items() if not isinstance(v, dict)]
    print(output.fields(scalars))
    producers = [
        [name, p["committed"], p["aborted"], p["transactions_per_s"], p["p50_ms"], p["p99_ms"]]
        for name, p in result["producers"].items()
    ]
    print(output.table(["PRODUCER", "COMMITTED", "ABORTED", "TRANSACTIONS/S", "P50 MS", "P99 MS"], producers))
    rows = [
        [level, r["records"], r["records_per_s"], r["broker_cpu_us_per_record"]]
        for level, r in ((lvl, result[lvl]) for lvl in ISOLATION_LEVELS)
    ]
    print(output.table(["ISOLATION", "RECORDS", "RECORDS/S (MEDIAN)", "BROKER CPU US/RECORD (MEDIAN)"], rows))
