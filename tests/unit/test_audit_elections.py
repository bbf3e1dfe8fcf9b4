"""The audit's word on an election: clean when the new leader held every committed record."""

from __future__ import annotations

from raftka.audit.replay import _cause
from raftka.metadata.image import PartitionState


def test_an_election_from_the_elr_is_clean_and_one_from_outside_isr_and_elr_is_not() -> None:
    offline = PartitionState((1, 2, 3), isr=(), leader=-1, leader_epoch=4, partition_epoch=9, elr=(2,))
    from_elr = PartitionState((1, 2, 3), isr=(2,), leader=2, leader_epoch=5, partition_epoch=10)
    from_outside = PartitionState((1, 2, 3), isr=(3,), leader=3, leader_epoch=5, partition_epoch=10)
    assert _cause(offline, from_elr) == ("election", True)
    assert _cause(offline, from_outside) == ("election", False)
