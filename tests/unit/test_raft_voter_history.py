"""VoterHistory.member_since: from which VotersRecord a voter's fetch offsets may count."""

from __future__ import annotations

from raftka.raft.voters import Voter, VoterHistory, VoterSet

ONE, TWO, THREE, FOUR = (Voter(n, f"dir-{n}") for n in (1, 2, 3, 4))


def test_a_voter_of_the_base_set_counts_from_the_start() -> None:
    history = VoterHistory(VoterSet((ONE, TWO, THREE)))
    assert history.member_since(1, "dir-1") == -1
    history.append(5, VoterSet((ONE, TWO, THREE, FOUR)))
    assert history.member_since(1, "dir-1") == -1


def test_an_added_voter_counts_from_the_record_that_added_it() -> None:
    history = VoterHistory(VoterSet((ONE, TWO, THREE)))
    history.append(5, VoterSet((ONE, TWO, THREE, FOUR)))
    history.append(9, VoterSet((ONE, TWO, FOUR)))
    assert history.member_since(4, "dir-4") == 5


def test_a_voter_removed_and_added_again_counts_from_its_latest_addition() -> None:
    history = VoterHistory(VoterSet((ONE, TWO, THREE)))
    history.append(5, VoterSet((ONE, TWO)))
    history.append(9, VoterSet((ONE, TWO, THREE)))
    assert history.member_since(3, "dir-3") == 9
