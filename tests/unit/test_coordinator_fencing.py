"""A group coordinator whose image lags the controller's: its checks pass, the controller
refuses (``raftka.metadata.group_ops``), and a Kafka client hears the refusal with Kafka's
code, with nothing committed.

The broker's coordinator runs on one real broker in this process; the controller's image
is changed behind its back (its listeners are not told), as when the metadata has moved
on and this broker has not replayed it yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.consumer import (
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from raftka.broker.groups.coordinator import GroupCoordinator
from raftka.metadata.group_placement import coordinator_for
from raftka.metadata.image import EMPTY
from raftka.security.principal import CLIENT, Principal, current_principal
from raftka.v1 import controller_pb2
from tests.unit import metadata_support as m
from tests.unit.broker_in_process import BROKER, GROUP_LIMITS
from tests.unit.controller_in_memory import ControllerInMemory
from tests.unit.kafka_wire import BrokerThread, broker_thread, call

TOPIC = "events"
NOT_COORDINATOR, ILLEGAL_GENERATION = 16, 22  # Kafka's numbers
OTHER_BROKER = BROKER + 1
# Groups the other broker takes once it is unfenced in the controller's image.
MOVING_GROUP, MOVING_EMPTY_GROUP = [
    g for g in (f"g{i}" for i in range(1000)) if coordinator_for(g, [BROKER, OTHER_BROKER]) != BROKER
][:2]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[BrokerThread]:
    with broker_thread(tmp_path, {TOPIC: 1}) as broker:
        yield broker


def sync(served: BrokerThread, group: str) -> tuple[JoinGroupResponse, SyncGroupResponse]:
    """A new member's join and its sync, which waits for the rebalance to be recorded."""
    join = JoinGroupRequest(
        group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=30_000, member_id="",
        group_instance_id=None, protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")], reason=None,
    )  # fmt: skip
    joined = call(served.bootstrap, join, 3, JoinGroupResponse)
    assert joined.error_code == 0, joined
    request = SyncGroupRequest(
        group_id=group, generation_id=joined.generation_id, member_id=joined.member_id, group_instance_id=None,
        protocol_type=None, protocol_name=None,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"")],
    )  # fmt: skip
    return joined, call(served.bootstrap, request, 2, SyncGroupResponse)


def member_of(served: BrokerThread, group: str) -> tuple[str, int]:
    """A member that joined and synced: its id and generation (recorded by the controller)."""
    joined, synced = sync(served, group)
    assert synced.error_code == 0, synced
    assert served.broker.controller.image.groups[group].generation_id == joined.generation_id
    return joined.member_id, joined.generation_id


def commit(served: BrokerThread, group: str, member_id: str = "", generation: int = -1) -> list[int]:
    """Kafka's error code per partition for a commit of offset 5."""
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    request = OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
        topics=[T(name=TOPIC, partitions=[T.OffsetCommitRequestPartition(partition_index=0, committed_offset=5, committed_leader_epoch=-1, committed_metadata="")])],
    )  # fmt: skip
    answer = call(served.bootstrap, request, 8, OffsetCommitResponse)
    return [p.error_code for t in answer.topics for p in t.partitions]


def behind_the_coordinators_back_of(controller: ControllerInMemory, *records: m.Record) -> None:
    """The controller's image moves on; the broker's coordinator does not hear of it."""
    controller.image = m.replay(controller.image, *records)


def behind_the_coordinators_back(served: BrokerThread, *records: m.Record) -> None:
    """As above, on the broker's own loop."""

    async def change() -> None:
        behind_the_coordinators_back_of(served.broker.controller, *records)

    served.run(change())


def test_a_member_of_a_generation_older_than_the_recorded_one_hears_illegal_generation(
    served: BrokerThread,
) -> None:
    member_id, generation = member_of(served, "g")
    behind_the_coordinators_back(served, m.group_rebalance("g", generation + 1))  # another coordinator's
    assert commit(served, "g", member_id, generation) == [ILLEGAL_GENERATION]
    assert "g" not in served.broker.controller.image.offsets


def test_a_coordinator_the_group_moved_away_from_answers_not_coordinator(served: BrokerThread) -> None:
    member_id, generation = member_of(served, MOVING_GROUP)
    behind_the_coordinators_back(served, m.register(OTHER_BROKER, 1_000, fenced=False))
    assert commit(served, MOVING_GROUP, member_id, generation) == [NOT_COORDINATOR]
    assert commit(served, MOVING_EMPTY_GROUP) == [NOT_COORDINATOR]  # from outside a group too
    assert not {MOVING_GROUP, MOVING_EMPTY_GROUP} & set(served.broker.controller.image.offsets)


def test_a_rebalance_the_controller_refuses_is_answered_not_coordinator_and_not_recorded(
    served: BrokerThread,
) -> None:
    behind_the_coordinators_back(served, m.register(OTHER_BROKER, 1_000, fenced=False))
    _, synced = sync(served, MOVING_GROUP)
    assert synced.error_code == NOT_COORDINATOR
    assert MOVING_GROUP not in served.broker.controller.image.groups


def test_a_coordinator_whose_registration_was_replaced_answers_not_coordinator(served: BrokerThread) -> None:
    behind_the_coordinators_back(served, m.register(BROKER, 2_000, fenced=False))  # a new incarnation
    assert commit(served, "tool") == [NOT_COORDINATOR]
    assert "tool" not in served.broker.controller.image.offsets


def test_a_commit_from_outside_an_empty_group_is_still_taken(served: BrokerThread) -> None:
    assert commit(served, "tool") == [0]
    assert [o.offset for o in served.broker.controller.image.offsets["tool"].values()] == [5]


def test_a_reset_forwarded_on_its_own_with_tls_is_refused_once_the_group_moved() -> None:
    """With TLS a commit from outside the group goes to the controller on its own (judged as
    its client); it names this coordinator, so a stale one cannot write it either."""
    topic_id = m.topic_id(1)
    controller = ControllerInMemory(
        m.replay(
            EMPTY,
            m.register(BROKER, 1, fenced=False),
            m.topic(TOPIC, topic_id),
            m.partition(topic_id, 0, [BROKER]),
        )
    )
    groups = GroupCoordinator(BROKER, lambda: 1, GROUP_LIMITS, controller, 4096)  # type: ignore[arg-type]
    controller.listeners.append(groups.update)
    controller.set_image(controller.image)

    def reset(offset: int) -> controller_pb2.OffsetCommitRequest:
        return controller_pb2.OffsetCommitRequest(
            group=MOVING_EMPTY_GROUP,
            topics=[
                controller_pb2.OffsetCommitTopic(
                    topic=TOPIC, partitions=[controller_pb2.OffsetCommitPartition(partition=0, offset=offset)]
                )
            ],
            coordinator_id=OTHER_BROKER,  # a client's claim: the coordinator puts its own
        )

    async def body() -> None:
        current_principal.set(Principal("User:CN=alice,OU=client,O=raftka", CLIENT))
        taken = await groups.commit(reset(5))
        assert taken.status.error == controller_pb2.NONE and not taken.partitions[0].error, taken
        behind_the_coordinators_back_of(controller, m.register(OTHER_BROKER, 1_000, fenced=False))
        refused = await groups.commit(reset(6))
        assert refused.status.error == controller_pb2.NOT_COORDINATOR, refused
        assert [o.offset for o in controller.image.offsets[MOVING_EMPTY_GROUP].values()] == [5]
        await groups.close()

    asyncio.run(body())
