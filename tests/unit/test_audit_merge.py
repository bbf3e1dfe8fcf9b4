"""The merge of the nodes' copies into one history, on hand-made heads: a Raft log's epochs
never go back, so an old leader's uncommitted tail that runs past the end of what the new
leader wrote is set aside, not taken as history."""

from __future__ import annotations

from raftka.audit.decode import LEADER_CHANGE
from raftka.audit.merge import merge
from raftka.audit.walk import Head
from tests.unit.audit_reference import expand

VOTERS = [1, 2, 3]


def _head(node: int, offset: int, epoch: int, position: int, leader: int | None = None) -> Head:
    kind, type_name = ("LEADER_CHANGE", LEADER_CHANGE) if leader is not None else ("DATA", "TOPIC_RECORD")
    crc = hash((offset, epoch, leader)) & 0xFFFFFFFF  # equal batches on two nodes have equal CRCs
    return Head(str(node), f"node-{node}.log", 0, "segment", position, kind, offset, 1, crc, offset, epoch,
                1_000 + offset, type_name, leader, VOTERS if leader is not None else None, None, None, False)  # fmt: skip


def _log(node: int, batches: list[tuple[int, int, int | None]]) -> list[Head]:
    """(offset, epoch, leader of a LeaderChange or None) per batch, one record each."""
    return [_head(node, offset, epoch, i * 100, leader) for i, (offset, epoch, leader) in enumerate(batches)]


COMMITTED = [(0, 1, 1)] + [(o, 1, None) for o in range(1, 10)]


def test_an_old_leaders_tail_longer_than_the_new_leaders_log_is_not_history() -> None:
    old_leader = _log(1, COMMITTED + [(o, 1, None) for o in range(10, 15)])  # never committed
    new_epoch = COMMITTED + [(10, 2, 2), (11, 2, None)]
    heads = old_leader + _log(2, new_epoch) + _log(3, new_epoch)
    merged = merge(heads, {})

    assert (merged.start_offset, merged.end_offset, merged.gaps) == (0, 12, [])
    chosen = expand(merged.chosen, heads)
    assert [c.base_offset for c in chosen] == list(range(12))
    assert {c.node for c in chosen if c.base_offset >= 10} == {"2"}
    set_aside = sorted((v["offset"], v["severity"]) for v in merged.violations)
    assert set_aside == [(o, "info") for o in range(10, 15)]  # uncommitted: one node holds each


def test_a_committed_batch_of_an_older_epoch_after_a_newer_one_is_a_disagreement() -> None:
    """Two voters hold epoch 1 at offset 12 while the chosen history is at epoch 2 there:
    both are committed (a majority, and an observer), which an honest cluster never does."""
    diverged = COMMITTED + [(10, 2, 2), (11, 2, None), (12, 1, None)]
    new_epoch = COMMITTED + [(10, 2, 2), (11, 2, None)]
    merged = merge(_log(1, diverged) + _log(3, diverged) + _log(2, new_epoch) + _log(101, new_epoch), {})

    assert merged.end_offset == 12
    assert [(v["check"], v["severity"], v["offset"]) for v in merged.violations] == [("nodes_agree", "error", 12)]
