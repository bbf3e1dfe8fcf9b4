"""Scripted voter changes (KIP-853) in the deterministic simulation: each scenario drives
one change through the real core and checks what every node ends up with, under the
same invariants as the random seeds."""

from __future__ import annotations

import random

import pytest

from raftka.raft.core import NotLeaderError, RaftCore
from raftka.raft.voters import ChangeRefusal, Voter, VoterChangeError, VoterSet
from tests.simulation.cluster import Cluster
from tests.simulation.faults import Nemesis
from tests.simulation.mutants import MUTANT_CORES
from tests.simulation.node import role_of
from tests.simulation.test_simulation import leader, scenario, settle


def change(cluster: Cluster, what: object) -> object:
    """Run ``what(core, now)`` on the leader; returns its result or the refusal raised."""
    return cluster.nodes[leader(cluster)].change_voters(what)  # type: ignore[arg-type]


def core(cluster: Cluster, nid: int) -> RaftCore:
    node_core = cluster.nodes[nid].core
    assert isinstance(node_core, RaftCore)
    return node_core


def voter_ids(cluster: Cluster, nid: int) -> set[int]:
    return set(core(cluster, nid).voter_set.ids)


def add(cluster: Cluster, nid: int) -> object:
    voter = cluster.nodes[nid].voter()
    return change(cluster, lambda c, now: c.add_voter(voter, now))


def remove(cluster: Cluster, nid: int, directory_id: str | None = None) -> object:
    directory = directory_id if directory_id is not None else f"dir-{nid}-0"
    return change(cluster, lambda c, now: c.remove_voter(nid, directory, now))


def refusal(result: object) -> ChangeRefusal | None:
    return result.refusal if isinstance(result, VoterChangeError) else None


def everyone_sees(cluster: Cluster, ids: set[int], timeout_ms: int = 5_000) -> bool:
    return cluster.run_until(lambda: all(voter_ids(cluster, n) == ids for n in cluster.up_ids()), timeout_ms)


def test_a_static_quorum_refuses_changes() -> None:
    with scenario(1) as cluster:
        assert refusal(add(cluster, 4)) is ChangeRefusal.STATIC_QUORUM
        assert voter_ids(cluster, 4) == {1, 2, 3}


@pytest.mark.parametrize("seed", [1, 2])
def test_an_observer_is_added_once_caught_up_one_change_at_a_time(seed: int) -> None:
    with scenario(seed, dynamic=True) as cluster:
        cluster.crash(5)
        cluster.run_for(cluster.config.fetch_timeout_ms + 100)
        assert refusal(add(cluster, 5)) is ChangeRefusal.NOT_CAUGHT_UP  # no longer fetching
        assert refusal(add(cluster, 1 if leader(cluster) != 1 else 2)) is ChangeRefusal.DUPLICATE_VOTER
        first = add(cluster, 4)
        assert not isinstance(first, Exception), first
        assert refusal(add(cluster, 4)) in (ChangeRefusal.CHANGE_IN_PROGRESS, ChangeRefusal.DUPLICATE_VOTER)
        cluster.restart(5)
        assert refusal(remove(cluster, 1)) is ChangeRefusal.CHANGE_IN_PROGRESS  # the add is uncommitted
        assert everyone_sees(cluster, {1, 2, 3, 4})
        settle(cluster)
        assert cluster.run_until(lambda: not isinstance(add(cluster, 5), Exception), 5_000)
        assert everyone_sees(cluster, {1, 2, 3, 4, 5})
        # five voters now: two of the first three down, and the quorum still commits
        lead = leader(cluster)
        for nid in sorted({1, 2, 3} - {lead})[:2]:
            cluster.crash(nid)
        settle(cluster)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_leader_removes_itself_then_hands_over(seed: int) -> None:
    with scenario(seed, dynamic=True) as cluster:
        old = leader(cluster)
        epoch = core(cluster, old).epoch
        result = remove(cluster, old)
        assert not isinstance(result, Exception), result
        assert role_of(core(cluster, old)) == "leader"  # it leads on until the removal commits
        rest = {1, 2, 3} - {old}
        assert everyone_sees(cluster, rest)
        assert cluster.run_until(lambda: cluster.leader_id() in rest, 5_000), "no successor"
        assert core(cluster, leader(cluster)).epoch > epoch
        assert role_of(core(cluster, old)) == "observer"
        settle(cluster)
        # it is an observer now: the two others alone carry the quorum
        cluster.crash(old)
        settle(cluster)


