"""The broker lifecycle and its controller link against fake controllers on loopback:
register, stay fenced until caught up, heartbeat, re-register when the registration is
lost, find the active controller, and shut down only once the controller lets go."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import grpc

from raftka.broker.controller_link import ControllerLink, LinkError
from raftka.broker.lifecycle import BrokerLifecycle, Registration, State, registration_in
from raftka.metadata.image import BrokerRegistration, MetadataImage, frozen
from raftka.raft.endpoints import VoterEndpoints
from raftka.raft.voters import Voter, VoterSet
from raftka.v1 import controller_pb2, controller_pb2_grpc, metadata_pb2

E = controller_pb2.ErrorCode
T = TypeVar("T")
WAIT_S = 5.0
ENDPOINT = metadata_pb2.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=9092)


def run(body: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(asyncio.wait_for(body(), 15))


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


class FakeController(controller_pb2_grpc.ControllerServicer):
    """Registers at epoch 40, 41...; unfences once a heartbeat's offset reaches the epoch;
    lets a shutting-down broker go once ``release`` is set."""

    def __init__(self, refuse_registrations: int = 0) -> None:
        self.refuse_registrations = refuse_registrations
        self.registrations: list[controller_pb2.BrokerRegistrationRequest] = []
        self.heartbeats: list[controller_pb2.BrokerHeartbeatRequest] = []
        self.epoch = 39
        self.release = False
        self.forget = False  # answer the next heartbeat BROKER_ID_NOT_REGISTERED
        self.forget_always = False  # answer every heartbeat so

    async def BrokerRegistration(
        self, request: Any, context: Any
    ) -> controller_pb2.BrokerRegistrationResponse:
        self.registrations.append(request)
        if self.refuse_registrations > 0:
            self.refuse_registrations -= 1
            status = controller_pb2.Status(error=E.DUPLICATE_BROKER_REGISTRATION, message="old session alive")
            return controller_pb2.BrokerRegistrationResponse(status=status)
        self.epoch += 1
        return controller_pb2.BrokerRegistrationResponse(
            status=controller_pb2.Status(), broker_epoch=self.epoch
        )

    async def BrokerHeartbeat(self, request: Any, context: Any) -> controller_pb2.BrokerHeartbeatResponse:
        self.heartbeats.append(request)
        if self.forget or self.forget_always:
            self.forget = False
            status = controller_pb2.Status(error=E.BROKER_ID_NOT_REGISTERED, message="who?")
            return controller_pb2.BrokerHeartbeatResponse(status=status)
        if request.broker_epoch != self.epoch:
            status = controller_pb2.Status(error=E.STALE_BROKER_EPOCH, message="old epoch")
            return controller_pb2.BrokerHeartbeatResponse(status=status)
        caught_up = request.current_metadata_offset >= self.epoch
        return controller_pb2.BrokerHeartbeatResponse(
            status=controller_pb2.Status(),
            is_caught_up=caught_up,
            is_fenced=not caught_up or request.want_shut_down,
            should_shut_down=request.want_shut_down and self.release,
        )


class Standby(controller_pb2_grpc.ControllerServicer):
    def __init__(self, hint: str) -> None:
        self.hint = hint
        self.calls = 0

    async def BrokerRegistration(
        self, request: Any, context: Any
    ) -> controller_pb2.BrokerRegistrationResponse:
        self.calls += 1
        status = controller_pb2.Status(error=E.NOT_CONTROLLER, controller_id=1, controller_address=self.hint)
        return controller_pb2.BrokerRegistrationResponse(status=status)


@asynccontextmanager
async def serving(servicer: controller_pb2_grpc.ControllerServicer) -> AsyncIterator[str]:
    server = grpc.aio.server()
    controller_pb2_grpc.add_ControllerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


def fixed(addresses: dict[int, str]) -> VoterEndpoints:
    """A static quorum's voters, where they were configured."""
    return VoterEndpoints(addresses, lambda: VoterSet.static(addresses))


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def lifecycle(link: ControllerLink, offset: Callable[[], int], interval_ms: int = 50) -> BrokerLifecycle:
    return BrokerLifecycle(101, [ENDPOINT], "rack-a", interval_ms, link, offset)


