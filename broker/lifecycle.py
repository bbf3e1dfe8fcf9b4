"""The broker's side of KRaft's broker lifecycle: register, heartbeat, shut down cleanly.

States, in order (each only moves forward, except that a lost registration sends the
broker back to REGISTERING):

- REGISTERING: ask the active controller for a registration, with this process's fresh
  incarnation id, until it answers with a broker epoch (the offset of the registration
  record). The request names the broker epoch of the last clean shutdown, if the logs
  found a marker (``LogManager.clean_shutdown_epoch``), and the log directory's id
  (``LogManager.directory_id``): without a marker the controller keeps the broker in its
  ELRs only if the directory is the one it registered last (a crash, not a wiped disk;
  KIP-966, KIP-858). Once registered, the process's own epoch takes its place:
  registering again in the same process loses nothing from the logs. A previous
  incarnation with the same listeners is replaced at once (its
  leaderships move); DUPLICATE_BROKER_REGISTRATION means a live incarnation with other
  listeners holds the id: keep asking, its session runs out if it is dead. The broker
  serves no partition until the image holds this registration unfenced
  (``raftka.broker.partitions``).
- FENCED: registered, heartbeating with the offset of the last metadata record it has
  replayed (Kafka's ``currentMetadataOffset``; -1 before any); the controller unfences
  the broker once that offset reaches its registration record, the broker epoch. These
  heartbeats, until the process first runs, also list the partitions the broker is
  eligible for whose folder it did not find at start (``raftka.broker.wiped_replicas``),
  which the controller takes it out of as it unfences it.
- RUNNING: unfenced; heartbeats every ``heartbeat_interval_ms`` keep the session alive
  (a broker that misses the session timeout is fenced again, which FENCED covers).
- CONTROLLED_SHUTDOWN: SIGTERM asked to stop; heartbeats carry ``want_shut_down`` until
  the controller has moved this broker's leaderships away and says ``should_shut_down``.
- STOPPED.
- UNREGISTERED: an operator removed this registration (UnregisterBroker, ``raftka brokers
  unregister``): the controller answers heartbeats BROKER_ID_NOT_REGISTERED and the
  metadata log this broker replayed shows the registration gone. The process does not
  register again (it would undo the operator's act, as Kafka's does not); it stops, and
  started again it registers as a new broker. While the log has not yet shown the
  removal the broker heartbeats again rather than register; a registration the log never
  reached, or another incarnation's, is lost and registered again as before.

While fenced or shutting down the broker heartbeats faster than its interval, so it is
unfenced, or let go, as soon as the controller allows, not one interval later.

Every heartbeat lists the partitions whose log failed on this broker
(``raftka.broker.offline_report``), so the controller moves them off it; when the replica
manager takes one offline or back (``offline_changed``) the next heartbeat goes out at
once (a follower's fetcher stopping on a write error waits for the next one).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from collections.abc import Callable, Sequence
from enum import Enum

import structlog

from raftka.broker.controller_link import ControllerLink, LinkError
from raftka.metadata.image import MetadataImage
from raftka.v1 import controller_pb2, metadata_pb2

E = controller_pb2.ErrorCode
log = structlog.get_logger("raftka.broker.lifecycle")

FAST_HEARTBEAT_MS = 100  # while fenced or shutting down, and after a failed heartbeat
REGISTER_BACKOFF_MAX_MS = 1000
_REREGISTER = frozenset({E.STALE_BROKER_EPOCH, E.BROKER_ID_NOT_REGISTERED})


class State(Enum):
    REGISTERING = "registering"
    FENCED = "fenced"
    RUNNING = "running"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    STOPPED = "stopped"
    UNREGISTERED = "unregistered"


ENDED = frozenset({State.STOPPED, State.UNREGISTERED})


class Registration(Enum):
    """What the metadata this broker replayed says of one of its registrations."""

    PRESENT = "present"  # the image holds it
    REMOVED = "removed"  # the image is past it and holds no registration of this id: unregistered
    UNKNOWN = "unknown"  # the image has not reached it, or holds another incarnation's


def registration_in(image: MetadataImage, broker_id: int, broker_epoch: int) -> Registration:
    if image.offset <= broker_epoch:  # image.offset is the next offset to replay
        return Registration.UNKNOWN
    broker = image.brokers.get(broker_id)
    if broker is None:
        return Registration.REMOVED
    return Registration.PRESENT if broker.epoch == broker_epoch else Registration.UNKNOWN


def new_incarnation_id() -> str:
    """A random UUID in Kafka's text form: every process start is a new incarnation."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class BrokerLifecycle:
    def __init__(
        self,
        broker_id: int,
        listeners: Sequence[metadata_pb2.BrokerEndpoint],
        rack: str,
        heartbeat_interval_ms: int,
        link: ControllerLink,
        metadata_offset: Callable[[], int],
        incarnation_id: str = "",
        on_state: Callable[[State], None] = lambda state: None,
        offline_replicas: Callable[[], list[controller_pb2.OfflineTopicReplicas]] = list,
        previous_broker_epoch: int | None = None,
        log_dir_id: bytes = b"",
        wiped_replicas: Callable[[], list[controller_pb2.OfflineTopicReplicas]] = list,
        registration: Callable[[int], Registration] = lambda broker_epoch: Registration.UNKNOWN,
    ) -> None:
        """``on_state`` hears every change of state (the node's health follows it);
        ``offline_replicas``: the partitions to report offline, read for every heartbeat;
        ``previous_broker_epoch``: the one the clean-shutdown marker named, None without one;
        ``log_dir_id``: the log directory's id; ``wiped_replicas``: the partitions to report
        wiped, read for every heartbeat until the process is first unfenced; ``registration``:
        what the replayed metadata says of the registration at a broker epoch."""
        self.broker_id = broker_id
        self.incarnation_id = incarnation_id or new_incarnation_id()
        self.broker_epoch = -1
        self.previous_broker_epoch = previous_broker_epoch
        self.state = State.REGISTERING
        self._listeners = list(listeners)
        self._rack = rack
        self._interval_s = heartbeat_interval_ms / 1000
        self._fast_s = min(heartbeat_interval_ms, FAST_HEARTBEAT_MS) / 1000
        self._link = link
        self._metadata_offset = metadata_offset
        self._on_state = on_state
        self._offline_replicas = offline_replicas
        self._log_dir_id = log_dir_id
        self._wiped_replicas = wiped_replicas
        self._registration = registration
        self._has_run = False  # unfenced once: folders created since start are no longer wiped
        self._heartbeat_due = False  # the report changed since the last heartbeat was built
        self._wake = asyncio.Event()
        self._shutdown_requested = False
        self._last_problem = ""
        self._register_backoff_s = 0.0
        self._log = log.bind(broker_id=broker_id, incarnation_id=self.incarnation_id)

    @property
    def fenced(self) -> bool:
        return self.state is not State.RUNNING

    def offline_changed(self) -> None:
        """The partitions offline on this broker changed: heartbeat now, not an interval later."""
        self._heartbeat_due = True
        self._wake.set()

    def request_shutdown(self) -> None:
        """Start a controlled shutdown; ``run`` returns once the controller lets go."""
        self._shutdown_requested = True
        self._wake.set()

    async def run(self) -> None:
        """Register, then heartbeat until a controlled shutdown completes or the broker is
        unregistered."""
        while self.state not in ENDED:
            if self.state is State.REGISTERING:
                await self._register()
            else:
                await self._heartbeat()

    # registration ---------------------------------------------------------------------

    async def _register(self) -> None:
        """One registration attempt, then a backoff if it failed (doubling up to a cap)."""
        if self._shutdown_requested:  # never registered: nothing to hand over
            self._become(State.STOPPED)
            return
        request = controller_pb2.BrokerRegistrationRequest(
            broker_id=self.broker_id,
            incarnation_id=self.incarnation_id,
            listeners=self._listeners,
            rack=self._rack,
            log_dir_id=self._log_dir_id,
        )
        if self.previous_broker_epoch is not None:
            request.previous_broker_epoch = self.previous_broker_epoch
        try:
            response = await self._link.call(lambda stub: stub.BrokerRegistration, request)
        except LinkError as e:
            self._problem("registration: no active controller answered", str(e))
        else:
            if response.status.error == E.NONE:
                self.broker_epoch = self.previous_broker_epoch = response.broker_epoch
                self._register_backoff_s = 0.0
                self._log.info("registered", broker_epoch=self.broker_epoch)
                self._become(State.FENCED)
                return
            self._problem("registration refused", _status_text(response.status))
        self._register_backoff_s = min(
            REGISTER_BACKOFF_MAX_MS / 1000, max(self._fast_s, self._register_backoff_s * 2)
        )
        await self._sleep(self._register_backoff_s)

    # heartbeats -----------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        """One heartbeat, then the wait until the next one."""
        want_shut_down = self._shutdown_requested
        if want_shut_down and self.state is not State.CONTROLLED_SHUTDOWN:
            self._become(State.CONTROLLED_SHUTDOWN)
        self._heartbeat_due = False
        request = controller_pb2.BrokerHeartbeatRequest(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            current_metadata_offset=self._metadata_offset(),
            want_shut_down=want_shut_down,
            offline_replicas=self._offline_replicas(),
            wiped_replicas=self._wiped_replicas() if self._first_unfencing() else [],
        )
        ok = False
        try:
            response = await self._link.call(lambda stub: stub.BrokerHeartbeat, request)
        except LinkError as e:
            self._problem("heartbeat: no active controller answered", str(e))
        else:
            ok = self._on_heartbeat(response, want_shut_down)
        if self.state in ENDED or self.state is State.REGISTERING:
            return
        if self._heartbeat_due:  # the report changed while this heartbeat was out
            return
        fast = not ok or self.state is not State.RUNNING
        await self._sleep(self._fast_s if fast else self._interval_s)

    def _on_heartbeat(self, response: controller_pb2.BrokerHeartbeatResponse, want_shut_down: bool) -> bool:
        status = response.status
        if status.error == E.BROKER_ID_NOT_REGISTERED:
            seen = self._registration(self.broker_epoch)
            if seen is Registration.REMOVED:
                self._log.error(
                    "this broker was unregistered (UnregisterBroker); it stops: "
                    "started again, it registers as a new broker",
                    broker_epoch=self.broker_epoch,
                )
                self._become(State.UNREGISTERED)
                return False
            if seen is Registration.PRESENT:  # the metadata log has not shown the removal yet
                self._problem("heartbeat refused; waiting for the metadata log", _status_text(status))
                return False
        if status.error in _REREGISTER:
            self._log.warning("registration lost; registering again", reason=_status_text(status))
            self.broker_epoch = -1
            self._become(State.REGISTERING)
            return False
        if status.error != E.NONE:
            self._problem("heartbeat refused", _status_text(status))
            return False
        self._last_problem = ""
        if want_shut_down:
            if response.should_shut_down:
                self._become(State.STOPPED)
        elif response.is_fenced:
            self._become(State.FENCED)
        else:
            self._become(State.RUNNING)
        return True

    # helpers --------------------------------------------------------------------------

    def _become(self, state: State) -> None:
        if state is not self.state:
            self._log.info(
                "broker state changed",
                state=state.value,
                was=self.state.value,
                broker_epoch=self.broker_epoch,
            )
            self.state = state
            self._has_run = self._has_run or state is State.RUNNING
            self._on_state(state)

    def _first_unfencing(self) -> bool:
        """The heartbeats that may unfence this process for the first time: only then is a
        folder missing since start a wiped one, not one still to be created."""
        return self.state is State.FENCED and not self._has_run

    def _problem(self, what: str, detail: str) -> None:
        """Warn once per distinct problem: a controller election must not flood the log."""
        if detail != self._last_problem:
            self._last_problem = detail
            self._log.warning(what, detail=detail, state=self.state.value)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, cut short by a shutdown request so the first want_shut_down goes out at once."""
        self._wake.clear()
        if self._shutdown_requested and self.state is not State.CONTROLLED_SHUTDOWN:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)


def _status_text(status: controller_pb2.Status) -> str:
    return f"{E.Name(status.error)}: {status.message}" if status.message else E.Name(status.error)