@pytest.mark.parametrize("seed", [1, 2])
def test_an_uncommitted_change_is_undone_by_truncation(seed: int) -> None:
    with scenario(seed, dynamic=True) as cluster:
        old = leader(cluster)
        others = sorted({1, 2, 3} - {old})
        cluster.partition([old, 4, 5], others)
        # 4 fetches from the cut-off leader and is taken once caught up there (it may not have
        # fetched yet), well before the leader's check-quorum deposes it
        results: list[object] = []
        assert cluster.run_until(
            lambda: not isinstance(_appended(results, add(cluster, 4)), Exception), 1_000
        )
        assert not isinstance(results[-1], (VoterChangeError, NotLeaderError)), results[-1]
        assert voter_ids(cluster, old) == {1, 2, 3, 4}  # in effect at once, uncommitted
        assert cluster.run_until(lambda: cluster.leader_id() in others, 5_000), "the majority elects"
        cluster.heal()
        settle(cluster)
        assert everyone_sees(cluster, {1, 2, 3}), "the deposed leader's change was truncated away"


@pytest.mark.parametrize("seed", [1, 2])
def test_snapshots_carry_the_voter_set(seed: int) -> None:
    with scenario(seed, snapshot_every=10, dynamic=True) as cluster:
        assert cluster.run_until(lambda: not isinstance(add(cluster, 4), Exception), 5_000)
        assert everyone_sees(cluster, {1, 2, 3, 4})
        follower = min({1, 2, 3} - {leader(cluster)})
        cluster.crash(follower)
        target = cluster.invariants.committed_records + 200
        assert cluster.run_until(lambda: cluster.invariants.committed_records >= target, 10_000)
        lead = core(cluster, leader(cluster))
        change_offset = cluster.invariants.voter_changes[-1][0]
        assert lead.log_start_offset > change_offset, "the VotersRecord was compacted away"
        snapshot = cluster.nodes[leader(cluster)].disk.oracle.snapshot
        assert snapshot is not None and VoterSet.decode(snapshot.voters).ids == {1, 2, 3, 4}
        cluster.restart(follower)  # installs the leader's snapshot
        settle(cluster)
        assert voter_ids(cluster, follower) == {1, 2, 3, 4}
        for nid in sorted(cluster.nodes):  # and every node restarts from its own snapshot
            cluster.crash(nid)
        for nid in sorted(cluster.nodes):
            cluster.restart(nid)
        settle(cluster)
        assert everyone_sees(cluster, {1, 2, 3, 4})


@pytest.mark.parametrize("seed", [1, 2])
def test_a_replaced_disk_is_a_new_replica_added_again(seed: int) -> None:
    with scenario(seed, dynamic=True) as cluster:
        victim = min({1, 2, 3} - {leader(cluster)})
        cluster.wipe(victim)
        cluster.restart(victim)
        settle(cluster)
        node = cluster.nodes[victim]
        assert node.directory_id == f"dir-{victim}-1"
        assert role_of(core(cluster, victim)) == "observer", "a new disk is never the voter it replaced"
        assert not core(cluster, victim).is_voter
        description = core(cluster, leader(cluster)).describe()
        assert (victim, node.directory_id) in {(o.node_id, o.directory_id) for o in description.observers}
        old = next(v for v in description.voters if v.node_id == victim)
        assert old.directory_id != node.directory_id, "the new disk's fetches never count as the old voter's"
        fresh = Voter(victim, node.directory_id)
        assert (
            refusal(change(cluster, lambda c, now: c.add_voter(fresh, now))) is ChangeRefusal.DUPLICATE_VOTER
        )
        assert refusal(remove(cluster, victim, node.directory_id)) is ChangeRefusal.VOTER_NOT_FOUND
        assert not isinstance(remove(cluster, victim), Exception)  # the old storage's entry
        settle(cluster)
        assert cluster.run_until(lambda: not isinstance(add(cluster, victim), Exception), 5_000)
        assert everyone_sees(cluster, {1, 2, 3})
        assert core(cluster, victim).voter_set.get(victim) == fresh
        assert cluster.run_until(lambda: core(cluster, victim).is_voter, 5_000)
        settle(cluster)


