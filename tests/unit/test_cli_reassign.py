"""``raftka topics reassign`` and ``raftka brokers drain`` against the fake controller of
``test_cli_admin_commands`` (topic "orders": partition 0 on 101,102, partition 1 on
102,103; broker 101 unfenced, 102 fenced): what each mode sends and prints."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftka.cli.main import main
from raftka.metadata.reassign_plan import to_json
from tests.unit.test_cli_admin_commands import FakeController, cli, cli_json, failure, fake_controller


@pytest.fixture
def controller() -> Iterator[FakeController]:
    with fake_controller() as fake:
        yield fake


PLAN = {("orders", 0): (101, 102), ("orders", 1): (101, 102)}


def sent(fake: FakeController) -> dict[tuple[str, int], tuple[int, ...] | None]:
    method, request = fake.requests[-1]
    assert method == "AlterPartitionReassignments"
    return {
        (t.name, p.partition): tuple(p.replicas.ids) if p.HasField("replicas") else None
        for t in request.topics
        for p in t.partitions
    }


def test_generate_prints_the_current_assignment_and_a_proposal_over_the_broker_list(
    controller: FakeController, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    topics = tmp_path / "topics.json"
    topics.write_text('{"version": 1, "topics": [{"topic": "orders"}]}')
    args = (
        "topics",
        "reassign",
        "--generate",
        "--topics-to-move-json-file",
        str(topics),
        "--broker-list",
        "101,102",
    )
    view = cli_json(controller, capsys, *args)
    assert view["current"] == [
        {"topic": "orders", "partition": 0, "replicas": [101, 102]},
        {"topic": "orders", "partition": 1, "replicas": [103]},  # the target of its move
    ]
    assert [sorted(p["replicas"]) for p in view["proposed"]] == [[101, 102], [101, 102]]
    text = cli(controller, capsys, *args)
    current, proposed = text.split("\n\n")
    assert current.splitlines()[0] == "Current partition replica assignment"
    assert proposed.splitlines()[0] == "Proposed partition reassignment configuration"
    assert json.loads(proposed.splitlines()[1])["version"] == 1


def test_execute_cancel_and_spread_send_the_plan_and_verify_tells_each_partition(
    controller: FakeController, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(to_json(PLAN))
    out = cli(controller, capsys, "topics", "reassign", "--execute", "--reassignment-json-file", str(plan))
    assert sent(controller) == PLAN
    assert "Successfully started partition reassignments for orders-0,orders-1" in out
    assert json.loads(out.split("\n\n")[1]) == json.loads(
        to_json({("orders", 0): (101, 102), ("orders", 1): (103,)})
    )  # orders-1 is moving from 102 to 103: its target

    cli(controller, capsys, "topics", "reassign", "--cancel", "--reassignment-json-file", str(plan))
    assert sent(controller) == dict.fromkeys(PLAN)

    cli(controller, capsys, "topics", "reassign", "--topic", "orders", "--brokers", "101,102")
    assert {k: sorted(v or ()) for k, v in sent(controller).items()} == {k: [101, 102] for k in PLAN}

    assert main(["topics", "reassign", "--verify", "--reassignment-json-file", str(plan),
                 "--bootstrap-controller", controller.address]) == 1  # type: ignore[attr-defined]  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "Status of partition reassignment:",
        "Reassignment of partition orders-0 is completed.",
        "There is no active reassignment of partition orders-1, but replica set is 103 rather than 101,102.",
    ]


def test_a_drain_during_a_move_plans_from_the_target_replicas(
    controller: FakeController, capsys: pytest.CaptureFixture[str]
) -> None:
    """orders-1 is moving from 102 to 103: draining 103 replaces it in the target, and
    does not bring back 102, which is leaving (issue 30: a partition grew to RF 4)."""
    cli(controller, capsys, "brokers", "drain", "103", "--no-wait")
    assert sent(controller) == {("orders", 1): (101,)}


def test_a_bad_plan_file_and_an_impossible_drain_are_refused_naming_why(
    controller: FakeController, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"version": 1, "partitions": [{"topic": "orders", "partition": 0, "replicas": []}]}')
    address = controller.address  # type: ignore[attr-defined]
    line = failure(
        capsys,
        "topics",
        "reassign",
        "--execute",
        "--reassignment-json-file",
        str(plan),
        "--bootstrap-controller",
        address,
    )
    assert "partitions[0].replicas: at least one broker id" in line
    line = failure(capsys, "brokers", "drain", "101", "--bootstrap-controller", address)
    assert "broker 101 cannot be drained" in line and "no broker outside" in line
    assert not any(m == "AlterPartitionReassignments" for m, _ in controller.requests)
