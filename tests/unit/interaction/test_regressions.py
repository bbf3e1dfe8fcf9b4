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


def test_two_observers_sharing_an_id_cost_the_leader_what_two_observers_cost() -> None:
    shared = _replay("observers_sharing_an_id")  # raises ScriptError while the fetches keep bouncing
    distinct = Interaction()
    script = (REGRESSIONS / "observers_sharing_an_id.txt").read_text()
    run_script(script.replace(" shared-id=(4,5)", ""), distinct)

    def fetches_in_2s(interaction: Interaction) -> int:
        return interaction.run("elapse 2000").count("FetchRequest")

    assert fetches_in_2s(shared) == fetches_in_2s(distinct)
    assert [shared.nodes[n].sm.records for n in (4, 5)] == [["x"], ["x"]]
    leader = shared.nodes[1].running()
    assert leader.observer_fetch_overlaps > 0 and leader.overlapping_observer_id == 4


def test_a_committed_record_survives_a_wiped_voter_restarting_twice() -> None:
    interaction = _replay("wiped_voter_restarts_before_catching_up")
    batch = interaction.nodes[1].running().log.batch_at(1)
    assert batch is not None and batch.records == (b"a",), batch


def test_a_leader_resigning_before_announcing_itself_still_hands_over_at_once() -> None:
    interaction = _replay("resign_before_announcing")
    leaders = [n.node_id for n in interaction.nodes.values() if n.running().is_leader]
    assert leaders and leaders != [1], leaders
