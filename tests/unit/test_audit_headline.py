"""The summary's headline figures that are computed on the driver from the tables."""

from __future__ import annotations

import pandas as pd

from raftka.audit.job import failed_elections


def _epochs(rows: list[tuple[int, bool, int | None]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["epoch", "committed", "failed_elections_before"])


def test_an_election_is_counted_once_whether_or_not_a_node_kept_its_leader_change() -> None:
    """Epoch 2's LeaderChange survives only in an uncommitted tail; epoch 3's nowhere.
    Both are skipped between committed epochs 1 and 4: two failed elections, not three."""
    epochs = _epochs([(1, True, None), (2, False, None), (4, True, 2)])
    assert failed_elections(epochs) == 2


def test_an_election_lost_after_the_last_committed_epoch_is_counted() -> None:
    epochs = _epochs([(1, True, None), (3, True, 1), (4, False, None)])
    assert failed_elections(epochs) == 2


def test_a_clean_history_has_no_failed_elections() -> None:
    assert failed_elections(_epochs([(1, True, None), (2, True, 0), (3, True, 0)])) == 0