def test_registers_fenced_then_runs_once_caught_up_then_shuts_down_when_let_go() -> None:
    async def body() -> None:
        controller = FakeController(refuse_registrations=2)
        replayed = [0]
        async with serving(controller) as address:
            link = ControllerLink(fixed({1: address}), lambda: 1, request_timeout_s=1.0)
            broker = lifecycle(link, lambda: replayed[0])
            task = asyncio.create_task(broker.run())
            await until(lambda: broker.state is State.FENCED, "registration")
            assert broker.broker_epoch == 40 and len(controller.registrations) == 3
            request = controller.registrations[-1]
            assert (request.broker_id, request.rack, list(request.listeners)) == (101, "rack-a", [ENDPOINT])
            assert request.incarnation_id == broker.incarnation_id
            assert all(r.incarnation_id == broker.incarnation_id for r in controller.registrations)

            await until(lambda: bool(controller.heartbeats), "a heartbeat")
            assert controller.heartbeats[-1].current_metadata_offset == 0 and broker.state is State.FENCED
            replayed[0] = 40  # the broker has replayed its own registration record
            await until(lambda: broker.state is State.RUNNING, "unfencing")
            assert controller.heartbeats[-1].current_metadata_offset == 40

            broker.request_shutdown()
            await until(lambda: broker.state is State.CONTROLLED_SHUTDOWN, "controlled shutdown to start")
            await until(
                lambda: sum(h.want_shut_down for h in controller.heartbeats) >= 3, "shutdown heartbeats"
            )
            assert not task.done()  # the controller has not let go yet
            controller.release = True
            await asyncio.wait_for(task, WAIT_S)
            assert broker.state is State.STOPPED
            await link.close()

    run(body)


def test_every_process_start_is_a_new_incarnation() -> None:
    link = ControllerLink(fixed({1: "127.0.0.1:1"}), lambda: -1, request_timeout_s=0.1)
    assert lifecycle(link, lambda: 0).incarnation_id != lifecycle(link, lambda: 0).incarnation_id


def test_a_lost_registration_is_made_again() -> None:
    async def body() -> None:
        controller = FakeController()
        async with serving(controller) as address:
            link = ControllerLink(fixed({1: address}), lambda: 1, request_timeout_s=1.0)
            broker = lifecycle(link, lambda: 1000)
            task = asyncio.create_task(broker.run())
            await until(lambda: broker.state is State.RUNNING, "running")
            controller.forget = True
            await until(
                lambda: broker.broker_epoch == 41 and broker.state is State.RUNNING, "re-registration"
            )
            controller.epoch += 1  # the controller moved on (e.g. a newer registration record)
            await until(
                lambda: broker.broker_epoch == 43 and broker.state is State.RUNNING, "second re-registration"
            )
            assert len(controller.registrations) == 3
            controller.release = True
            broker.request_shutdown()
            await asyncio.wait_for(task, WAIT_S)
            await link.close()

    run(body)


def test_an_unregistered_broker_waits_for_its_log_to_show_it_then_stops_and_never_registers_again() -> None:
    """The controller answers BROKER_ID_NOT_REGISTERED: while the replayed metadata still
    holds the registration the broker only heartbeats again; once it shows it removed
    (UnregisterBroker), the lifecycle ends as UNREGISTERED, with no new registration."""

    async def body() -> None:
        controller = FakeController()
        seen = [Registration.PRESENT]
        async with serving(controller) as address:
            link = ControllerLink(fixed({1: address}), lambda: 1, request_timeout_s=1.0)
            broker = BrokerLifecycle(
                101, [ENDPOINT], "", 50, link, lambda: 1000, registration=lambda epoch: seen[0]
            )
            task = asyncio.create_task(broker.run())
            await until(lambda: broker.state is State.RUNNING, "running")
            controller.forget_always = True  # the registration is gone: every heartbeat is refused
            asked = len(controller.heartbeats)
            await until(lambda: len(controller.heartbeats) >= asked + 3, "heartbeats while the log lags")
            assert len(controller.registrations) == 1 and not task.done()
            seen[0] = Registration.REMOVED  # the UnregisterBrokerRecord replayed
            await asyncio.wait_for(task, WAIT_S)
            assert broker.state is State.UNREGISTERED and broker.fenced
            assert len(controller.registrations) == 1
            await link.close()

    run(body)


