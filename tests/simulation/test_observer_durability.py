"""Observers append without fsyncing (issue 32): what a power cut costs them and why no
offset they lose ever counted. An observer holds only committed records, so a power cut
loses its unsynced tail and it fetches it again; a node made a voter fsyncs what it holds
before its first acknowledgement, and its leader counts its fetch offset only once that
fetch shows it holds the VotersRecord that added it."""

from __future__ import annotations

import pytest

from raftka.raft.config import RaftConfig
from tests.simulation.cluster import Cluster
from tests.simulation.mutants import MUTANT_CORES
from tests.simulation.test_membership import add, core, everyone_sees
from tests.simulation.test_simulation import leader, propose_directly, scenario, settle

OBSERVER = 4


def _power_cut_with_unsynced_tail(cluster: Cluster, nid: int) -> tuple[int, int]:
    """Wait until ``nid`` holds unsynced appends, cut its power; (held, durable) log ends."""
    disk = cluster.nodes[nid].disk
    assert cluster.run_until(lambda: bool(disk.unsynced), 2_000), "the observer fsynced every append"
    held = disk.held.end_offset
    cluster.crash(nid)
    return held, disk.oracle.end_offset


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_observer_refetches_the_tail_a_power_cut_took(seed: int) -> None:
    """It restarts from what survived (never its pre-crash offset), applies every committed
    batch once and in order (the invariants check each against the committed history), and
    catches up with the leader."""
    with scenario(seed, snapshot_every=25) as cluster:
        observer = cluster.nodes[OBSERVER]

        def caught_up() -> bool:
            return observer.sm.state.next_offset == core(cluster, leader(cluster)).high_watermark

        lost = 0
        for _ in range(5):
            held, durable = _power_cut_with_unsynced_tail(cluster, OBSERVER)
            lost += held - durable
            cluster.restart(OBSERVER)
            assert core(cluster, OBSERVER).log_end_offset == durable
            settle(cluster)
            cluster.client.stop()
            assert cluster.run_until(caught_up, 2_000), "the observer did not catch up"
            assert observer.sm.state == cluster.invariants.boundaries[observer.sm.state.next_offset]
            cluster.client.start()
        assert lost > 0, "no power cut lost any unsynced record"


def test_voters_fsync_every_append() -> None:
    with scenario(1) as cluster:
        target = cluster.invariants.committed_records + 50
        assert cluster.run_until(lambda: cluster.invariants.committed_records >= target, 5_000)
        for nid in sorted(cluster.voters):
            assert not cluster.nodes[nid].disk.unsynced


def _add_a_fifth_voter_while_two_are_cut_off(cluster: Cluster) -> bool:
    """Four voters, two of them cut off: the leader holds uncommitted batches, then adds
    observer 5, which fetches them one batch per answer (without fsyncing: it is no voter
    by its own log until it holds the VotersRecord). Were its fetch offsets counted, the
    leader, one follower and 5 would commit them, and 5's power cut would leave them on two
    of the four voters that committed the set they belong to. Returns whether the leader
    committed past what 5 held durably (then its power cut at once follows)."""
    assert cluster.run_until(lambda: not isinstance(add(cluster, 4), Exception), 5_000)
    assert everyone_sees(cluster, {1, 2, 3, 4})
    settle(cluster)
    lead = leader(cluster)
    follower, *cut_off = sorted({1, 2, 3, 4} - {lead})
    cluster.client.stop()
    cluster.partition([lead, follower, 5], cut_off)
    assert propose_directly(cluster, lead, 5)
    before = core(cluster, lead).high_watermark
    assert not isinstance(add(cluster, 5), Exception)
    disk = cluster.nodes[5].disk

    def committed_past_what_5_holds_durably() -> bool:  # only 5's acknowledgement completes a majority now
        return core(cluster, lead).high_watermark > max(before, disk.oracle.end_offset)

    early = cluster.run_until(committed_past_what_5_holds_durably, 300, 1)
    cluster.crash(5)
    cluster.run_for(10)
    cluster.heal()
    cluster.restart(5)
    cluster.client.start()
    settle(cluster, 10_000)
    return early


SMALL_FETCHES = RaftConfig(fetch_max_batches=1)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_new_voter_counts_once_it_holds_its_voters_record(seed: int) -> None:
    with scenario(seed, dynamic=True, config=SMALL_FETCHES) as cluster:
        assert not _add_a_fifth_voter_while_two_are_cut_off(cluster)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_counting_a_new_voter_before_it_holds_its_record_is_caught(seed: int) -> None:
    factory = MUTANT_CORES["counts-new-voter-early"]
    with (
        pytest.raises(AssertionError, match="hold it durably"),
        scenario(seed, dynamic=True, config=SMALL_FETCHES, factory=factory) as cluster,
    ):
        _add_a_fifth_voter_while_two_are_cut_off(cluster)
