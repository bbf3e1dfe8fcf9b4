"""``raftka perf kafka`` and ``raftka perf kafka-consume``: kafka-producer-perf-test and
kafka-consumer-perf-test through Kafka's own protocol, with librdkafka (confluent-kafka).

Unlike ``perf produce|consume`` (raftka's own clients on its data protocol), these speak
Kafka's wire protocol through the most used non-Java client, so they measure raftka's
Kafka listener, and the same command measures any Kafka-compatible broker (Kafka,
Redpanda, Tansu: ``make bench-kafka`` runs it against Tansu and raftka side by side).

The topic (``--topic``, default ``raftka-perf-kafka``) is created if missing with Kafka's
CreateTopics (the AdminClient), ``--partitions 6 --replication-factor 3`` and
``min.insync.replicas`` 2 (or the replication factor, when smaller). The producer sends
``--records`` keyless records of ``--record-size`` random bytes as fast as allowed
(``--throughput`` caps the rate as kafka-producer-perf-test's does); every record's
delivery report is counted, errors by Kafka's name, and every k-th record's latency is
sampled (at most ``LATENCY_SAMPLES_MAX``): librdkafka's own time from ``produce()`` to
the broker's acknowledgement (``Message.latency()``), so it does not depend on how often
this loop polls. One record per partition goes first, outside the counts (``warm_up``). ``kafka-consume`` reads ``--records`` back from the beginning of every
partition (assigned, no group join), with one change to librdkafka's defaults
(``CONSUMER_DEFAULTS``), and times the reading apart from the startup. ``--config
KEY=VALUE`` passes any other librdkafka property. With the local cluster, or with
``cpu_of`` processes given, each run also reports CPU seconds per million records per
process, this one (with librdkafka's threads) included. With a certificate (``--tls-*``,
``--command-config``, or the local cluster's from ``cluster up --tls``) every client
speaks SSL (``ssl_properties``).

confluent-kafka is imported only when one of these runs: it is a dev and bench
dependency, not one of raftka's.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from raftka.command import local
from raftka.command.addresses import parse_addresses
from raftka.command.data_args import add_broker_options, positive
from raftka.command.errors import CliError
from raftka.command.tls_args import client_tls
from raftka.metadata.validation import ValidationError, validate_topic_name
from raftka.tools.perf.latency import LATENCY_SAMPLES_MAX, latency_summary
from raftka.tools.perf.perf_data import CpuMeter, print_result

DEFAULT_TOPIC = "raftka-perf-kafka"
ACKS = ("all", "1", "0")
# librdkafka's partitioners; murmur2_random is the Java client's (keyless records go to
# random partitions, sticky for sticky.partitioning.linger.ms as the Java client's are).
PARTITIONERS = (
    "murmur2_random",
    "murmur2",
    "consistent_random",
    "consistent",
    "random",
    "fnv1a",
    "fnv1a_random",
)
RECORD_SIZE_MAX = 1_000_000  # librdkafka's message.max.bytes default: a larger record fails on the client
LINGER_MS_MAX = 900_000  # librdkafka's bound for linger.ms
BATCH_SIZE_MAX = 2_147_483_647  # librdkafka's bound for batch.size
BATCH_SIZE_DEFAULT = 1_000_000  # librdkafka's default
LINGER_MS_DEFAULT = 5  # librdkafka's default (since 1.9), as Kafka's Java producer's since 4.0
REPLICATION_FACTOR_MAX = 32_767  # an int16 in CreateTopics
TOPIC_READY_TIMEOUT_S = 30.0  # every partition of the topic has a leader
METADATA_TIMEOUT_S = 10.0
CONSUME_BATCH_MAX = 10_000  # records per Consumer.consume call
CLIENT_ERRORS_KEPT = 10  # librdkafka's client-level errors (error_cb), the first few kept
FIRST_RECORDS_POLL_S = 0.01  # consume: how finely the wait for the first records is timed
RESERVED_PROPERTIES = {
    "bootstrap.servers": "--bootstrap-server",
    "on_delivery": "it counts every delivery",
    "error_cb": "it counts client errors",
}
# The consumer's one change to librdkafka's defaults: fetch.queue.backoff.ms (1000 ms)
# pauses a partition's fetches for a second whenever its prefetch queue holds
# queued.min.messages, so a reader faster than that would measure the pause, not the broker.
CONSUMER_DEFAULTS = {"fetch.queue.backoff.ms": 0}


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    produce = kinds.add_parser(
        "kafka",
        help="producer throughput and latency through Kafka's protocol (librdkafka, any Kafka broker)",
    )
    produce.add_argument("--records", type=positive, required=True, help="how many records to send")
    produce.add_argument(
        "--record-size",
        type=positive,
        default=100,
        help=f"bytes per record value, at most {RECORD_SIZE_MAX} (default 100)",
    )
    produce.add_argument(
        "--throughput", type=int, default=-1, help="records/s cap; -1 (default): as fast as it goes"
    )
    produce.add_argument("--acks", choices=ACKS, default="all", help="default all")
    produce.add_argument(
        "--linger-ms",
        type=int,
        default=LINGER_MS_DEFAULT,
        help=f"librdkafka's linger.ms (default {LINGER_MS_DEFAULT})",
    )
    produce.add_argument(
        "--batch-size",
        type=int,
        default=BATCH_SIZE_DEFAULT,
        help=f"librdkafka's batch.size in bytes (default {BATCH_SIZE_DEFAULT})",
    )
    produce.add_argument(
        "--idempotence",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="enable.idempotence (needs --acks all and a broker serving InitProducerId; default off, librdkafka's)",
    )
    produce.add_argument(
        "--partitioner", choices=PARTITIONERS, default="murmur2_random", help="default murmur2_random"
    )
    topic_options(produce)
    produce.set_defaults(func=run_produce)

    consume = kinds.add_parser(
        "kafka-consume", help="consumer throughput from the beginning through Kafka's protocol (librdkafka)"
    )
    consume.add_argument("--records", type=positive, required=True, help="how many records to read")
    consume.add_argument(
        "--timeout-s", type=float, default=60.0, help="give up if the topic has fewer (default 60)"
    )
    consume.add_argument("--topic", default=DEFAULT_TOPIC, help=f"default {DEFAULT_TOPIC}")
    _client_options(consume)
    consume.set_defaults(func=run_consume)


def topic_options(parser: argparse.ArgumentParser, topic: str = DEFAULT_TOPIC, partitions: int = 6) -> None:
    parser.add_argument("--topic", default=topic, help=f"default {topic}")
    parser.add_argument(
        "--partitions",
        type=positive,
        default=partitions,
        help=f"if the topic is created (default {partitions})",
    )
    parser.add_argument(
        "--replication-factor",
        type=positive,
        default=3,
        help="if the topic is created (default 3; 1 for a single broker)",
    )
    parser.add_argument(
        "--min-insync-replicas",
        type=positive,
        help="if the topic is created (default 2, or the replication factor when smaller)",
    )
    _client_options(parser)


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka property, applied after the options above; repeat for more "
        "(as kafka-producer-perf-test's --producer-props)",
    )
    add_broker_options(
        parser,
        "any Kafka brokers (default: the Kafka listeners of the local cluster from 'raftka cluster up')",
    )


# arguments ----------------------------------------------------------------------------


def check_produce_args(args: argparse.Namespace) -> None:
    """Every produce option checked before anything connects; CliError naming the flag."""
    check_topic(args.topic)
    if args.record_size > RECORD_SIZE_MAX:
        raise CliError(
            f"--record-size: at most {RECORD_SIZE_MAX} bytes (librdkafka's message.max.bytes), got {args.record_size}"
        )
    if args.throughput == 0 or args.throughput < -1:
        raise CliError(
            f"--throughput: expected a cap of 1 record/s or more, or -1 for none, got {args.throughput}"
        )
    if not 0 <= args.linger_ms <= LINGER_MS_MAX:
        raise CliError(f"--linger-ms: expected 0 to {LINGER_MS_MAX}, got {args.linger_ms}")
    if not 1 <= args.batch_size <= BATCH_SIZE_MAX:
        raise CliError(f"--batch-size: expected 1 to {BATCH_SIZE_MAX} bytes, got {args.batch_size}")
    if args.idempotence and args.acks != "all":
        raise CliError(f"--idempotence needs --acks all (got --acks {args.acks}); or pass --no-idempotence")
    if args.replication_factor > REPLICATION_FACTOR_MAX:
        raise CliError(
            f"--replication-factor: at most {REPLICATION_FACTOR_MAX}, got {args.replication_factor}"
        )
    client_properties(args.config)
    if args.min_insync_replicas is not None and args.min_insync_replicas > args.replication_factor:
        raise CliError(
            f"--min-insync-replicas: at most --replication-factor ({args.replication_factor}), "
            f"got {args.min_insync_replicas}; acks=all could never be answered"
        )


def check_consume_args(args: argparse.Namespace) -> None:
    check_topic(args.topic)
    client_properties(args.config)
    if not args.timeout_s > 0:
        raise CliError(f"--timeout-s: expected a positive number of seconds, got {args.timeout_s:g}")


def client_properties(items: Sequence[str]) -> dict[str, str]:
    """``--config KEY=VALUE`` items as librdkafka properties; librdkafka checks the rest."""
    properties = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CliError(f"--config: expected KEY=VALUE, got {item!r}")
        if key in RESERVED_PROPERTIES:
            raise CliError(f"--config: {key} is set by this command ({RESERVED_PROPERTIES[key]})")
        properties[key] = value
    return properties


def check_topic(name: str) -> None:
    try:
        validate_topic_name(name)
    except ValidationError as e:
        raise CliError(f"--topic: {e.message}") from None


def min_insync_replicas(args: argparse.Namespace) -> int:
    return (
        args.min_insync_replicas if args.min_insync_replicas is not None else min(2, args.replication_factor)
    )


def kafka_bootstrap(args: argparse.Namespace) -> str:
    """``bootstrap.servers``: ``--bootstrap-server`` checked, or the Kafka listeners of the
    local cluster, whose brokers must all be running: its Kafka ports were chosen when it
    was created, and another cluster may hold them while it is down."""
    if args.bootstrap_server is not None:
        return ",".join(parse_addresses(args.bootstrap_server, "--bootstrap-server"))
    cluster = local.load(local.resolve_dir(args.dir))
    addresses = cluster.kafka_addresses()
    if not addresses:
        raise CliError("the local cluster has no brokers; pass --bootstrap-server")
    down = [node.id for node in cluster.brokers() if not local.is_alive(node)]
    if down:
        raise CliError(
            f"broker(s) {', '.join(map(str, down))} of the local cluster in {cluster.dir} are not running: "
            "start them with 'raftka cluster up', or pass --bootstrap-server"
        )
    return ",".join(addresses)


def expected_cluster_id(args: argparse.Namespace) -> str | None:
    """The local cluster's id when its brokers are the target, so a listener on those ports
    that belongs to another cluster is refused; None for ``--bootstrap-server``."""
    return None if args.bootstrap_server is not None else local.load(local.resolve_dir(args.dir)).cluster_id


def ssl_properties(args: argparse.Namespace) -> dict[str, str]:
    """librdkafka's properties for the command's certificate (``client_tls``), none for
    plaintext. The broker's certificate is checked against the CA and the host dialled
    (librdkafka's default ``ssl.endpoint.identification.algorithm=https``; the
    certificates of ``raftka certs init`` name 127.0.0.1 and localhost)."""
    tls = client_tls(args)
    if tls is None:
        return {}
    return {
        "security.protocol": "SSL",
        "ssl.ca.location": str(tls.ca),
        "ssl.certificate.location": str(tls.cert),
        "ssl.key.location": str(tls.key),
    }


def _confluent_kafka() -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise CliError(
            "this command needs confluent-kafka (librdkafka): pip install 'confluent-kafka>=2.6', "
            "or install raftka with its dev or bench extra"
        ) from None
    return confluent_kafka


# the topic ----------------------------------------------------------------------------


def ensure_topic(bootstrap: str, args: argparse.Namespace) -> int:
    """Create ``--topic`` through Kafka's CreateTopics unless the brokers list it; wait until
    every partition has a leader. Returns its partition count."""
    ck = _confluent_kafka()
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **ssl_properties(args)})
    if args.topic not in _list_topics(admin, bootstrap, expected_cluster_id(args)).topics:
        new = NewTopic(
            args.topic,
            num_partitions=args.partitions,
            replication_factor=args.replication_factor,
            config={"min.insync.replicas": str(min_insync_replicas(args))},
        )
        try:
            admin.create_topics([new], request_timeout=TOPIC_READY_TIMEOUT_S)[args.topic].result()
        except ck.KafkaException as e:
            error = e.args[0]
            if error.code() != ck.KafkaError.TOPIC_ALREADY_EXISTS:
                raise CliError(f"cannot create topic {args.topic!r}: {error.name()}: {error.str()}") from None
    deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
    while True:
        topic = _list_topics(admin, bootstrap).topics.get(args.topic)
        partitions = [] if topic is None or topic.error is not None else list(topic.partitions.values())
        if partitions and all(p.leader >= 0 for p in partitions):
            return len(partitions)
        if time.monotonic() > deadline:
            state = "not listed" if topic is None else f"error {topic.error}" if topic.error else "no leader"
            raise CliError(f"topic {args.topic!r} not ready within {TOPIC_READY_TIMEOUT_S:g} s ({state})")
        time.sleep(0.1)


def _list_topics(client: Any, bootstrap: str, cluster_id: str | None = None) -> Any:
    """Every topic's metadata (never one named topic: a Metadata request naming a topic may
    create it on a broker with auto.create.topics.enable), from brokers of ``cluster_id``
    when it is given."""
    ck = _confluent_kafka()
    try:
        metadata = client.list_topics(timeout=METADATA_TIMEOUT_S)
    except ck.KafkaException as e:
        raise CliError(
            f"no metadata from {bootstrap} within {METADATA_TIMEOUT_S:g} s: {e.args[0].str()}"
        ) from None
    if cluster_id is not None and metadata.cluster_id != cluster_id:
        raise CliError(
            f"the brokers at {bootstrap} belong to cluster {metadata.cluster_id}, not to the local "
            f"cluster {cluster_id}: another cluster holds its Kafka ports"
        )
    return metadata


# produce ------------------------------------------------------------------------------


@dataclass(slots=True)
class Deliveries:
    """librdkafka's delivery reports, one per record: each counted, never dropped; every
    ``sample_every``-th success's latency kept, at most ``samples_max`` of them."""

    sample_every: int
    samples_max: int = LATENCY_SAMPLES_MAX
    delivered: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # Kafka's error name -> records
    first_error: str | None = None
    latencies_ms: list[float] = field(default_factory=list)

    def __call__(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failed += 1
            try:
                name = error.name()
            except SystemError as e:
                _let_the_fatal_error_surface(e)
            self.errors[name] = self.errors.get(name, 0) + 1
            if self.first_error is None:
                self.first_error = _describe(error)
            return
        self.delivered += 1
        if self.delivered % self.sample_every == 0 and len(self.latencies_ms) < self.samples_max:
            latency_s = message.latency()
            if latency_s is not None:
                self.latencies_ms.append(latency_s * 1000)


@dataclass(slots=True)
class ClientErrors:
    """librdkafka's client-level errors (a broker unreachable, a request timed out): counted,
    the first few kept. A fatal error never comes here: confluent-kafka raises it from
    ``produce``, ``poll`` or ``flush`` instead."""

    count: int = 0
    kept: list[str] = field(default_factory=list)

    def __call__(self, error: Any) -> None:
        self.count += 1
        if len(self.kept) < CLIENT_ERRORS_KEPT:
            self.kept.append(_describe(error))

    def first(self) -> str | None:
        return self.kept[0] if self.kept else None


def _let_the_fatal_error_surface(e: SystemError) -> NoReturn:
    """In a delivery report after a fatal error: confluent-kafka has already raised that
    error in this thread, and until it surfaces every call fails with SystemError (even
    ``list.append``). Raising it from the callback lets produce, poll or flush raise it."""
    raise (e.__cause__ or e) from None


def _describe(error: Any) -> str:
    """A librdkafka error as ``NAME: what happened``."""
    return f"{error.name()}: {error.str()}"


def sample_every(records: int, samples_max: int = LATENCY_SAMPLES_MAX) -> int:
    """Every how many records one latency is kept, so at most ``samples_max`` are."""
    return max(1, math.ceil(records / samples_max))


def run_produce(args: argparse.Namespace) -> int:
    check_produce_args(args)
    result = measure_produce(args)
    print_result(args, result, "kafka")
    return 0 if result["errors"] == 0 and result["delivered"] == args.records else 1


def producer_config(args: argparse.Namespace, bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": args.acks,
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "enable.idempotence": args.idempotence,
        "partitioner": args.partitioner,
        **ssl_properties(args),
        **client_properties(args.config),
    }


def measure_produce(args: argparse.Namespace, cpu_of: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Send ``--records`` as kafka-producer-perf-test does; ``cpu_of`` names other processes
    (label -> pid) whose CPU the report includes, such as a broker under test."""
    ck = _confluent_kafka()
    bootstrap = kafka_bootstrap(args)
    deliveries = Deliveries(sample_every(args.records))
    client_errors = ClientErrors()
    config = producer_config(args, bootstrap) | {"on_delivery": deliveries, "error_cb": client_errors}
    producer = _client(ck.Producer, config)  # before the topic: a property it refuses is reported at once
    value = os.urandom(args.record_size)
    clock = time.perf_counter
    try:
        partitions = ensure_topic(bootstrap, args)
        warm_up(producer, args.topic, partitions, value)
        cpu = CpuMeter(args, cpu_of)
        start = clock()
        send(producer, args, value)
        elapsed_s = clock() - start
    except ck.KafkaException as e:  # a fatal error: librdkafka sends nothing more
        error = e.args[0]
        if error.code() == ck.KafkaError._FATAL:  # from produce(): poll() raises it with its reason
            try:
                producer.poll(1.0)
            except ck.KafkaException as reason:
                error = reason.args[0]
        hint = " (--idempotence needs a broker serving InitProducerId; or --no-idempotence)"
        raise CliError(
            f"the producer stopped on a fatal error: {_describe(error)}{hint if args.idempotence else ''}"
        ) from None
    finally:
        _close(producer)
    cpu_per_million = cpu.per_million(args.records)
    return {
        "bootstrap": bootstrap,
        "topic": args.topic,
        "partitions": partitions,
        "warmup_records": partitions,
        **produce_report(args, elapsed_s, deliveries, client_errors),
        "cpu_s_per_million_records": cpu_per_million,
    }


def _close(producer: Any) -> None:
    """Stop librdkafka's threads now, not whenever the object is collected; after a failed
    run, nothing still queued is sent."""
    ck = _confluent_kafka()
    with contextlib.suppress(ck.KafkaException):
        producer.purge()
        if hasattr(producer, "close"):  # newer confluent-kafka; older ones stop on collection
            producer.close()


def warm_up(producer: Any, topic: str, partitions: int, value: bytes) -> None:
    """One record to each partition, every one acknowledged, before the clock starts (and
    outside the counts): the producer then has its connections and the topic's metadata,
    and each partition's replication runs. A new partition's followers start fetching up
    to a few hundred ms after its leader takes writes, and acks=all would otherwise
    measure that wait in the first records' latency."""
    failures: list[Any] = []

    def delivered(error: Any, message: Any) -> None:  # replaces Deliveries for these records
        if error is not None:
            try:
                failures.append(error)
            except SystemError as e:
                _let_the_fatal_error_surface(e)

    for partition in range(partitions):
        producer.produce(topic, value, partition=partition, on_delivery=delivered)
    deadline = time.monotonic() + TOPIC_READY_TIMEOUT_S
    while producer.flush(1.0) > 0:
        if time.monotonic() > deadline:
            raise CliError(
                f"the warm-up records (one per partition) were not acknowledged within {TOPIC_READY_TIMEOUT_S:g} s"
            )
    if failures:
        raise CliError(f"a warm-up record (one per partition) failed: {_describe(failures[0])}")


def send(producer: Any, args: argparse.Namespace, value: bytes) -> None:
    """``--records`` records, at most ``--throughput`` a second, then wait for every delivery."""
    clock = time.perf_counter
    start = clock()
    for i in range(args.records):
        if args.throughput > 0:
            while (ahead_s := i / args.throughput - (clock() - start)) > 0.001:
                producer.poll(ahead_s)  # serves delivery reports while it waits
        while True:
            try:
                producer.produce(args.topic, value)
                break
            except BufferError:  # librdkafka's queue is full: let deliveries drain it
                producer.poll(0.01)
        producer.poll(0)
    while producer.flush(1.0) > 0:  # a bounded wait per call, so Ctrl-C is seen between them
        pass


def _client(kind: Any, config: dict[str, Any]) -> Any:
    ck = _confluent_kafka()
    try:
        return kind(config)
    except (ck.KafkaException, ValueError, TypeError) as e:
        why = e.args[0].str() if isinstance(e, ck.KafkaException) else str(e)
        raise CliError(
            f"librdkafka refused the {kind.__name__.lower()}'s configuration (--config?): {why}"
        ) from None


def produce_report(
    args: argparse.Namespace, elapsed_s: float, deliveries: Deliveries, client_errors: ClientErrors
) -> dict[str, Any]:
    """What a run reports, from its counts alone: records/s and MB/s over every record sent
    (as kafka-producer-perf-test counts), latency over the samples."""
    return {
        "records": args.records,
        "record_size": args.record_size,
        "acks": args.acks,
        "idempotence": args.idempotence,
        "partitioner": args.partitioner,
        "linger_ms": args.linger_ms,
        "batch_size": args.batch_size,
        "throughput_cap": args.throughput if args.throughput > 0 else None,
        "seconds": round(elapsed_s, 3),
        "records_per_s": round(args.records / elapsed_s),
        "mb_per_s": round(args.records * args.record_size / elapsed_s / 1e6, 2),
        **latency_summary(deliveries.latencies_ms),
        "latency_samples": len(deliveries.latencies_ms),
        "delivered": deliveries.delivered,
        "errors": deliveries.failed,
        "errors_by_kind": dict(sorted(deliveries.errors.items())),
        "first_error": deliveries.first_error,
        "client_errors": client_errors.count,
        "first_client_error": client_errors.first(),
    }


# consume ------------------------------------------------------------------------------


def run_consume(args: argparse.Namespace) -> int:
    check_consume_args(args)
    result = measure_consume(args)
    print_result(args, result, "kafka-consume")
    return 0 if result["records"] >= args.records and result["errors"] == 0 else 1


def measure_consume(args: argparse.Namespace, cpu_of: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Read ``--records`` from the beginning of every partition (assigned, no group
    rebalance; kafka-consumer-perf-test joins a group first)."""
    ck = _confluent_kafka()
    bootstrap = kafka_bootstrap(args)
    client_errors = ClientErrors()
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": f"raftka-perf-kafka-consume-{os.getpid()}",  # librdkafka wants one; nothing is committed
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **CONSUMER_DEFAULTS,
        **ssl_properties(args),
        **client_properties(args.config),
        "error_cb": client_errors,
    }
    consumer = _client(ck.Consumer, config)
    records = size = 0
    errors: dict[str, int] = {}
    clock = time.perf_counter
    try:
        topic = _list_topics(consumer, bootstrap, expected_cluster_id(args)).topics.get(args.topic)
        if topic is None or not topic.partitions:
            raise CliError(
                f"--topic: no topic {args.topic!r} at {bootstrap} (write it first with raftka perf kafka)"
            )
        consumer.assign(
            [ck.TopicPartition(args.topic, p, ck.OFFSET_BEGINNING) for p in sorted(topic.partitions)]
        )
        cpu = CpuMeter(args, cpu_of)
        start = clock()
        deadline = start + args.timeout_s
        first_records_at = None  # when the call that brought the first records began
        while records < args.records and clock() < deadline:
            called_at = clock()
            # never more than are still wanted: consume() waits for its count or its timeout
            wanted = min(CONSUME_BATCH_MAX, args.records - records)
            for message in consumer.consume(wanted, 0.5 if first_records_at else FIRST_RECORDS_POLL_S):
                error = message.error()
                if error is not None:
                    errors[error.name()] = errors.get(error.name(), 0) + 1
                    continue
                records += 1
                size += len(message)
            if first_records_at is None and records:
                first_records_at = called_at
        end = clock()
        cpu_per_million = cpu.per_million(records)
    finally:
        consumer.close()
    reading_from = first_records_at if first_records_at is not None else end
    return {
        "bootstrap": bootstrap,
        "topic": args.topic,
        "partitions": len(topic.partitions),
        **consume_report(records, size, end - reading_from, reading_from - start, errors, client_errors),
        "cpu_s_per_million_records": cpu_per_million,
    }


def consume_report(
    records: int,
    size: int,
    elapsed_s: float,
    startup_s: float,
    errors: Mapping[str, int],
    client_errors: ClientErrors,
) -> dict[str, Any]:
    """Rates over the reading time (first records to the last), as kafka-consumer-perf-test's
    fetch rates leave out its group join; the startup (connect, offsets, first fetch) apart."""
    return {
        "records": records,
        "startup_ms": round(startup_s * 1000, 1),
        "seconds": round(elapsed_s, 3),
        "records_per_s": round(records / elapsed_s) if elapsed_s > 0 else 0,
        "mb_per_s": round(size / elapsed_s / 1e6, 2) if elapsed_s > 0 else 0.0,
        "errors": sum(errors.values()),
        "errors_by_kind": dict(sorted(errors.items())),
        "client_errors": client_errors.count,
        "first_client_error": client_errors.first(),
    }
