"""Helpers for the QuorumController tests: a quorum to run against, brokers, requests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from raftka.metadata.controller import QuorumController
from raftka.raft.config import RaftConfig
from raftka.v1 import controller_pb2 as pb
from raftka.v1 import metadata_pb2
from tests.metadata_sim.quorum import Member, Quorum
from tests.unit import metadata_support as m

E = pb.ErrorCode
BROKERS = (101, 102, 103)
# One voter commits alone; no idle NoOps, so an unchanged log end offset means nothing was appended.
QUIET_RAFT = RaftConfig(election_timeout_ms=10, idle_noop_interval_ms=600_000)


def run(body: Callable[[], Awaitable[None]], timeout_s: float = 60.0) -> None:
    asyncio.run(asyncio.wait_for(body(), timeout_s))


async def three() -> tuple[Quorum, int]:
    """Three voters with an active controller that every node follows; its node id."""
    quorum = Quorum(size=3)
    await quorum.start()
    leader = await quorum.active()
    await quorum.converged()
    return quorum, leader.node.node_id


def isolate(quorum: Quorum, node_id: int) -> None:
    """Cut ``node_id`` off from every other voter."""
    for peer in quorum.voter_ids:
        if peer != node_id:
            quorum.network.cut(node_id, peer)


async def single(**kwargs: object) -> tuple[Quorum, Member]:
    quorum = Quorum(size=1, **{"raft": QUIET_RAFT, **kwargs})  # type: ignore[arg-type]
    await quorum.start()
    return quorum, await quorum.active()


def log_end(member: Member) -> int:
    return member.node.core.log_end_offset


async def register(
    controller: QuorumController,
    broker_id: int,
    *,
    rack: str = "",
    incarnation: str = "",
    log_dir_id: bytes | None = None,
) -> int:
    """``log_dir_id``: the broker's log directory id, by default the one it always has."""
    response = await controller.register_broker(
        pb.BrokerRegistrationRequest(
            broker_id=broker_id,
            incarnation_id=incarnation or f"incarnation-{broker_id}",
            listeners=[
                metadata_pb2.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id)
            ],
            rack=rack,
            log_dir_id=m.log_dir_id(broker_id) if log_dir_id is None else log_dir_id,
        )
    )
    assert response.status.error == E.NONE, response.status
    return response.broker_epoch


async def heartbeat(
    controller: QuorumController, broker_id: int, epoch: int, *, offset: int | None = None, **flags: bool
) -> pb.BrokerHeartbeatResponse:
    return await controller.broker_heartbeat(
        pb.BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=epoch,
            current_metadata_offset=epoch if offset is None else offset,
            **flags,
        )
    )


async def live_brokers(controller: QuorumController, ids: Iterable[int] = BROKERS) -> dict[int, int]:
    """Register and unfence brokers; their epochs."""
    epochs = {}
    for broker_id in ids:
        epochs[broker_id] = await register(controller, broker_id)
        response = await heartbeat(controller, broker_id, epochs[broker_id])
        assert not response.is_fenced, response
    return epochs


async def create(
    controller: QuorumController, name: str, partitions: int = 3, rf: int = 3, **configs: str
) -> pb.TopicResult:
    response = await controller.create_topics(
        pb.CreateTopicsRequest(
            topics=[
                pb.CreatableTopic(
                    name=name, num_partitions=partitions, replication_factor=rf, configs=configs
                )
            ]
        )
    )
    assert response.status.error == E.NONE, response.status
    return response.topics[0]
