"""Messages between the brokers, the controller and the clients, delivered by the scheduler.

Each message takes its own random delay (so messages reorder), a slow link adds to it, a
lossy link drops some, a cut link drops all. A message is a callback run at its
destination; it is dropped if the destination is down, or is no longer the process it was
sent to (a reply to a broker that has restarted since it asked). A paused process neither
sends nor handles anything; on resuming it does both with all that waited.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.simulation.scheduler import Scheduler

CONTROLLER = 0  # the controller's node id; brokers are 1..3, clients 100+


@dataclass(slots=True)
class LinkParams:
    delay_min_ms: int = 1
    delay_max_ms: int = 8
    loss: float = 0.0  # every link drops this share
    slow: dict[frozenset[int], int] = field(default_factory=dict)  # link -> extra ms, up to
    lossy: dict[frozenset[int], float] = field(default_factory=dict)  # link -> its drop share


class Network:
    def __init__(self, scheduler: Scheduler, rng: random.Random, params: LinkParams) -> None:
        self.scheduler = scheduler
        self.rng = rng
        self.params = params
        self.cut: set[frozenset[int]] = set()
        self.incarnations: dict[int, int] = {}  # node -> the process now up (absent: down)
        self.paused: dict[int, list[tuple[Callable[..., None], tuple]]] = {}  # node -> sends held
        self.sent = self.dropped = 0

    def send(self, src: int, dst: int, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` at ``dst`` later, if the link and ``dst`` let it through."""
        held = self.paused.get(src)
        if held is not None:  # a paused process sends nothing until it resumes
            held.append((self.send, (src, dst, fn, *args)))
            return
        self.sent += 1
        link = frozenset((src, dst))
        loss = max(self.params.loss, self.params.lossy.get(link, 0.0))
        if link in self.cut or src not in self.incarnations or self.rng.random() < loss:
            self.dropped += 1
            return
        delay = self.rng.randint(self.params.delay_min_ms, self.params.delay_max_ms)
        extra = self.params.slow.get(link, 0)
        if extra:
            delay += self.rng.randint(0, extra)
        self.scheduler.after(delay, self._arrive, dst, self.incarnations.get(dst), fn, args)

    def _arrive(self, dst: int, incarnation: int | None, fn: Callable[..., None], args: tuple) -> None:
        if incarnation is None or self.incarnations.get(dst) != incarnation:
            self.dropped += 1
            return
        held = self.paused.get(dst)
        if held is not None:  # it waits in the paused process's socket buffers
            held.append((self._arrive, (dst, incarnation, fn, args)))
            return
        fn(*args)

    def pause(self, node: int) -> None:
        """The process stops (a long GC pause, SIGSTOP): what it is sent waits, it sends nothing."""
        self.paused[node] = []

    def resume(self, node: int) -> None:
        """What waited is handled, in order, as if all of it came at once."""
        for fn, args in self.paused.pop(node, []):
            self.scheduler.after(0, fn, *args)

    def isolate(self, node: int, others: list[int]) -> None:
        for other in others:
            if other != node:
                self.cut.add(frozenset((node, other)))

    def heal(self) -> None:
        self.cut.clear()