@pytest.mark.parametrize("seed", [1, 2])
def test_no_disk_is_replaced_while_a_down_node_holds_an_uncommitted_change(seed: int) -> None:
    """Seeds 10836 and 19445, scripted: a leader cut off from the other voters removes one
    of them (its log says {leader, kept}, uncommitted) and goes down; the others carry on
    under the committed set, so every live node agrees on it. Replacing kept's disk now
    would leave the down node, once back, in a voter set with no majority left, and a log
    too long for the rest to win its vote: the nemesis waits for the node to come back."""
    with scenario(seed, dynamic=True) as cluster:
        old = leader(cluster)
        kept, removed = sorted({1, 2, 3} - {old})
        cluster.partition([old], [kept, removed, 4, 5])
        assert not isinstance(remove(cluster, removed), Exception)
        oracle = cluster.nodes[old].disk.oracle
        assert cluster.run_until(
            lambda: getattr(oracle.latest_voter_change(), "ids", None) == {old, kept}, 1_000
        )
        cluster.crash(old)
        cluster.heal()
        assert cluster.run_until(lambda: cluster.leader_id() in (kept, removed), 5_000)
        committed = cluster.invariants.committed_voters()
        assert committed.ids == {1, 2, 3}
        assert cluster.run_until(
            lambda: all(core(cluster, n).voter_set == committed for n in cluster.up_ids()), 5_000
        )
        nemesis = Nemesis(cluster, cluster.profile, random.Random(seed))
        assert not nemesis._wipe(), "a disk was replaced while the down node's change was in flight"
        assert all(node.disk_generation == 0 for node in cluster.nodes.values())
        cluster.restart(old)
        settle(cluster)
        assert everyone_sees(cluster, {1, 2, 3}), "the down node's change was truncated away"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_removed_voter_stranded_in_a_newer_epoch_finds_the_leader(seed: int) -> None:
    """Seed 1270's failure, scripted: a voter campaigns into a newer epoch, its vote
    requests are lost, and it is removed while cut off. No leader announces itself to a
    replica outside the voter set, and the voters refuse its pre-votes from an older epoch
    it cannot go back to: once its election fails it fetches, as an observer does, and
    the stale leader it reaches steps down into its epoch, so the next election moves the
    quorum past it."""
    with scenario(seed, dynamic=True) as cluster:
        stranded = _strand_a_removed_voter(cluster)
        settle(cluster, 10_000)
        assert role_of(core(cluster, stranded)) == "observer"


@pytest.mark.parametrize("mutant", ["never-seeks-leader", "deaf-to-newer-fetch"])
def test_a_stranded_voter_stays_stranded_without_either_half(mutant: str) -> None:
    with scenario(1, dynamic=True, factory=MUTANT_CORES[mutant]) as cluster:
        stranded = _strand_a_removed_voter(cluster)
        since = cluster.scheduler.now_ms
        assert not cluster.run_until(lambda: cluster.converged(since), 10_000)
        assert role_of(core(cluster, stranded)) != "observer"


def _strand_a_removed_voter(cluster: Cluster) -> int:
    old = leader(cluster)
    cluster.isolate(old)  # long enough for the followers to lose it, short of check-quorum

    def candidates() -> list[int]:
        return [n for n in sorted({1, 2, 3} - {old}) if role_of(core(cluster, n)) == "candidate"]

    assert cluster.run_until(lambda: bool(candidates()), 1_400, check_every_ms=1)
    stranded = candidates()[0]
    cluster.heal()
    cluster.cut([(stranded, n) for n in sorted(cluster.nodes) if n != stranded])  # its votes are lost
    assert cluster.run_until(lambda: not isinstance(remove(cluster, stranded), Exception), 2_000)
    others = [n for n in cluster.up_ids() if n != stranded]
    assert cluster.run_until(
        lambda: all(voter_ids(cluster, n) == {1, 2, 3} - {stranded} for n in others), 5_000
    )
    assert core(cluster, stranded).epoch > core(cluster, leader(cluster)).epoch
    cluster.heal()
    return stranded


def _appended(results: list[object], result: object) -> object:
    results.append(result)
    return result
