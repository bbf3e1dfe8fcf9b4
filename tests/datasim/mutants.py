"""Deliberately broken brokers and controllers: the simulation must catch each within a few seeds.

If one survives, the invariants or the fault model have a blind spot, and a real bug of
that kind would hide there too.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any
from unittest import mock

from raftka.broker.log.cleaner import recopy
from raftka.broker.log.cleaner.manager import Candidate
from raftka.broker.log.cleaner.offset_map import OffsetMap
from raftka.broker.log.manager import LogManager
from raftka.broker.log.producer_state import ProducerState
from raftka.broker.log.segment import LogSegment
from raftka.broker.replica.partition import Partition
from raftka.broker.transactions.coordinator import TransactionCoordinator
from raftka.metadata import broker_ops, delta, eligible_leaders, group_ops, reassign_ops
from raftka.metadata.image import NO_LEADER, MetadataImage, PartitionState
from raftka.records.codec import Record


@contextlib.contextmanager
def serve_unregistered() -> Iterator[None]:
    """A restarted broker takes the roles of the image at once, before the controller has
    registered (and unfenced) this incarnation: it may lead, at the old leader epoch, a
    log that lost its unsynced tail, and followers truncate to it."""
    with mock.patch("raftka.broker.partitions._registered_and_unfenced", lambda *args: True):
        yield


@contextlib.contextmanager
def restart_keeps_roles() -> Iterator[None]:
    """The controller fences nothing of a restarted broker: its new incarnation's
    registration, and the fencing of the old one, leave its ISRs and leaderships as they
    were, so it comes back leader at the old leader epoch with whatever its disk kept."""
    with mock.patch.object(broker_ops.elections, "remove_broker", lambda *args, **kwargs: []):
        yield


@contextlib.contextmanager
def hw_ignores_followers() -> Iterator[None]:
    """The leader's high watermark is its own log end: acks=all answers before any
    follower holds the records."""

    def advance(self: Partition) -> bool:
        if not self.is_leader or self.log.log_end_offset <= self.high_watermark:
            return False
        self.high_watermark = self.log.log_end_offset
        return True

    with mock.patch.object(Partition, "maybe_advance_high_watermark", advance):
        yield


@contextlib.contextmanager
def idempotence_off() -> Iterator[None]:
    """The leader takes every batch of an idempotent producer as new: a retry of a batch
    already written is written again."""
    with mock.patch.object(ProducerState, "check", lambda self, header: None):
        yield


@contextlib.contextmanager
def group_coordinator_unfenced() -> Iterator[None]:
    """The controller takes a group's rebalances and commits from any broker, not only from
    the group's coordinator at its current registration: a coordinator the group has moved
    away from goes on writing for it."""
    with mock.patch.object(group_ops, "check_coordinator", lambda *args: None):
        yield


@contextlib.contextmanager
def commit_generation_unfenced() -> Iterator[None]:
    """The controller takes a member's commit from any generation: a member of a generation
    that has been replaced commits over the new owner of its partitions."""
    with mock.patch.object(group_ops, "check_generation", lambda *args: None):
        yield


@contextlib.contextmanager
def rebalance_generation_unfenced() -> Iterator[None]:
    """The controller records a rebalance whatever generation was recorded before (and the
    replay overwrites it): a coordinator whose image lags hands out a generation again."""
    record_rebalance = group_ops.record_rebalance
    replay = delta._REPLAY["group_rebalance"]

    def unfenced_record(image: MetadataImage, *args: Any) -> Any:
        return record_rebalance(dataclasses.replace(image, groups={}), *args)

    def overwrite(replaying: delta.MetadataDelta, record: Any) -> None:
        replaying._groups.edit().pop(record.group, None)
        replay(replaying, record)

    with (
        mock.patch.object(group_ops, "record_rebalance", unfenced_record),
        mock.patch.dict(delta._REPLAY, {"group_rebalance": overwrite}),
    ):
        yield


@contextlib.contextmanager
def move_completes_early() -> Iterator[None]:
    """A reassignment completes once its adding replicas are in the ISR, whatever the
    replicas it keeps (the rule before issue 30): a move off an in-sync replica while a
    kept one catches up leaves a single in-sync copy."""

    def complete(
        state: PartitionState, policy: eligible_leaders.Policy, acceptable: Any, crashed: Any = ()
    ) -> PartitionState | None:
        removing = set(state.removing_replicas)
        isr = tuple(r for r in state.isr if r not in removing)
        if not state.reassigning or not isr or not set(state.adding_replicas) <= set(isr):
            return None
        kept = lambda ids: tuple(r for r in ids if r not in removing)  # noqa: E731
        moved = dataclasses.replace(
            state,
            replicas=kept(state.replicas),
            isr=isr,
            elr=kept(state.elr),
            last_known_elr=kept(state.last_known_elr),
            adding_replicas=(),
            removing_replicas=(),
        )
        done = reassign_ops._elected(moved, policy, acceptable, crashed)
        return done if done.leader != NO_LEADER or state.leader == NO_LEADER else None

    with mock.patch.object(reassign_ops, "complete", complete):
        yield


@contextlib.contextmanager
def elr_elects_crashed_at_once() -> Iterator[None]:
    """From an empty ISR, the first ELR member (the last ISR member) is elected as soon as
    it is back, even after a crash, while another member that stopped cleanly is away (the
    rule before issue 30): a power cut's lost tail becomes the partition's log."""
    elect = eligible_leaders._elect

    def at_once(
        state: PartitionState,
        isr: tuple[int, ...],
        elr: tuple[int, ...],
        acceptable: Callable[[int], bool],
        crashed: Any,
    ) -> int:
        chosen = elect(state, isr, elr, acceptable, crashed)
        if chosen == NO_LEADER and not isr and elr and acceptable(elr[0]):
            return elr[0]
        return chosen

    with mock.patch.object(eligible_leaders, "_elect", at_once):
        yield


@contextlib.contextmanager
def markers_only_on_answer() -> Iterator[None]:
    """The transaction coordinator as it was before issue 30: a prepared transaction's
    markers are written when its PREPARE write is answered, or when the broker set
    changes, never because the image shows it prepared; so a PREPARE whose answer was
    lost (committed after the coordinator gave up) stays prepared."""
    reconcile, update = TransactionCoordinator.reconcile, TransactionCoordinator.update

    def update_then_reconcile_if_moved(self: TransactionCoordinator, image: MetadataImage) -> None:
        moved = image.brokers is not self.image.brokers
        update(self, image)
        if moved:
            reconcile(self)

    with (
        mock.patch.object(TransactionCoordinator, "reconcile", lambda self: None),
        mock.patch.object(TransactionCoordinator, "update", update_then_reconcile_if_moved),
    ):
        yield


@contextlib.contextmanager
def cleaner_drops_latest() -> Iterator[None]:
    """The cleaner keeps only records a later one of their key supersedes: the latest value
    of every key in the part it cleaned is removed."""
    keep = recopy._keep

    def drop_latest(record: Record, offset_map: OffsetMap, horizon: int | None, now_ms: int) -> bool:
        return keep(record, offset_map, horizon, now_ms) and record.offset != offset_map.get(record.key)

    with mock.patch.object(recopy, "_keep", drop_latest):
        yield


@contextlib.contextmanager
def cleaned_segment_unsynced() -> Iterator[None]:
    """The cleaner swaps a cleaned segment in without fsyncing it first: a power cut once
    its name is durable leaves an empty segment where the records were."""
    recopy_group = recopy._recopy

    def unsynced(*args: Any, **kwargs: Any) -> Any:
        with mock.patch.object(LogSegment, "flush", lambda self: None):
            return recopy_group(*args, **kwargs)

    with mock.patch.object(recopy, "_recopy", unsynced):
        yield


@contextlib.contextmanager
def cleaner_above_high_watermark() -> Iterator[None]:
    """The cleaner may clean up to the log end, not the last stable offset: a record is
    removed for a later one of its key that no follower holds yet, which a leader change
    then truncates."""

    def to_log_end(self: LogManager, high_watermarks: Any) -> Callable[[], list[Candidate]]:
        def candidates() -> list[Candidate]:
            return [
                Candidate(name, log, log.config, log.log_end_offset)
                for name in self.names()
                if (log := self.get(name)) is not None and log.config.compact
            ]

        return candidates

    with mock.patch.object(LogManager, "cleaner_candidates", to_log_end):
        yield


MUTANTS: dict[str, Callable[[], AbstractContextManager[None]]] = {
    "": contextlib.nullcontext,
    "serve-unregistered": serve_unregistered,
    "hw-ignores-followers": hw_ignores_followers,
    "idempotence-off": idempotence_off,
    "restart-keeps-roles": restart_keeps_roles,
    "group-coordinator-unfenced": group_coordinator_unfenced,
    "commit-generation-unfenced": commit_generation_unfenced,
    "rebalance-generation-unfenced": rebalance_generation_unfenced,
    "move-completes-early": move_completes_early,
    "elr-elects-crashed-at-once": elr_elects_crashed_at_once,
    "markers-only-on-answer": markers_only_on_answer,
    "cleaner-drops-latest": cleaner_drops_latest,
    "cleaned-segment-unsynced": cleaned_segment_unsynced,
    "cleaner-above-high-watermark": cleaner_above_high_watermark,
}
