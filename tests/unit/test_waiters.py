"""The produce purgatory (``OffsetWaiters``): waiters resolve in offset order, and a
waiter given up on (its produce timed out) holds nothing while the partition stands still."""

from __future__ import annotations

import asyncio

from raftka.broker.replica.waiters import OffsetWaiters

NONE, FAILED = 0, 1


async def _callbacks_run() -> None:
    """Let the loop run the callbacks the cancellations scheduled (one pass of it)."""
    await asyncio.sleep(0)


def test_timed_out_waiters_are_let_go_while_the_offset_stands_still_and_the_others_still_resolve() -> None:
    """An ISR shrink the controller keeps refusing holds the high watermark: every produce
    retried on a timeout added a waiter that stayed until the offset moved."""

    async def body() -> None:
        waiters = OffsetWaiters()
        live = [waiters.wait_for("p", 5), waiters.wait_for("p", 20)]
        for round_ in range(200):  # producers retrying on timeouts
            gone = waiters.wait_for("p", 10 + round_)
            gone.cancel()
            await _callbacks_run()
        assert len(waiters) <= 2 * len(live)
        for future in live:
            assert not future.done()
        waiters.reached("p", 10, NONE)
        assert (live[0].result(), live[1].done()) == (NONE, False)
        waiters.fail("p", FAILED)
        assert live[1].result() == FAILED and len(waiters) == 0

    asyncio.run(body())


def test_when_every_waiter_timed_out_nothing_is_held() -> None:
    async def body() -> None:
        waiters = OffsetWaiters()
        for key in ("p", "q"):
            futures = [waiters.wait_for(key, offset) for offset in range(50)]
            for future in futures:
                future.cancel()
        await _callbacks_run()
        assert len(waiters) == 0
        waiters.reached("p", 100, NONE)  # nothing left to resolve, nothing raises
        late = waiters.wait_for("p", 1)
        waiters.reached("p", 1, NONE)
        assert late.result() == NONE

    asyncio.run(body())
