"""The node's PLAIN password checks (``raftka.security.plain_checks``): 24 connections
guessing passwords burned 7.7 s of a broker's CPU in 15 s. The hashing here is a fake that
counts its calls and can be held, so each case shows what is hashed and what is refused
without hashing, deterministically."""

from __future__ import annotations

import asyncio
import threading

import pytest

from raftka.security import scram
from raftka.security.plain_checks import PlainBudget, PlainChecks
from raftka.security.scram import AuthenticationFailed, ScramCredential

SALT = b"s" * 32
M = scram.SCRAM_SHA_512
DEFAULT_BUDGET = PlainBudget()


def credential(password: str, iterations: int = 4096) -> ScramCredential:
    return scram.credential(M, scram.salted_password(M, password, SALT, iterations), SALT, iterations)


class Hashing:
    """The PBKDF2 check, counted; ``gate`` holds every call until set."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, mechanism: str, stored: ScramCredential, password: str) -> bool:
        self.calls += 1
        self.gate.wait(10)
        return scram.password_matches(mechanism, stored, password)


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def checks(budget: PlainBudget = DEFAULT_BUDGET) -> tuple[PlainChecks, Hashing, Clock]:
    hashing, clock = Hashing(), Clock()
    return PlainChecks(budget, hashing, clock), hashing, clock


def test_a_password_that_logged_in_is_checked_again_without_hashing() -> None:
    plain, hashing, _ = checks()
    stored = credential("right")

    async def scenario() -> None:
        assert await plain.matches("alice", M, stored, "right", "10.0.0.1", known=True)
        for _ in range(100):  # a client reconnecting, from anywhere: no budget used
            assert await plain.matches("alice", M, stored, "right", "10.0.0.2", known=True)
        assert not await plain.matches("alice", M, stored, "guess", "10.0.0.3", known=True)
        assert hashing.calls == 1
        changed = credential("new")  # the credential changed in the image: hashed again
        assert not await plain.matches("alice", M, changed, "right", "10.0.0.1", known=True)
        assert await plain.matches("alice", M, changed, "new", "10.0.0.4", known=True)
        assert hashing.calls == 3

    asyncio.run(scenario())


def test_an_unknown_users_decoy_is_never_remembered() -> None:
    plain, hashing, clock = checks()
    decoy = credential("whatever")

    async def scenario() -> None:
        for _ in range(3):
            clock.now_s += 1
            assert await plain.matches("mallory", M, decoy, "whatever", "10.0.0.1", known=False)
        assert hashing.calls == 3

    asyncio.run(scenario())


def test_guesses_over_an_addresss_rate_are_refused_without_hashing() -> None:
    plain, hashing, clock = checks(PlainBudget(host_rate_per_s=5, rate_per_s=20))
    stored = credential("right")

    async def scenario() -> None:
        for _ in range(5):
            assert not await plain.matches("alice", M, stored, "guess", "10.0.0.1", known=True)
        with pytest.raises(AuthenticationFailed, match="a second from 10.0.0.1"):
            await plain.matches("alice", M, stored, "guess", "10.0.0.1", known=True)
        assert hashing.calls == 5
        assert not await plain.matches("alice", M, stored, "guess", "10.0.0.2", known=True)  # another address
        clock.now_s += 1  # a second later the address may guess again
        assert await plain.matches("alice", M, stored, "right", "10.0.0.1", known=True)
        assert hashing.calls == 7 and plain.refused == 1

    asyncio.run(scenario())


def test_guesses_over_the_nodes_rate_are_refused_from_any_address() -> None:
    plain, hashing, _ = checks(PlainBudget(host_rate_per_s=5, rate_per_s=20))
    stored = credential("right")

    async def scenario() -> None:
        refused = 0
        for i in range(40):  # 40 addresses, one guess each
            try:
                await plain.matches("alice", M, stored, "guess", f"10.0.1.{i}", known=True)
            except AuthenticationFailed as e:
                assert "a second on this node" in str(e)
                refused += 1
        assert (hashing.calls, refused) == (20, 20)

    asyncio.run(scenario())


def test_checks_at_once_are_bounded_per_address_and_per_node() -> None:
    plain, hashing, _ = checks(PlainBudget(concurrent_max=2, host_concurrent_max=1, rate_per_s=100))
    stored = credential("right")

    async def guess(host: str) -> str:
        try:
            return str(await plain.matches("alice", M, stored, "guess", host, known=True))
        except AuthenticationFailed:
            return "refused"

    async def scenario() -> None:
        hashing.gate.clear()  # every hashing in progress waits
        first = asyncio.create_task(guess("10.0.0.1"))
        await asyncio.sleep(0)
        assert await guess("10.0.0.1") == "refused"  # the address has its one check running
        second = asyncio.create_task(guess("10.0.0.2"))
        await asyncio.sleep(0)
        assert await guess("10.0.0.3") == "refused"  # the node has its two running
        hashing.gate.set()
        assert await asyncio.gather(first, second) == ["False", "False"]
        assert await guess("10.0.0.3") == "False"  # room again once they ended
        assert hashing.calls == 3

    asyncio.run(scenario())
