"""``raftka perf transactions``: what Kafka's transactions cost, through Kafka's protocol
with librdkafka (confluent-kafka), on any Kafka-compatible broker.

Two figures, one run:

- Transactions/s: one transactional producer runs ``--transactions`` transactions back
  to back, each writing ``--records-per-partition`` records of ``--record-size`` bytes to
  every one of ``--partitions`` partitions (10 by default: the topic is created with
  that many, as ``perf kafka`` creates its topic) and committing; every
  ``--abort-every``-th is aborted instead (its records flushed first: librdkafka's abort
  drops what it has not sent), so the logs hold aborted transactions for the second
  figure. Each transaction's time from begin to the end of its commit (or abort) is its
  latency; one committed transaction first is a warm-up, outside the counts.
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

from raftka.cli import output, perf_kafka
from raftka.cli.data_args import positive
from raftka.cli.errors import CliError
from raftka.cli.latency import latency_summary
from raftka.cli.perf_data import CpuMeter

DEFAULT_TOPIC = "raftka-perf-transactions"
TRANSACTION_TIMEOUT_S = 60.0  # one commit or abort; the run fails rather than waits forever
READ_TIMEOUT_S = 120.0
CONSUME_BATCH_MAX = 10_000
WARM_UP = 1  # transactions committed before the clock starts
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
    perf_kafka.topic_options(parser)
    parser.set_defaults(func=run, topic=DEFAULT_TOPIC, partitions=10)


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


def aborts(transaction: int, abort_every: int) -> bool:
    """Whether the ``transaction``-th (from 1) is aborted."""
    return abort_every > 0 and transaction % abort_every == 0


def run(args: argparse.Namespace) -> int:
    check_args(args)
    ck = perf_kafka._confluent_kafka()
    bootstrap = perf_kafka.kafka_bootstrap(args)
    producer = _producer(ck, bootstrap, args)  # before the topic: a property it refuses is reported at once
    try:
        partitions = perf_kafka.ensure_topic(bootstrap, args)
        if partitions < args.partitions:
            raise CliError(
                f"--topic: {args.topic!r} has {partitions} partitions, fewer than --partitions {args.partitions}"
            )
        starts = _end_offsets(ck, bootstrap, args, partitions)
    except BaseException:
        perf_kafka._close(producer)
        raise
    produced = _produce(ck, producer, args)
    expected = {
        "read_uncommitted": (WARM_UP + produced["committed"] + produced["aborted"]) * _per_transaction(args),
        "read_committed": (WARM_UP + produced["committed"]) * _per_transaction(args),
    }
    reads: dict[str, list[dict[str, Any]]] = {level: [] for level in ISOLATION_LEVELS}
    for _ in range(args.reads):
        for level in ISOLATION_LEVELS:
            reads[level].append(_read(ck, bootstrap, args, starts, level, expected[level]))
    result = {"topic": args.topic, "partitions": args.partitions, **produced}
    result.update({level: _medians(reads[level]) for level in ISOLATION_LEVELS})
    committed, uncommitted = result["read_committed"], result["read_uncommitted"]
    result["read_committed_throughput_ratio"] = _ratio(
        committed["records_per_s"], uncommitted["records_per_s"]
    )
    result["read_committed_cost_ratio"] = _ratio(
        committed["broker_cpu_us_per_record"], uncommitted["broker_cpu_us_per_record"]
    )
    _print(result, args.output)
    complete = all(r["records"] == expected[level] for level in ISOLATION_LEVELS for r in reads[level])
    return 0 if complete else 1


def _per_transaction(args: argparse.Namespace) -> int:
    return args.records_per_partition * args.partitions


def _producer(ck: Any, bootstrap: str, args: argparse.Namespace) -> Any:
    config = {
        "bootstrap.servers": bootstrap,
        "transactional.id": f"raftka-perf-transactions-{os.getpid()}",
        **perf_kafka.ssl_properties(args),
        **perf_kafka.client_properties(args.config),
    }
    return perf_kafka._client(ck.Producer, config)


def _produce(ck: Any, producer: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Run the transactions; the producer is closed afterwards."""
    value = os.urandom(args.record_size)
    latencies_ms: list[float] = []
    committed = aborted = 0
    clock = time.perf_counter
    try:
        producer.init_transactions(TRANSACTION_TIMEOUT_S)
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
    except ck.KafkaException as e:
        raise CliError(f"a transaction failed: {perf_kafka._describe(e.args[0])}") from None
    finally:
        perf_kafka._close(producer)
    return {
        "transactions": args.transactions,
        "records_per_partition": args.records_per_partition,
        "record_size": args.record_size,
        "warmup_transactions": WARM_UP,  # committed, outside the counts; the reads cover it
        "committed": committed,
        "aborted": aborted,
        "seconds": round(elapsed_s, 3),
        "transactions_per_s": round(args.transactions / elapsed_s, 1),
        "records_per_s": round(args.transactions * _per_transaction(args) / elapsed_s),
        **latency_summary(latencies_ms),
    }


def _transaction(producer: Any, args: argparse.Namespace, value: bytes, *, abort: bool) -> None:
    producer.begin_transaction()
    for partition in range(args.partitions):
        for _ in range(args.records_per_partition):
            while True:
                try:
                    producer.produce(args.topic, value, partition=partition)
                    break
                except BufferError:  # librdkafka's queue is full: let deliveries drain it
                    producer.poll(0.01)
    if abort:  # its records in the logs first (librdkafka's abort drops what it has not sent)
        if producer.flush(TRANSACTION_TIMEOUT_S) > 0:
            raise CliError(f"a transaction's records were not sent within {TRANSACTION_TIMEOUT_S:g} s")
        producer.abort_transaction(TRANSACTION_TIMEOUT_S)
    else:
        producer.commit_transaction(TRANSACTION_TIMEOUT_S)


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
    rows = [
        [level, r["records"], r["records_per_s"], r["broker_cpu_us_per_record"]]
        for level, r in ((lvl, result[lvl]) for lvl in ISOLATION_LEVELS)
    ]
    print(output.table(["ISOLATION", "RECORDS", "RECORDS/S (MEDIAN)", "BROKER CPU US/RECORD (MEDIAN)"], rows))