def test_the_registration_in_the_replayed_metadata() -> None:
    registered = MetadataImage(
        offset=50, brokers=frozen({101: BrokerRegistration(101, "i", 40, (), "", False)})
    )
    assert registration_in(registered, 101, 40) is Registration.PRESENT
    assert registration_in(registered, 101, 30) is Registration.UNKNOWN, "another incarnation's"
    assert registration_in(registered, 101, 50) is Registration.UNKNOWN, "not replayed yet"
    assert registration_in(MetadataImage(offset=50), 101, 40) is Registration.REMOVED


def test_heartbeats_report_the_offline_partitions_and_a_change_goes_out_at_once() -> None:
    """Every heartbeat carries the list; when it changes the broker does not wait out its
    interval (a minute here) to tell the controller."""

    async def body() -> None:
        controller = FakeController()
        offline: list[controller_pb2.OfflineTopicReplicas] = []
        async with serving(controller) as address:
            link = ControllerLink(fixed({1: address}), lambda: 1, request_timeout_s=1.0)
            broker = BrokerLifecycle(
                101, [ENDPOINT], "", 60_000, link, lambda: 1000, offline_replicas=lambda: list(offline)
            )
            task = asyncio.create_task(broker.run())
            await until(lambda: broker.state is State.RUNNING, "running")
            sent = len(controller.heartbeats)
            assert not controller.heartbeats[-1].offline_replicas
            offline.append(controller_pb2.OfflineTopicReplicas(topic_id=b"\x01" * 16, partitions=[3]))
            broker.offline_changed()
            await until(lambda: len(controller.heartbeats) > sent, "a heartbeat before the interval")
            assert list(controller.heartbeats[-1].offline_replicas) == offline
            controller.release = True
            broker.request_shutdown()
            await asyncio.wait_for(task, WAIT_S)
            await link.close()

    run(body)


def test_registration_names_the_log_directory_and_heartbeats_list_wiped_partitions_until_first_unfenced() -> (
    None
):
    """The wiped list is read against the folders found at start: once the broker has run,
    folders it had no reason to have then may be missing, and a later fencing sends none."""

    async def body() -> None:
        controller = FakeController()
        offset = [0]
        wiped = [controller_pb2.OfflineTopicReplicas(topic_id=b"\x02" * 16, partitions=[0])]
        async with serving(controller) as address:
            link = ControllerLink(fixed({1: address}), lambda: 1, request_timeout_s=1.0)
            broker = BrokerLifecycle(
                101,
                [ENDPOINT],
                "",
                50,
                link,
                lambda: offset[0],
                log_dir_id=b"\x07" * 16,
                wiped_replicas=lambda: list(wiped),
            )
            task = asyncio.create_task(broker.run())
            await until(lambda: bool(controller.heartbeats), "a heartbeat while fenced")
            assert controller.registrations[0].log_dir_id == b"\x07" * 16
            assert list(controller.heartbeats[0].wiped_replicas) == wiped
            offset[0] = 1000
            await until(lambda: broker.state is State.RUNNING, "running")
            offset[0] = 0  # the controller fences it again
            await until(lambda: broker.state is State.FENCED, "fenced again")
            sent = len(controller.heartbeats)
            await until(lambda: len(controller.heartbeats) > sent, "a heartbeat fenced again")
            assert not controller.heartbeats[-1].wiped_replicas
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await link.close()

    run(body)


def test_shutdown_before_registering_returns_at_once() -> None:
    async def body() -> None:
        link = ControllerLink(fixed({1: closed_port()}), lambda: -1, request_timeout_s=0.5)
        broker = lifecycle(link, lambda: 0)
        task = asyncio.create_task(broker.run())
        await asyncio.sleep(0.05)  # a few refused registrations
        started = time.monotonic()
        broker.request_shutdown()
        await asyncio.wait_for(task, WAIT_S)
        assert time.monotonic() - started < 1.5 and broker.state is State.STOPPED
        await link.close()

    run(body)


