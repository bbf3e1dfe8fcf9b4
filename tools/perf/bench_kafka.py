"""``make bench-kafka`` (``python -m raftka.tools.perf.bench_kafka``): one librdkafka load, ``raftka perf
kafka`` then ``raftka perf kafka-consume``, against Tansu and against the local raftka
cluster, printed side by side.

Tansu (``tools/perf/tansu.py``) is one broker keeping everything in memory, so its topic has
one replica; raftka's has ``--raftka-replication-factors`` (default 3, with
``min.insync.replicas`` 2), on disk. Both get the same records, acks, linger, batch
size, partitioner and partition count. Each target gets a fresh topic, deleted from
raftka afterwards. When the local cluster is not running (``--dir``, default the one
``raftka cluster up`` finds), it is started with ``raftka cluster up`` and stopped
again at the end; Tansu is always stopped, however the run ends.

CPU seconds per million records are per process: Tansu's, the sum of raftka's
controllers and brokers, and this process (the librdkafka client) in each run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from raftka.command import local, output
from raftka.command.data_args import positive
from raftka.command.errors import CliError
from raftka.tools.perf import perf, perf_kafka
from raftka.tools.perf.tansu import running_tansu

CLIENT = "perf-client"
TOPIC_PREFIX = "raftka-bench-kafka"


def build_arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m raftka.tools.perf.bench_kafka",
        description="raftka perf kafka against Tansu and raftka, side by side",
    )
    parser.add_argument(
        "--records", type=positive, default=1_000_000, help="records per run (default 1000000)"
    )
    parser.add_argument("--record-size", type=positive, default=100, help="bytes per record (default 100)")
    parser.add_argument("--acks", choices=perf_kafka.ACKS, default="all", help="default all")
    parser.add_argument("--throughput", type=int, default=-1, help="records/s cap (default -1: none)")
    parser.add_argument("--linger-ms", type=int, default=perf_kafka.LINGER_MS_DEFAULT)
    parser.add_argument("--batch-size", type=int, default=perf_kafka.BATCH_SIZE_DEFAULT)
    parser.add_argument("--partitioner", choices=perf_kafka.PARTITIONERS, default="murmur2_random")
    parser.add_argument("--partitions", type=positive, default=6, help="of each topic (default 6)")
    parser.add_argument(
        "--raftka-replication-factors",
        default="3",
        help="one raftka run per replication factor, comma separated (default 3; e.g. 3,1)",
    )
    parser.add_argument("--skip-tansu", action="store_true", help="measure raftka only")
    parser.add_argument(
        "--dir", type=Path, help="the local raftka cluster (default: the one cluster up finds)"
    )
    output.add_output_option(parser)
    return parser


def replication_factors(text: str) -> list[int]:
    try:
        factors = [int(part) for part in text.split(",")]
    except ValueError:
        raise CliError(f"--raftka-replication-factors: expected numbers like 3,1, got {text!r}") from None
    if not factors or any(f < 1 for f in factors):
        raise CliError(f"--raftka-replication-factors: each must be 1 or more, got {text!r}")
    return factors


def perf_args(options: argparse.Namespace, kind: str, topic: str, extra: Sequence[str]) -> argparse.Namespace:
    """The ``raftka perf kafka`` (or ``kafka-consume``) arguments of one run, parsed and
    checked by the command's own parser, so a run here is the command's run."""
    argv = ["perf", kind, "--records", str(options.records), "--topic", topic, *extra]
    if kind == "kafka":
        argv += [
            "--record-size",
            str(options.record_size),
            "--acks",
            options.acks,
            "--throughput",
            str(options.throughput),
            "--linger-ms",
            str(options.linger_ms),
            "--batch-size",
            str(options.batch_size),
            "--partitioner",
            options.partitioner,
            "--partitions",
            str(options.partitions),
        ]
    args = perf_parser().parse_args(argv)
    if kind == "kafka":
        perf_kafka.check_produce_args(args)
    else:
        perf_kafka.check_consume_args(args)
    return args


def perf_parser() -> argparse.ArgumentParser:
    """``raftka perf`` as the ``raftka`` command registers it (this tool may not import ``raftka.cli``)."""
    parser = argparse.ArgumentParser(prog="raftka")
    perf.register(parser.add_subparsers(dest="command", required=True))
    return parser


def one_target(
    options: argparse.Namespace,
    topic: str,
    source: Sequence[str],
    replication_factor: int,
    cpu_of: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Produce, then read back, through the brokers ``source`` names (``--bootstrap-server``
    or ``--dir``)."""
    topic_options = ["--replication-factor", str(replication_factor)]
    produced = perf_kafka.measure_produce(
        perf_args(options, "kafka", topic, [*source, *topic_options]), cpu_of
    )
    consumed = perf_kafka.measure_consume(perf_args(options, "kafka-consume", topic, source), cpu_of)
    return {"produce": produced, "consume": consumed}


