"""The shared gRPC client side: a standby's NOT_CONTROLLER answer and the stub caches."""

from __future__ import annotations

import asyncio

import pytest

from raftka.rpc.stubs import BlockingStubs, NotControllerError, Stubs, controller_answer
from raftka.v1 import controller_pb2, controller_pb2_grpc, raft_pb2_grpc

E = controller_pb2.ErrorCode


def answer(error: int, controller_id: int = -1, hint: str = "") -> controller_pb2.ListTopicsResponse:
    status = controller_pb2.Status(error=error, controller_id=controller_id, controller_address=hint)
    return controller_pb2.ListTopicsResponse(status=status)


def test_any_answer_but_not_controller_is_returned_as_it_is() -> None:
    for error in (E.NONE, E.REQUEST_TIMED_OUT, E.TOPIC_ALREADY_EXISTS):
        response = answer(error)
        assert controller_answer("a:1", response) is response


def test_not_controller_names_the_active_controller_and_redirects_only_elsewhere() -> None:
    with pytest.raises(NotControllerError) as raised:
        controller_answer("a:1", answer(E.NOT_CONTROLLER, 2, "b:2"))
    assert str(raised.value) == "a:1 is not the active controller (controller 2 at b:2)"
    assert raised.value.redirect == "b:2"

    with pytest.raises(NotControllerError) as raised:
        controller_answer("a:1", answer(E.NOT_CONTROLLER))
    assert str(raised.value) == "a:1 is not the active controller and knows none yet"
    assert raised.value.redirect is None

    with pytest.raises(NotControllerError) as raised:
        controller_answer("a:1", answer(E.NOT_CONTROLLER, 1, "a:1"))  # a stale hint: itself
    assert raised.value.redirect is None


def test_one_stub_per_address_until_closed() -> None:
    stubs = BlockingStubs(raft_pb2_grpc.RaftStub)
    first = stubs["127.0.0.1:1"]
    assert stubs["127.0.0.1:1"] is first and stubs["127.0.0.1:2"] is not first
    stubs.close()
    assert stubs["127.0.0.1:1"] is not first, "closing forgets the stubs: the next use opens a channel"
    stubs.close()

    async def body() -> None:
        stubs = Stubs(controller_pb2_grpc.ControllerStub)
        first = stubs["127.0.0.1:1"]
        assert stubs["127.0.0.1:1"] is first
        await stubs.close()
        assert stubs["127.0.0.1:1"] is not first
        await stubs.close()

    asyncio.run(body())
