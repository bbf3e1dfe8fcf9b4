"""``raftka perf offset-commit``: a Kafka client's synchronous offset commit, end to end.

What issue 32 measures against etcd: how long a consumer waits for ``commit()``. One
librdkafka (confluent-kafka) consumer joins a group (``--group``, a fresh one per run by
default) subscribed to ``--topic`` (created if missing, as ``perf kafka`` creates its
topic) and, once it owns a partition, commits ``--commits`` offsets one after the other,
each ``commit(offsets=[...], asynchronous=False)`` with an explicit offset one past the
last (the first one past what the group had): its coordinator broker writes each commit
to the quorum and answers once it has committed there. ``--warmup`` commits go first,
outside the counts. Each commit's time from the call to its return is its latency;
commits/s is the count over the timed run. A failed commit (an exception, or an error
on its partition) is counted by Kafka's error name, not timed, and the run goes on.
Against the local cluster (``raftka cluster up``) it also reports every node's CPU time
per commit, read from /proc as the other perf kinds do.

It measures; it does not judge. Do not run it on a shared machine for figures.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from raftka.command import output
from raftka.command.data_args import not_negative, positive
from raftka.command.errors import CliError
from raftka.tools.perf import perf_kafka
from raftka.tools.perf.latency import latency_summary
from raftka.tools.perf.perf_data import CpuMeter

DEFAULT_TOPIC = "raftka-perf-offset-commit"
GROUP_PREFIX = "raftka-perf-offset-commit-"
JOIN_TIMEOUT_S = 60.0  # until the consumer owns a partition; the run fails rather than waits forever
JOIN_POLL_S = 0.1
COMMITTED_TIMEOUT_S = 30.0  # asking the group's committed offset before the run
WARM_UP_DEFAULT = 10


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = kinds.add_parser(
        "offset-commit",
        help="a consumer's synchronous offset commits, one after the other: latency and commits/s "
        "(librdkafka, any Kafka broker)",
    )
    parser.add_argument("--commits", type=positive, default=1000, help="how many to time (default 1000)")
    parser.add_argument(
        "--warmup",
        type=not_negative,
        default=WARM_UP_DEFAULT,
        help=f"commits before the clock starts (default {WARM_UP_DEFAULT})",
    )
    parser.add_argument("--group", help=f"the consumer group (default: {GROUP_PREFIX}<pid>, a new one)")
    perf_kafka.topic_options(parser, DEFAULT_TOPIC, partitions=1)
    parser.set_defaults(func=run)


def check_args(args: argparse.Namespace) -> None:
    """Every option checked before anything connects; CliError naming the flag."""
    perf_kafka.check_topic(args.topic)
    if args.group is not None and not args.group.strip():
        raise CliError("--group: expected a group id, got an empty one")
    if "group.id" in perf_kafka.client_properties(args.config):
        raise CliError("--config: group.id is set by this command (--group)")
    if args.replication_factor > perf_kafka.REPLICATION_FACTOR_MAX:
        raise CliError(
            f"--replication-factor: at most {perf_kafka.REPLICATION_FACTOR_MAX}, got {args.replication_factor}"
        )
    if args.min_insync_replicas is not None and args.min_insync_replicas > args.replication_factor:
        raise CliError(
            f"--min-insync-replicas: at most --replication-factor ({args.replication_factor}), "
            f"got {args.min_insync_replicas}"
        )


def group_id(args: argparse.Namespace) -> str:
    return args.group if args.group is not None else f"{GROUP_PREFIX}{os.getpid()}"


def commit_report(latencies_ms: list[float], elapsed_s: float, errors: dict[str, int]) -> dict[str, Any]:
    """The timed run: commits that succeeded, their rate over the whole run (failed ones'
    time included: the client waited for them too) and latency percentiles."""
    commits = len(latencies_ms)
    return {
        "commits": commits,
        "seconds": round(elapsed_s, 3),
        "commits_per_s": round(commits / elapsed_s, 1) if elapsed_s > 0 else 0.0,
        **latency_summary(latencies_ms),
        "errors": sum(errors.values()),
        "errors_by_kind": dict(sorted(errors.items())),
    }


def run(args: argparse.Namespace) -> int:
    check_args(args)
    ck = perf_kafka._confluent_kafka()
    bootstrap = perf_kafka.kafka_bootstrap(args)
    client_errors = perf_kafka.ClientErrors()
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id(args),
        "enable.auto.commit": False,
        **perf_kafka.ssl_properties(args),
        **perf_kafka.client_properties(args.config),
        "error_cb": client_errors,
    }
    # before the topic: a property librdkafka refuses is reported at once
    consumer = perf_kafka._client(ck.Consumer, config)
    try:
        perf_kafka.ensure_topic(bootstrap, args)
        partition = _join(ck, consumer, args.topic)
        result = _measure(ck, consumer, partition, args)
    finally:
        consumer.close()
    result = {
        "bootstrap": bootstrap,
        "topic": args.topic,
        "partition": partition.partition,
        "group": group_id(args),
        "warmup_commits": args.warmup,
        **result,
        "client_errors": client_errors.count,
        "first_client_error": client_errors.first(),
    }
    _print(result, args.output)
    return 0 if result["errors"] == 0 else 1


def _join(ck: Any, consumer: Any, topic: str) -> Any:
    """Subscribe and poll until the group gives this member a partition (it commits for
    its lowest); then stop fetching."""

    def from_the_end(consumer: Any, partitions: list[Any]) -> None:
        for tp in partitions:  # not from the committed offsets: past the log end, once committed
            tp.offset = ck.OFFSET_END

    consumer.subscribe([topic], on_assign=from_the_end)
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while not (assigned := consumer.assignment()):
        if time.monotonic() > deadline:
            raise CliError(f"the consumer was assigned no partition of {topic!r} within {JOIN_TIMEOUT_S:g} s")
        message = consumer.poll(JOIN_POLL_S)  # runs the join; records it may bring are not read
        if message is not None and message.error() is not None and message.error().fatal():
            raise CliError(f"the consumer failed: {message.error().str()}")
    consumer.pause(assigned)  # it commits, it never reads: fetches would add their cost to the figures
    return min(assigned, key=lambda tp: tp.partition)


def _measure(ck: Any, consumer: Any, partition: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, then time ``--commits`` synchronous commits, each of the next offset."""
    committed = consumer.committed([partition], timeout=COMMITTED_TIMEOUT_S)[0].offset
    first = offset = max(committed, 0)
    errors: dict[str, int] = {}

    def commit() -> bool:
        nonlocal offset
        offset += 1
        try:
            answer = consumer.commit(
                offsets=[ck.TopicPartition(partition.topic, partition.partition, offset)], asynchronous=False
            )
        except ck.KafkaException as e:
            name = e.args[0].name()
        else:
            error = answer[0].error if answer else None
            if error is None:
                return True
            name = error.name()
        errors[name] = errors.get(name, 0) + 1
        return False

    for _ in range(args.warmup):
        commit()
    errors.clear()  # the warm-up's are not the run's
    cpu = CpuMeter(args)
    latencies_ms: list[float] = []
    clock = time.perf_counter
    start = clock()
    for _ in range(args.commits):
        began = clock()
        if commit():
            latencies_ms.append((clock() - began) * 1000)
    elapsed_s = clock() - start
    cpu_s_per_million = cpu.per_million(len(latencies_ms))
    return {
        "offsets": f"{first + 1}-{offset}",  # committed over the run, warm-up included
        **commit_report(latencies_ms, elapsed_s, errors),
        # CPU seconds per million commits is CPU microseconds per commit
        "cpu_us_per_commit": cpu_s_per_million,
    }


def _print(result: dict[str, Any], output_format: str) -> None:
    if output_format == "json":
        print(output.to_json(result))
        return
    cpu = result.pop("cpu_us_per_commit")
    print(output.fields([(k.replace("_", " "), v) for k, v in result.items()]))
    print("CPU microseconds per commit:")
    print(output.table(["PROCESS", "CPU US"], sorted(cpu.items())))