@contextmanager
def local_cluster(cluster_dir: Path | None) -> Iterator[Path]:
    """The local cluster's directory, started with ``raftka cluster up`` if any node is
    down, and stopped again at the end only if it was started here."""
    resolved = local.resolve_dir(cluster_dir)
    running = local.exists(resolved) and all(local.is_alive(n) for n in local.load(resolved).nodes)
    if not running:
        _raftka("cluster", "up", "--dir", str(resolved))
    try:
        yield resolved
    finally:
        if not running:
            _raftka("cluster", "down", "--dir", str(resolved))


def _raftka(*argv: str) -> None:
    print(f"$ raftka {' '.join(argv)}", file=sys.stderr)
    done = subprocess.run([sys.executable, "-m", "raftka.cli.main", *argv], stdout=sys.stderr)
    if done.returncode != 0:
        raise CliError(f"raftka {' '.join(argv)} failed with status {done.returncode}")


def delete_topic(bootstrap: str, topic: str, ssl: Mapping[str, str]) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **ssl})
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        try:
            future.result()
        except Exception as e:  # the figures stand; a leftover topic is only disk
            print(f"could not delete topic {topic}: {e}", file=sys.stderr)


def run(options: argparse.Namespace) -> dict[str, dict[str, Any]]:
    factors = replication_factors(options.raftka_replication_factors)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results: dict[str, dict[str, Any]] = {}
    if not options.skip_tansu:
        with (
            tempfile.TemporaryDirectory(prefix="raftka-tansu-") as scratch,
            running_tansu(Path(scratch) / "tansu.log") as tansu,
        ):
            print(f"Tansu on {tansu.address} (pid {tansu.pid})", file=sys.stderr)
            # --dir: an empty one, so that a local cluster's certificate is not offered to Tansu
            source = ["--bootstrap-server", tansu.address, "--dir", scratch]
            results["tansu (rf 1, memory)"] = one_target(
                options, f"{TOPIC_PREFIX}-{stamp}", source, 1, {"tansu": tansu.pid}
            )
    with local_cluster(options.dir) as cluster_dir:
        for factor in factors:
            topic = f"{TOPIC_PREFIX}-{stamp}-rf{factor}"
            results[f"raftka (rf {factor})"] = one_target(options, topic, ["--dir", str(cluster_dir)], factor)
            # only once the run has checked whose brokers these are; a failed run leaves its topic
            local_args = argparse.Namespace(bootstrap_server=None, dir=cluster_dir)
            delete_topic(perf_kafka.kafka_bootstrap(local_args), topic, perf_kafka.ssl_properties(local_args))
    return results


def server_cpu(cpu: Mapping[str, float]) -> float:
    """CPU seconds per million records of every process but the load's own."""
    return round(sum(v for k, v in cpu.items() if k != CLIENT), 2)


def comparison_rows(results: Mapping[str, Mapping[str, Any]]) -> list[list[Any]]:
    """One row per figure, one column per target."""
    figures = [
        ("produce records/s", lambda r: f"{r['produce']['records_per_s']:,}"),
        ("produce MB/s", lambda r: r["produce"]["mb_per_s"]),
        ("latency p50 ms", lambda r: r["produce"]["p50_ms"]),
        ("latency p99 ms", lambda r: r["produce"]["p99_ms"]),
        ("latency p99.9 ms", lambda r: r["produce"]["p999_ms"]),
        ("latency max ms", lambda r: r["produce"]["max_ms"]),
        ("delivery errors", lambda r: r["produce"]["errors"]),
        (
            "server CPU s / M records (produce)",
            lambda r: server_cpu(r["produce"]["cpu_s_per_million_records"]),
        ),
        ("client CPU s / M records (produce)", lambda r: r["produce"]["cpu_s_per_million_records"][CLIENT]),
        ("consume records/s", lambda r: f"{r['consume']['records_per_s']:,}"),
        ("consume MB/s", lambda r: r["consume"]["mb_per_s"]),
        ("records read", lambda r: r["consume"]["records"]),
        (
            "server CPU s / M records (consume)",
            lambda r: server_cpu(r["consume"]["cpu_s_per_million_records"]),
        ),
        ("client CPU s / M records (consume)", lambda r: r["consume"]["cpu_s_per_million_records"][CLIENT]),
    ]
    return [[name, *(value(result) for result in results.values())] for name, value in figures]


def main(argv: Sequence[str] | None = None) -> int:
    options = build_arguments().parse_args(argv)
    try:
        results = run(options)
    except CliError as e:
        print(f"bench-kafka: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench-kafka: interrupted", file=sys.stderr)
        return 130
    if options.output == "json":
        print(output.to_json(results))
    else:
        first = next(iter(results.values()))["produce"]
        print(
            f"{options.records:,} records of {options.record_size} bytes, acks={options.acks}, "
            f"linger.ms={first['linger_ms']}, batch.size={first['batch_size']}, "
            f"{first['partitions']} partitions, partitioner {first['partitioner']}"
        )
        print(output.table(["", *results], comparison_rows(results)))
    failed = any(
        r["produce"]["errors"] or r["consume"]["records"] < options.records for r in results.values()
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
