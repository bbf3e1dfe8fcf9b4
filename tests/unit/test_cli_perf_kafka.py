"""``raftka perf kafka`` and ``perf kafka-consume``: every option checked before anything
connects, with the flag named; the report's arithmetic from counts alone (no timing); and
librdkafka's producer and consumer through the Kafka listener of a broker in this
process, every record delivered, stored and read back."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest

from raftka.cli.main import main
from raftka.command.errors import CliError
from raftka.tools.perf import perf_kafka
from raftka.tools.perf.perf_kafka import ClientErrors, Deliveries
from tests.unit.kafka_wire import broker_thread

TOPIC = "perf-events"
PARTITIONS = 3
INIT_PRODUCER_ID = 22  # Kafka's api key


def failure(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return int(exit_info.value.code), capsys.readouterr().err.strip()


# arguments ----------------------------------------------------------------------------

PRODUCE = ["perf", "kafka", "--bootstrap-server", "127.0.0.1:1", "--records", "10"]


@pytest.mark.parametrize(
    ("extra", "status", "problem"),
    [
        (["--records", "0"], 2, "argument --records: expected 1 or more, got 0"),
        (["--record-size", "0"], 2, "argument --record-size: expected 1 or more, got 0"),
        (["--record-size", "1000001"], 1, "--record-size: at most 1000000 bytes"),
        (
            ["--throughput", "0"],
            1,
            "--throughput: expected a cap of 1 record/s or more, or -1 for none, got 0",
        ),
        (["--throughput", "-5"], 1, "--throughput: expected a cap"),
        (["--acks", "2"], 2, "argument --acks: invalid choice: '2'"),
        (["--linger-ms", "-1"], 1, "--linger-ms: expected 0 to 900000, got -1"),
        (["--linger-ms", "900001"], 1, "--linger-ms: expected 0 to 900000"),
        (["--batch-size", "0"], 1, "--batch-size: expected 1 to 2147483647 bytes, got 0"),
        (["--partitioner", "sticky"], 2, "argument --partitioner: invalid choice: 'sticky'"),
        (["--idempotence", "--acks", "1"], 1, "--idempotence needs --acks all (got --acks 1)"),
        (["--replication-factor", "0"], 2, "argument --replication-factor: expected 1 or more"),
        (["--replication-factor", "40000"], 1, "--replication-factor: at most 32767"),
        (
            ["--replication-factor", "1", "--min-insync-replicas", "2"],
            1,
            "--min-insync-replicas: at most --replication-factor (1), got 2",
        ),
        (["--partitions", "0"], 2, "argument --partitions: expected 1 or more"),
        (["--topic", "a b"], 1, "--topic: topic name 'a b' contains characters other than"),
        (["--topic", ".."], 1, "--topic: topic name cannot be '..'"),
        (["--bootstrap-server", "nohost"], 1, "--bootstrap-server"),
        (["--output", "xml"], 2, "argument --output: invalid choice: 'xml'"),
        (["--config", "linger.ms"], 1, "--config: expected KEY=VALUE, got 'linger.ms'"),
        (["--config", "=5"], 1, "--config: expected KEY=VALUE, got '=5'"),
        (
            ["--config", "bootstrap.servers=h:1"],
            1,
            "--config: bootstrap.servers is set by this command (--bootstrap-server)",
        ),
        (
            ["--config", "no.such.property=1"],
            1,
            "librdkafka refused the producer's configuration (--config?): No such configuration property",
        ),
    ],
)
def test_perf_kafka_refuses_a_bad_option_naming_it_before_connecting(
    extra: list[str], status: int, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, line = failure(PRODUCE + extra, capsys)
    assert (code, problem in line) == (status, True), line
    assert line.startswith("raftka: error: ") and "\n" not in line


@pytest.mark.parametrize(
    ("extra", "status", "problem"),
    [
        (["--records", "-1"], 2, "argument --records: expected 1 or more, got -1"),
        (["--timeout-s", "0"], 1, "--timeout-s: expected a positive number of seconds, got 0"),
        (["--topic", ""], 1, "--topic: topic name must not be empty"),
        (["--config", "on_delivery=x"], 1, "--config: on_delivery is set by this command"),
        (
            ["--config", "fetch.queue.backoff.ms=-3"],
            1,
            "librdkafka refused the consumer's configuration (--config?)",
        ),
    ],
)
def test_perf_kafka_consume_refuses_a_bad_option_naming_it(
    extra: list[str], status: int, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, line = failure(
        ["perf", "kafka-consume", "--bootstrap-server", "127.0.0.1:1", "--records", "5", *extra], capsys
    )
    assert (code, problem in line) == (status, True), line


def test_without_bootstrap_server_the_running_local_clusters_kafka_listeners_are_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    this_process = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0].decode()  # what is_alive matches
    node = {"address": "127.0.0.1:2", "data_dir": "d", "log": "l", "data_address": "127.0.0.1:3"}
    state = {
        "cluster_id": "local-id",
        "nodes": [
            {"id": 1, "role": "controller", "config": "c", **node},
            *(
                {
                    "id": b,
                    "role": "broker",
                    "config": this_process,
                    "pid": os.getpid(),
                    "kafka_address": f"127.0.0.1:{9000 + b}",
                    **node,
                }
                for b in (101, 102)
            ),
        ],
    }
    (tmp_path / "cluster.json").write_text(json.dumps(state))
    args = argparse.Namespace(bootstrap_server=None, dir=tmp_path)
    assert perf_kafka.kafka_bootstrap(args) == "127.0.0.1:9101,127.0.0.1:9102"
    assert perf_kafka.expected_cluster_id(args) == "local-id"
    assert perf_kafka.expected_cluster_id(argparse.Namespace(bootstrap_server="h:1", dir=tmp_path)) is None

    state["nodes"][1]["pid"] = None  # type: ignore[index]
    (tmp_path / "cluster.json").write_text(json.dumps(state))
    code, line = failure(["perf", "kafka", "--records", "1", "--dir", str(tmp_path)], capsys)
    assert code == 1 and "broker(s) 101 of the local cluster" in line and "not running" in line

    state["nodes"][2]["kafka_address"] = ""  # type: ignore[index]
    (tmp_path / "cluster.json").write_text(json.dumps(state))
    code, line = failure(["perf", "kafka-consume", "--records", "1", "--dir", str(tmp_path)], capsys)
    assert code == 1 and "has no Kafka listener" in line and "--bootstrap-server" in line


def test_a_listener_of_another_cluster_on_the_local_clusters_ports_is_refused(tmp_path: Path) -> None:
    """The in-process broker answers with cluster id "c": a local cluster of another id that
    names its port is another cluster holding the ports, and nothing is sent to it."""
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    with broker_thread(tmp_path / "broker", {TOPIC: PARTITIONS}) as served:
        admin = AdminClient({"bootstrap.servers": served.bootstrap})
        assert perf_kafka._list_topics(admin, served.bootstrap, "c").cluster_id == "c"
        with pytest.raises(
            CliError, match="belong to cluster c, not to the local cluster mine: another cluster holds"
        ):
            perf_kafka._list_topics(admin, served.bootstrap, "mine")


def test_config_properties_come_after_the_options_they_may_override() -> None:
    args = argparse.Namespace(
        acks="1",
        linger_ms=5,
        batch_size=100,
        idempotence=False,
        partitioner="murmur2_random",
        config=["linger.ms=50", "compression.type=lz4", "client.id=a=b"],
    )
    config = perf_kafka.producer_config(args, "h:1")
    assert (config["linger.ms"], config["compression.type"], config["client.id"]) == ("50", "lz4", "a=b")
    assert (config["acks"], config["bootstrap.servers"]) == ("1", "h:1")


def test_min_insync_replicas_defaults_to_two_or_the_replication_factor() -> None:
    def of(rf: int, explicit: int | None = None) -> int:
        return perf_kafka.min_insync_replicas(
            argparse.Namespace(replication_factor=rf, min_insync_replicas=explicit)
        )

    assert (of(3), of(1), of(5, 4)) == (2, 1, 4)


# the report ---------------------------------------------------------------------------


class Error:
    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return f"{self._name} happened"


class Delivered:
    def __init__(self, latency_s: float | None) -> None:
        self._latency_s = latency_s

    def latency(self) -> float | None:
        return self._latency_s


def test_latency_is_sampled_every_kth_record_and_never_beyond_the_bound() -> None:
    assert perf_kafka.sample_every(1_000, samples_max=100_000) == 1
    assert perf_kafka.sample_every(199_999, samples_max=100_000) == 2  # 99,999 samples, not 199,999
    assert perf_kafka.sample_every(10_000_000, samples_max=100_000) == 100
    deliveries = Deliveries(sample_every=3, samples_max=4)
    for i in range(1, 31):
        deliveries(None, Delivered(i / 1000))
    assert deliveries.delivered == 30
    assert deliveries.latencies_ms == pytest.approx([3.0, 6.0, 9.0, 12.0])  # every third, then full


def test_every_failed_delivery_is_counted_by_kind_and_the_first_kept() -> None:
    deliveries = Deliveries(sample_every=1)
    deliveries(None, Delivered(0.002))
    deliveries(Error("_MSG_TIMED_OUT"), None)
    deliveries(Error("NOT_ENOUGH_REPLICAS"), None)
    deliveries(Error("_MSG_TIMED_OUT"), None)
    deliveries(None, Delivered(None))  # no latency known: counted, not sampled
    assert (deliveries.delivered, deliveries.failed) == (2, 3)
    assert deliveries.errors == {"_MSG_TIMED_OUT": 2, "NOT_ENOUGH_REPLICAS": 1}
    assert deliveries.first_error == "_MSG_TIMED_OUT: _MSG_TIMED_OUT happened"
    assert deliveries.latencies_ms == [2.0]


def test_produce_report_arithmetic() -> None:
    args = argparse.Namespace(
        records=1_000_000,
        record_size=100,
        acks="all",
        idempotence=False,
        partitioner="murmur2_random",
        linger_ms=5,
        batch_size=1_000_000,
        throughput=-1,
    )
    deliveries = Deliveries(sample_every=1)
    for ms in (1, 2, 3, 4, 100):
        deliveries(None, Delivered(ms / 1000))
    deliveries(Error("_MSG_TIMED_OUT"), None)
    client_errors = ClientErrors()
    for _ in range(12):
        client_errors(Error("_TRANSPORT"))
    report = perf_kafka.produce_report(args, 4.0, deliveries, client_errors)
    assert report["records_per_s"] == 250_000
    assert report["mb_per_s"] == 25.0  # 100 MB in 4 s
    assert (report["p50_ms"], report["max_ms"], report["avg_ms"]) == (3.0, 100.0, 22.0)
    assert (report["latency_samples"], report["delivered"], report["errors"]) == (5, 5, 1)
    assert report["errors_by_kind"] == {"_MSG_TIMED_OUT": 1}
    assert (report["client_errors"], len(client_errors.kept)) == (12, perf_kafka.CLIENT_ERRORS_KEPT)
    assert report["first_client_error"] == "_TRANSPORT: _TRANSPORT happened"
    assert report["throughput_cap"] is None


def test_consume_report_arithmetic() -> None:
    report = perf_kafka.consume_report(500_000, 50_000_000, 2.0, 0.3, {"_PARTITION_EOF": 2}, ClientErrors())
    assert (report["records_per_s"], report["mb_per_s"], report["errors"]) == (250_000, 25.0, 2)
    assert (report["startup_ms"], report["seconds"]) == (300.0, 2.0)  # the rates leave the startup out
    assert perf_kafka.consume_report(0, 0, 0.0, 60.0, {}, ClientErrors())["records_per_s"] == 0


# librdkafka against a broker in this process --------------------------------------------


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    status = main(argv)
    out = capsys.readouterr().out
    return status, json.loads(out[out.rfind("\n{\n") + 1 :])  # after the in-process broker's log lines


@pytest.mark.parametrize("acks", ["all", "1"])
def test_perf_kafka_delivers_every_record_to_the_broker_and_kafka_consume_reads_them_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], acks: str
) -> None:
    pytest.importorskip("confluent_kafka")
    records = 400
    with broker_thread(tmp_path, {TOPIC: PARTITIONS}) as served:
        common = ["--bootstrap-server", served.bootstrap, "--topic", TOPIC, "--output", "json"]
        status, produced = run_json(
            [
                "perf",
                "kafka",
                "--records",
                str(records),
                "--record-size",
                "64",
                "--acks",
                acks,
                "--linger-ms",
                "1",
                *common,
            ],
            capsys,
        )
        stored = [served.broker.replicas.get(TOPIC, p).log.log_end_offset for p in range(PARTITIONS)]
        everything = str(records + PARTITIONS)
        consume_status, consumed = run_json(
            ["perf", "kafka-consume", "--records", everything, *common], capsys
        )
    assert status == 0, produced
    assert (produced["delivered"], produced["errors"], produced["partitions"]) == (records, 0, PARTITIONS)
    assert produced["latency_samples"] == records and produced["first_error"] is None
    assert produced["warmup_records"] == PARTITIONS and all(stored), "a warm-up record in every partition"
    assert sum(stored) == records + PARTITIONS
    assert consume_status == 0, consumed
    assert (consumed["records"], consumed["errors"]) == (records + PARTITIONS, 0)
    assert consumed["mb_per_s"] >= 0 and "perf-client" in produced["cpu_s_per_million_records"]


def test_a_fatal_client_error_ends_the_run_with_librdkafkas_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--idempotence against a listener that does not serve InitProducerId (as an old
    broker): librdkafka fails fatally, and the run stops with the reason, not a traceback
    and not a hang."""
    pytest.importorskip("confluent_kafka")
    import raftka.broker.kafka.listener as listener_module

    serve_all = listener_module.KafkaDispatcher
    monkeypatch.setattr(
        listener_module,
        "KafkaDispatcher",
        lambda apis, quotas: serve_all([a for a in apis if a.key != INIT_PRODUCER_ID], quotas),
    )
    with broker_thread(tmp_path, {TOPIC: PARTITIONS}) as served:
        argv = [
            "perf",
            "kafka",
            "--bootstrap-server",
            served.bootstrap,
            "--topic",
            TOPIC,
            "--records",
            "50",
            "--idempotence",
        ]
        code, line = failure(argv, capsys)
        stored = sum(served.broker.replicas.get(TOPIC, p).log.log_end_offset for p in range(PARTITIONS))
    assert code == 1 and "the producer stopped on a fatal error: _UNSUPPORTED_FEATURE" in line, line
    assert "--no-idempotence" in line and stored == 0
