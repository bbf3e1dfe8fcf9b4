"""The acceptor judges each socket as it accepts it, and after an eviction accepts no more
in that turn of the event loop: the evicted connection's descriptor is freed only on the
next turn, and a turn that went on evicting held them all at once ("Too many open files"
at a limit of 128)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from raftka.wire.acceptor import Acceptor, Verdict, bind

CLIENTS = 5


@pytest.mark.parametrize(
    ("verdict", "one_a_turn"),
    [(Verdict.KEEP, False), (Verdict.CLOSE, False), (Verdict.KEEP_AFTER_EVICTION, True)],
)
def test_a_turn_accepts_what_waits_unless_an_idle_connection_gave_way(
    verdict: Verdict, one_a_turn: bool
) -> None:
    async def scenario() -> None:
        listening = bind("127.0.0.1", 0)[0]
        judged: list[str] = []
        served: list[socket.socket] = []

        def judge(conn: socket.socket, host: str) -> Verdict:
            judged.append(host)
            return verdict

        async def serve(conn: socket.socket) -> None:
            served.append(conn)

        acceptor = Acceptor(listening, judge, serve, "test")
        port = listening.getsockname()[1]
        clients = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(CLIENTS)]
        try:
            acceptor._accept_some()  # one turn's accepts, before the loop runs anything else
            # every connect has returned: the queue holds them (all but the last one's final
            # ACK at worst), so a turn that goes on takes more than one
            assert (len(judged) == 1) if one_a_turn else (len(judged) > 1), judged
            assert set(judged) == {"127.0.0.1"}
            while len(judged) < CLIENTS:  # the later turns take the rest
                acceptor._accept_some()
            await asyncio.sleep(0)  # the kept sockets' tasks run
            assert len(served) == (0 if verdict is Verdict.CLOSE else CLIENTS)
        finally:
            for sock in (*clients, *served):
                sock.close()
            await acceptor.close()

    asyncio.run(scenario())
