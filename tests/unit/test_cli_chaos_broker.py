"""The kill-broker audit: what counts as lost, duplicated, out of order and unknown, and
what fails the run (duplicates only from an idempotent producer)."""

from __future__ import annotations

import struct

from raftka.tools.chaos.chaos_broker import audit, exit_status

N = struct.Struct(">q")


def read(*entries: tuple[int, int, int]) -> list[tuple[int, int, bytes]]:
    return [(p, o, N.pack(n)) for p, o, n in entries]


def test_a_clean_run_has_nothing_to_report() -> None:
    report = audit({0: (0, 0), 1: (0, 1)}, read((0, 0, 0), (0, 1, 1)), sent=2)
    assert (report["lost"], report["duplicated"], report["out_of_order"], report["unknown"]) == (0, 0, 0, 0)


def test_a_retried_batch_is_a_duplicate_not_disorder() -> None:
    acked = {0: (0, 2), 1: (0, 3), 2: (0, 4)}
    report = audit(acked, read((0, 0, 0), (0, 1, 1), (0, 2, 0), (0, 3, 1), (0, 4, 2)), sent=3)
    assert (report["duplicated"], report["out_of_order"], report["lost"]) == (2, 0, 0)


def test_lost_disordered_unknown_and_unacknowledged_are_each_counted() -> None:
    acked = {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (0, 2)}
    report = audit(acked, read((0, 0, 1), (0, 1, 0), (1, 0, 4), (0, 2, 3), (0, 3, 99)), sent=5)
    assert report["lost"] == 1  # number 2
    assert report["out_of_order"] == 1  # 1 then 0 in partition 0
    assert report["unknown"] == 1  # 99 was never sent
    assert report["unacknowledged_read"] == 1  # 4 was sent, its acknowledgement failed


def test_duplicates_fail_the_run_only_when_the_producer_was_idempotent() -> None:
    report = audit({0: (0, 0)}, read((0, 0, 0), (0, 1, 0)), sent=1)
    assert report["duplicated"] == 1
    assert exit_status(report, idempotent=True) == 1
    assert exit_status(report, idempotent=False) == 0, "at least once: reported, not failed"
    assert exit_status(audit({0: (0, 0)}, read(), sent=1), idempotent=False) == 1, (
        "a lost record always fails"
    )
