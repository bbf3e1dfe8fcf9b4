"""Regressions: core bugs the interaction scripts found, stated as what the core must do.

Each test replays a script from testdata/regressions/ (its recorded trace shows the
fixed behaviour) and checks the property the bug broke.
"""

from __future__ import annotations

from pathlib import Path

from tests.unit.interaction.runner import Interaction, run_script

REGRESSIONS = Path(__file__).parent / "testdata" / "regressions"


def _replay(name: str) -> Interaction:
    interaction = Interaction()
    run_script((REGRESSIONS / f"{name}.txt").read_text(), interaction)
    return interaction


def test_two_outstanding_fetches_settle_into_long_polling() -> None:
    interaction = _replay("duplicate_fetch_spins")
    interaction.run("stabilize")  # raises ScriptError while the fetches keep bouncing


def test_a_committed_record_survives_a_wiped_voter_restarting_twice() -> None:
    interaction = _replay("wiped_voter_restarts_before_catching_up")
    batch = interaction.nodes[1].running().log.batch_at(1)
    assert batch is not None and batch.records == (b"a",), batch


def test_a_leader_resigning_before_announcing_itself_still_hands_over_at_once() -> None:
    interaction = _replay("resign_before_announcing")
    leaders = [n.node_id for n in interaction.nodes.values() if n.running().is_leader]
    assert leaders and leaders != [1], leaders
