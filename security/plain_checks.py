"""The work a node does to check PLAIN passwords, bounded, so that guessing passwords cannot
take its CPU.

A PLAIN password is checked by salting and hashing it as the user's SCRAM credential was
(PBKDF2, 4,096 to 16,384 iterations of SHA-256 or SHA-512, in a thread): 24 connections
guessing for 15 s burned 7.7 s of a broker's CPU and raised its Metadata p99 from 8 to
210 ms. So:

- A password that logged in is remembered for its credential (``CACHE_USERS_MAX`` users,
  the oldest forgotten first): the same password against the same credential (salt,
  keys and iterations: a changed or re-added credential is another) is checked with one
  keyed hash of this process, and a password other than the remembered one is refused
  without hashing, since one credential has one password. Clients reconnecting cost
  nothing.
- Otherwise the hashing needs room in the budget: at most ``concurrent_max`` checks at
  once on the node and ``host_concurrent_max`` per client address, and at most
  ``rate_per_s`` checks a second on the node and ``host_rate_per_s`` per address (token
  buckets holding a second's worth). Over it the login fails at once, without hashing
  (``SASL_AUTHENTICATION_FAILED``, as Kafka answers a login it refuses), and the client
  tries again after its backoff.

SCRAM logins need none of this: the server checks a proof against stored keys with two
HMACs; the PBKDF2 is the client's.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from raftka.security import scram
from raftka.security.scram import AuthenticationFailed, ScramCredential

CACHE_USERS_MAX = 4_096
HOSTS_MAX = 4_096  # addresses with a bucket not yet full; beyond, full ones are forgotten first
Hasher = Callable[[str, ScramCredential, str], bool]  # (mechanism, stored, password): matches


@dataclass(frozen=True, slots=True)
class PlainBudget:
    concurrent_max: int = 2
    host_concurrent_max: int = 1
    rate_per_s: float = 20.0
    host_rate_per_s: float = 5.0


class _Bucket:
    """Tokens refilled at ``rate_per_s`` up to a second's worth."""

    __slots__ = ("tokens", "at_s")

    def __init__(self, rate_per_s: float, now_s: float) -> None:
        self.tokens = max(rate_per_s, 1.0)
        self.at_s = now_s

    def take(self, rate_per_s: float, now_s: float) -> bool:
        self.tokens = min(max(rate_per_s, 1.0), self.tokens + (now_s - self.at_s) * rate_per_s)
        self.at_s = now_s
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class PlainChecks:
    """One node's PLAIN checks: ``matches`` for each password a client sends."""

    def __init__(
        self,
        budget: PlainBudget = PlainBudget(),
        hasher: Hasher = scram.password_matches,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget = budget
        self._hasher = hasher
        self._clock = clock
        self._key = secrets.token_bytes(32)
        self._remembered: collections.OrderedDict[str, tuple[ScramCredential, bytes]] = (
            collections.OrderedDict()
        )
        self._running = 0
        self._running_by_host: collections.Counter[str] = collections.Counter()
        self._node_bucket = _Bucket(budget.rate_per_s, clock())
        self._host_buckets: dict[str, _Bucket] = {}
        self.refused = 0  # checks refused for the budget

    async def matches(
        self, user: str, mechanism: str, stored: ScramCredential, password: str, host: str, known: bool
    ) -> bool:
        """Whether ``password`` is ``user``'s (``stored``; ``known``: False for a decoy of an
        unknown user, never remembered). Raises ``AuthenticationFailed`` over the budget."""
        tag = hmac.digest(self._key, password.encode(), hashlib.sha256)
        remembered = self._remembered.get(user) if known else None
        if remembered is not None and remembered[0] == stored:
            self._remembered.move_to_end(user)
            return hmac.compare_digest(remembered[1], tag)
        self._take(host)
        try:
            matched = await asyncio.to_thread(self._hasher, mechanism, stored, password)
        finally:
            self._give_back(host)
        if matched and known:
            self._remembered[user] = (stored, tag)
            self._remembered.move_to_end(user)
            while len(self._remembered) > CACHE_USERS_MAX:
                self._remembered.popitem(last=False)
        return matched

    def _take(self, host: str) -> None:
        budget = self.budget
        now_s = self._clock()
        if (
            self._running >= budget.concurrent_max
            or self._running_by_host[host] >= budget.host_concurrent_max
        ):
            self._over("too many PLAIN checks at once")
        bucket = self._host_buckets.get(host)
        if bucket is None:
            self._forget_full_buckets(now_s)
            bucket = self._host_buckets[host] = _Bucket(budget.host_rate_per_s, now_s)
        if not bucket.take(budget.host_rate_per_s, now_s):
            self._over(f"over {budget.host_rate_per_s:g} PLAIN checks a second from {host}")
        if not self._node_bucket.take(budget.rate_per_s, now_s):
            self._over(f"over {budget.rate_per_s:g} PLAIN checks a second on this node")
        self._running += 1
        self._running_by_host[host] += 1

    def _over(self, why: str) -> None:
        self.refused += 1
        raise AuthenticationFailed(f"PLAIN: {why}; not checked")

    def _give_back(self, host: str) -> None:
        self._running -= 1
        self._running_by_host[host] -= 1
        if not self._running_by_host[host]:
            del self._running_by_host[host]

    def _forget_full_buckets(self, now_s: float) -> None:
        """Keep at most ``HOSTS_MAX`` buckets: a full one is as good as none."""
        if len(self._host_buckets) < HOSTS_MAX:
            return
        rate = self.budget.host_rate_per_s
        for host, bucket in list(self._host_buckets.items()):
            if bucket.tokens + (now_s - bucket.at_s) * rate >= max(rate, 1.0):
                del self._host_buckets[host]
        while len(self._host_buckets) >= HOSTS_MAX:  # all recent: the oldest goes
            del self._host_buckets[next(iter(self._host_buckets))]
