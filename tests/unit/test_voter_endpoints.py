"""Where a controller is: the voter set in the log names it (KIP-853); the configured
``controller.quorum.voters`` answers only for voters the log gives no endpoint."""

from __future__ import annotations

from raftka.raft.core import NO_LEADER
from raftka.raft.endpoints import VoterEndpoints
from raftka.raft.voters import Voter, VoterSet

CONFIGURED = {1: "c1:9093"}


def test_a_voter_the_configuration_does_not_name_is_found_in_the_logs_voter_set() -> None:
    voters = VoterSet(
        [Voter(1, "d1", ("c1:9093",)), Voter(10, "d10", ("c10:9093",)), Voter(11, "d11", ("c11:9093",))]
    )
    endpoints = VoterEndpoints(CONFIGURED, lambda: voters)
    assert endpoints.address(10) == "c10:9093"
    assert endpoints.voters() == {1: "c1:9093", 10: "c10:9093", 11: "c11:9093"}


def test_the_log_wins_over_the_configuration_and_a_removed_voter_is_not_asked() -> None:
    voters = VoterSet([Voter(1, "d1", ("moved:9093",)), Voter(10, "d10", ("c10:9093",))])
    assert VoterEndpoints(CONFIGURED, lambda: voters).address(1) == "moved:9093"
    without_1 = VoterSet([Voter(10, "d10", ("c10:9093",))])
    assert VoterEndpoints(CONFIGURED, lambda: without_1).voters() == {10: "c10:9093"}


def test_the_current_voter_set_is_read_at_every_call() -> None:
    """A broker's log grows: a voter added after the link was made is found."""
    current = [VoterSet.static([1])]
    endpoints = VoterEndpoints(CONFIGURED, lambda: current[0])
    assert endpoints.address(10) == ""
    current[0] = VoterSet([Voter(1, "d1", ("c1:9093",)), Voter(10, "d10", ("c10:9093",))])
    assert endpoints.address(10) == "c10:9093"


def test_a_static_quorum_is_where_it_was_configured_and_no_leader_has_no_address() -> None:
    endpoints = VoterEndpoints({1: "c1:9093", 2: "c2:9093"}, lambda: VoterSet.static([1, 2]))
    assert endpoints.address(2) == "c2:9093"
    assert endpoints.address(NO_LEADER) == "" and endpoints.address(7) == ""
    assert endpoints.voters() == {1: "c1:9093", 2: "c2:9093"}


def test_voters_without_any_address_fall_back_to_the_configured_list() -> None:
    endpoints = VoterEndpoints(CONFIGURED, lambda: VoterSet.static([5, 6]))
    assert endpoints.voters() == CONFIGURED