def test_link_asks_the_raft_leader_then_follows_hints_then_tries_voters_in_turn() -> None:
    async def body() -> None:
        active = FakeController()
        async with serving(active) as active_address:
            standby = Standby(active_address)
            async with serving(standby) as standby_address:
                dead = closed_port()
                voters = {1: active_address, 2: standby_address, 3: dead}
                # the observer still believes in an old leader
                link = ControllerLink(fixed(voters), lambda: 2, request_timeout_s=1.0)
                request = controller_pb2.BrokerRegistrationRequest(broker_id=101)
                assert link.target() == standby_address
                try:
                    await link.call(lambda stub: stub.BrokerRegistration, request)
                    raise AssertionError("a standby must not answer")
                except LinkError as e:
                    assert "not the active controller" in str(e)
                assert link.target() == active_address  # the hint wins over the stale leader id
                response = await link.call(lambda stub: stub.BrokerRegistration, request)
                assert response.broker_epoch == 40 and standby.calls == 1

                assert link.target() == active_address  # the hint sticks until it fails
                await link.close()

                # A leader that is down: after one failure the voters are tried in turn.
                link = ControllerLink(fixed(voters), lambda: 3, request_timeout_s=1.0)
                assert link.target() == dead
                try:
                    await link.call(lambda stub: stub.BrokerRegistration, request)
                    raise AssertionError("a dead node must not answer")
                except LinkError as e:
                    assert "UNAVAILABLE" in str(e)
                assert link.target() != dead
                await link.close()

    run(body)


def test_link_finds_controllers_the_configuration_does_not_name_in_the_logs_voter_set() -> None:
    """Controllers 10 and 11 were added after the broker was configured with controller 1
    alone (KIP-853), and 1 is gone: the voter set in the broker's log says where they are."""

    async def body() -> None:
        active = FakeController()
        async with serving(active) as active_address:
            gone = closed_port()
            voters = VoterSet(
                [Voter(1, "d1", (gone,)), Voter(10, "d10", (active_address,)), Voter(11, "d11", (closed_port(),))]
            )
            endpoints = VoterEndpoints({1: gone}, lambda: voters)
            request = controller_pb2.BrokerRegistrationRequest(broker_id=101)

            link = ControllerLink(endpoints, lambda: 10, request_timeout_s=1.0)  # the leader it follows
            assert link.target() == active_address
            assert (await link.call(lambda stub: stub.BrokerRegistration, request)).broker_epoch == 40
            await link.close()

            # No leader known: every voter in effect is tried in turn, not only the configured one.
            link = ControllerLink(endpoints, lambda: -1, request_timeout_s=1.0)
            tried = []
            for _ in voters.voters():
                tried.append(link.target())
                try:
                    await link.call(lambda stub: stub.BrokerRegistration, request)
                    break
                except LinkError:
                    continue
            assert tried[-1] == active_address and len(active.registrations) == 2, tried
            await link.close()

    run(body)


def test_registration_names_the_clean_shutdown_epoch_and_then_its_own() -> None:
    """KIP-966: the first registration carries the epoch the clean-shutdown marker named
    (none without a marker: the controller takes the broker out of every ELR); a
    re-registration in the same process carries the process's own epoch, its logs intact."""

    async def body() -> None:
        controller = FakeController()
        async with serving(controller) as address:
            link = ControllerLink(fixed({1: address}), lambda: 1, request_timeout_s=1.0)
            crashed = BrokerLifecycle(102, [ENDPOINT], "", 50, link, lambda: 1000)
            task = asyncio.create_task(crashed.run())
            await until(lambda: crashed.state is State.RUNNING, "the broker without a marker running")
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert not controller.registrations[0].HasField("previous_broker_epoch")

            broker = BrokerLifecycle(101, [ENDPOINT], "", 50, link, lambda: 1000, previous_broker_epoch=7)
            task = asyncio.create_task(broker.run())
            await until(lambda: broker.state is State.RUNNING, "the broker with a marker running")
            assert controller.registrations[1].previous_broker_epoch == 7
            own = broker.broker_epoch
            controller.forget = True  # the registration is lost: register again
            await until(lambda: len(controller.registrations) == 3, "re-registration")
            assert controller.registrations[2].previous_broker_epoch == own
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await link.close()

    run(body)
