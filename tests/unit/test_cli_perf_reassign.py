"""``raftka perf reassign``'s refusals: bad arguments name their option, and a cluster too
small for the move is refused before anything is written. (The move itself, a partition of
1 GB on a quiet three-broker cluster, is for people to run: docs/performance.md.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.cli.main import main
from tests.unit.kafka_wire import broker_thread


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The command exits non-zero; its error line."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code != 0
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("--duration", "0", "--duration"),
        ("--record-size", "2000000", "--record-size"),
        ("--topic", "a b", "--topic"),
    ],
)
def test_bad_arguments_are_refused_naming_the_option(
    option: str, value: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert named in refused(["perf", "reassign", "--bootstrap-server", "127.0.0.1:1", option, value], capsys)


def test_a_single_broker_is_refused_before_any_topic_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("confluent_kafka")
    with broker_thread(tmp_path, {}) as served:
        error = refused(
            ["perf", "reassign", "--bootstrap-server", served.bootstrap, "--fill-mb", "1"], capsys
        )
        topics = served.run(_topics(served))
    assert "needs 3" in error
    assert "raftka-perf-reassign" not in topics


async def _topics(served) -> list[str]:  # noqa: ANN001
    return [t.name for t in served.broker.api.image.topics_by_id.values()]
