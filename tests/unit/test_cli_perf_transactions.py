"""``raftka perf transactions``: every option checked before anything connects, with the
flag named, and which transactions a run aborts. The run itself needs a cluster with
transactions: tests/integration/test_transactions.py runs it tiny."""

from __future__ import annotations

import pytest

from raftka.cli.main import main
from raftka.tools.perf.perf_transactions import aborts

RUN = ["perf", "transactions", "--bootstrap-server", "127.0.0.1:1", "--transactions", "5"]


@pytest.mark.parametrize(
    ("extra", "status", "problem"),
    [
        (["--transactions", "0"], 2, "argument --transactions: expected 1 or more, got 0"),
        (["--records-per-partition", "0"], 2, "argument --records-per-partition: expected 1 or more"),
        (["--record-size", "1000001"], 1, "--record-size: at most 1000000 bytes, got 1000001"),
        (["--abort-every", "-1"], 1, "--abort-every: expected 0 (none) or more, got -1"),
        (["--reads", "0"], 2, "argument --reads: expected 1 or more, got 0"),
        (["--partitions", "0"], 2, "argument --partitions: expected 1 or more"),
        (["--topic", "a b"], 1, "--topic: topic name 'a b' contains characters other than"),
        (
            ["--replication-factor", "1", "--min-insync-replicas", "2"],
            1,
            "--min-insync-replicas: at most --replication-factor (1), got 2",
        ),
        (["--config", "linger.ms"], 1, "--config: expected KEY=VALUE, got 'linger.ms'"),
        (["--bootstrap-server", "nohost"], 1, "--bootstrap-server"),
        (
            ["--clients", "kafkajs"],
            1,
            "--clients: expected some of confluent-kafka, raftka, each once, got 'kafkajs'",
        ),
        (["--clients", "raftka,raftka"], 1, "--clients: expected some of confluent-kafka, raftka, each once"),
        (["--clients", "raftka"], 1, "--clients: raftka's producer speaks raftka's data protocol"),
        (
            ["--config", "no.such.property=1"],
            1,
            "librdkafka refused the producer's configuration (--config?): No such configuration property",
        ),
    ],
)
def test_perf_transactions_refuses_a_bad_option_naming_it_before_connecting(
    extra: list[str], status: int, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("confluent_kafka")
    with pytest.raises(SystemExit) as exit_info:
        main(RUN + extra)
    line = capsys.readouterr().err.strip()
    assert (exit_info.value.code, problem in line) == (status, True), line
    assert line.startswith("raftka: error: ") and "\n" not in line


def test_every_nth_transaction_is_aborted_and_none_with_zero() -> None:
    assert [n for n in range(1, 11) if aborts(n, 3)] == [3, 6, 9]
    assert not any(aborts(n, 0) for n in range(1, 11))
    assert all(aborts(n, 1) for n in range(1, 11))
