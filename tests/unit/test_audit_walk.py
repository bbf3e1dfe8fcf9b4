"""One node's walk keeps the epoch of its effective log across rewinds: after a later file
takes the log back to an offset, the epoch in effect is the one of the batches below it."""

from __future__ import annotations

from raftka.audit.decode import LEADER_CHANGE
from raftka.audit.walk import Head, walk_node

VOTERS = [1, 2, 3]


def _head(seq: int, position: int, offset: int, epoch: int, opens: bool) -> Head:
    kind, type_name = ("LEADER_CHANGE", LEADER_CHANGE) if opens else ("DATA", "TOPIC_RECORD")
    return Head("1", f"seg-{seq}", seq, "segment", position, kind, offset, 1, offset * 31 + epoch, offset, epoch,
                1_000 + offset, type_name, 1 if opens else None, VOTERS if opens else None, None, None, False)  # fmt: skip


def _checks(files: list[list[tuple[int, int, bool]]]) -> list[str]:
    """The checks that failed on a node of these files, each (offset, epoch, opens an epoch) per batch."""
    heads = [_head(seq, i * 100, *batch) for seq, file in enumerate(files) for i, batch in enumerate(file)]
    return [v["check"] for v in walk_node(heads).violations]


FIRST_FILE = [(0, 1, True), (1, 1, False), (2, 2, True), (3, 2, False)]


def test_a_rewind_to_where_an_epoch_began_takes_the_log_back_to_the_epoch_before() -> None:
    # epoch 2 began at 2; a later file from 2 on continues epoch 1, then opens epoch 3
    assert _checks([FIRST_FILE, [(2, 1, False), (3, 3, True)]]) == []


def test_a_rewind_into_an_epoch_keeps_that_epoch() -> None:
    # the log keeps 2 (epoch 2): a batch of epoch 1 at 3 goes back an epoch
    assert _checks([FIRST_FILE, [(3, 1, False)]]) == ["epochs_monotonic"]


def test_a_rewind_below_every_epoch_forgets_them() -> None:
    assert _checks([FIRST_FILE, [(0, 1, True), (1, 1, False)]]) == []
