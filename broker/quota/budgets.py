"""The budgets of one quota type, bounded so that no client can reset another's.

Clients that invent client ids must not grow a broker's memory without bound, and a plain
least-recently-used table of all budgets let them do worse: 10,000 invented client ids
evicted a throttled client's budget, which came back empty (its throttle reset). So each
budget has an owner, the user (principal) whose request made it, and:

- a user holds at most ``PER_USER_MAX`` budgets: beyond that a new one replaces that
  user's own least recently used, so what a user invents costs only its own budgets;
- at most ``TOTAL_MAX`` in all: beyond that the least recently used budget that no quota
  bounds goes first (it only feeds the metrics), and a bounded one only for a new bounded
  one, taken from the user who holds the most budgets;
- a budget no quota bounds never evicts one that a quota bounds: when that is all it could
  do, it is not kept (its use is counted against nothing and is missing from the metrics).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

PER_USER_MAX = 1_000
TOTAL_MAX = 10_000
Bucket = tuple[str, str]  # (user, client id), as ``raftka.metadata.quotas.QuotaMatch.bucket``
B = TypeVar("B")
_Order = collections.OrderedDict[Bucket, None]  # least recently used first


@dataclass(slots=True)
class _Held(Generic[B]):
    budget: B
    owner: str
    bounded: bool


class Budgets(Generic[B]):
    def __init__(self, per_user_max: int = PER_USER_MAX, total_max: int = TOTAL_MAX) -> None:
        self.per_user_max = per_user_max
        self.total_max = total_max
        self._held: dict[Bucket, _Held[B]] = {}
        self._by_kind: dict[bool, _Order] = {
            False: collections.OrderedDict(),
            True: collections.OrderedDict(),
        }
        self._by_owner: dict[str, dict[bool, _Order]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def items(self) -> Iterator[tuple[Bucket, B]]:
        for bucket, held in self._held.items():
            yield bucket, held.budget

    def get(self, bucket: Bucket, user: str, bounded: bool, make: Callable[[], B]) -> B:
        """``bucket``'s budget, made (by ``make``) for ``user`` if it has none; ``bounded``:
        a quota bounds it now (quotas change: a kept budget follows)."""
        held = self._held.get(bucket)
        if held is None:
            held = _Held(make(), user, bounded)
            if self._room_for(user, bounded):
                self._keep(bucket, held)
            return held.budget
        self._forget(bucket, held)
        held.bounded = bounded
        self._keep(bucket, held)
        return held.budget

    def _room_for(self, user: str, bounded: bool) -> bool:
        owned = self._by_owner.get(user)
        full = owned is not None and len(owned[False]) + len(owned[True]) >= self.per_user_max
        if full and not self._evict_first(owned[False]) and not (bounded and self._evict_first(owned[True])):
            return False
        if len(self._held) >= self.total_max and not self._evict_first(self._by_kind[False]):
            if not bounded:
                return False
            heaviest = max(self._by_owner.values(), key=lambda o: len(o[False]) + len(o[True]))
            self._evict_first(heaviest[True])
        return True

    def _evict_first(self, order: _Order) -> bool:
        if not order:
            return False
        bucket = next(iter(order))
        self._forget(bucket, self._held.pop(bucket))
        return True

    def _keep(self, bucket: Bucket, held: _Held[B]) -> None:
        self._held[bucket] = held
        self._by_kind[held.bounded][bucket] = None
        owned = self._by_owner.setdefault(
            held.owner, {False: collections.OrderedDict(), True: collections.OrderedDict()}
        )
        owned[held.bounded][bucket] = None

    def _forget(self, bucket: Bucket, held: _Held[B]) -> None:
        """Out of the orders (a kept budget is put back at their ends by ``_keep``)."""
        self._by_kind[held.bounded].pop(bucket, None)
        owned = self._by_owner[held.owner]
        owned[held.bounded].pop(bucket, None)
        if not owned[False] and not owned[True]:
            del self._by_owner[held.owner]
