"""Deliberately broken brokers: the simulation must catch each within a few seeds.

If one survives, the invariants or the fault model have a blind spot, and a real bug of
that kind would hide there too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from unittest import mock

from raftka.broker.log.producer_state import ProducerState
from raftka.broker.replica.partition import Partition
from raftka.metadata import broker_ops


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


MUTANTS: dict[str, Callable[[], AbstractContextManager[None]]] = {
    "": contextlib.nullcontext,
    "serve-unregistered": serve_unregistered,
    "hw-ignores-followers": hw_ignores_followers,
    "idempotence-off": idempotence_off,
    "restart-keeps-roles": restart_keeps_roles,
}
