"""One broker of the simulation: the real data plane, with the wiring of
``raftka.broker.server`` replaced by messages on the simulated network.

A process holds the real ``LogManager`` (no background flusher: fsyncs happen inline,
recorded by the simulated disk), ``ReplicaManager``, one ``FollowerFetch`` per leader,
``BrokerPartitions``, ``GroupCoordinator`` and ``TransactionCoordinator`` (its markers
go to the partition leaders' ``ReplicaManager.write_txn_markers``). It registers with the controller under a
fresh incarnation id, heartbeats, applies every newer image the controller sends (to its
replicas and its coordinator), fetches from its partitions' leaders, sends its ISR
changes, polls its groups, and now and then fsyncs its logs (``flush.ms``) and
checkpoints its high watermarks and recovery points, as the server's timers do. It runs
the real ``LogCleaner`` too, one pass at a time on the scheduler's thread (``clean_now``
every ``CLEAN_MS``), for a compacted topic; ``cut_mid_swap`` may cut the power at any step
of a pass's swap (``PowerCutMidSwap``). A crash
drops the process (its files are closed unsynced, its coordinator's writes stop); a
power cut then also rebuilds the disk from what was fsynced; a wipe empties it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

from raftka.broker.controller_link import LinkError
from raftka.broker.groups import coordinator as coordinator_module
from raftka.broker.groups.coordinator import GroupCoordinator
from raftka.broker.groups.group import GroupLimits
from raftka.broker.log.cleaner.manager import LogCleaner
from raftka.broker.log.cleaner.offset_map import OffsetMap
from raftka.broker.log.manager import LogManager
from raftka.broker.partitions import BrokerPartitions
from raftka.broker.producer_ids import ProducerIdManager
from raftka.broker.replica import isr
from raftka.broker.replica.fetcher import FollowerFetch
from raftka.broker.replica.manager import ReplicaManager
from raftka.broker.replica.partition import Partition
from raftka.broker.transactions import coordinator as txn_coordinator_module
from raftka.broker.transactions.coordinator import TransactionCoordinator
from raftka.broker.transactions.markers import LeaderUnreachable, MarkerWriter
from raftka.metadata.image import MetadataImage
from raftka.node.config import BrokerConfig, CleanerConfig
from raftka.v1 import broker_pb2, controller_pb2, metadata_pb2
from raftka.wire.frames import DATA_LISTENER
from tests.datasim.disk import SimDisk
from tests.datasim.loop import SimLoop, run_now
from tests.datasim.network import CONTROLLER, Network
from tests.simulation.scheduler import Handle, Scheduler

E = controller_pb2.ErrorCode
LAG_MS = 400  # replica.lag.time.max.ms, scaled to the simulation
HEARTBEAT_MS = 100
REGISTER_RETRY_MS = 200
FETCH_IDLE_MS = 10  # a follower asks again this soon after an answer
CALL_TIMEOUT_MS = 300  # a request with no answer by then is taken as lost
CHECKPOINT_MS = 250
GROUP_POLL_MS = 100  # the coordinator looks at its groups' deadlines this often
WRITE_TIMEOUT_MS = 1_000  # a coordinator's controller write is tried again until then
TIMER_SCALE = 0.1  # the transaction coordinator's timers and backoffs, scaled to the simulation
TXN_ANSWER_LOST_MS = CALL_TIMEOUT_MS  # a WriteTransaction whose answer is lost fails after this
RECORDS_MAX = 100
T0_MS = 1_700_000_000_000  # every record's timestamp: nothing in a run reads the wall clock
CLEAN_MS = 150  # a broker's cleaner looks for a log to clean this often
KEY_MAP_BYTES = 1 << 16  # the cleaner's key map: a few thousand keys, plenty for the producers' few
GROUP_LIMITS = GroupLimits(
    min_session_timeout_ms=100, max_session_timeout_ms=5_000, initial_rebalance_delay_ms=0
)
TOPIC = "t"
_REREGISTER = frozenset({E.STALE_BROKER_EPOCH, E.BROKER_ID_NOT_REGISTERED})


class LeaderFetch:
    """The fetcher of one leader's partitions: one fetch in flight at most."""

    def __init__(self, fetch: FollowerFetch) -> None:
        self.fetch = fetch
        self.call = 0  # the fetch in flight (0: none)
        self.sent: dict[tuple[bytes, int], tuple[Partition, int, int]] = {}  # what it asked
        self.lost: Handle | None = None  # the timeout of the fetch in flight


class PowerCutMidSwap(Exception):
    """Raised at a step of a cleaner's swap: the machine loses power there."""


class Process:
    """One incarnation of a broker: everything a crash loses."""

    def __init__(self, broker: SimBroker, incarnation: str) -> None:
        self.incarnation = incarnation
        self.broker_epoch = -1  # until the controller answers the registration
        self.applied_offset = -1
        self.tasks: set[asyncio.Task[Any]] = set()
        self.logs = LogManager(broker.disk.root)
        self.logs.open_all()
        self.cleaner = LogCleaner(
            broker.disk.root,
            CleanerConfig(),
            self.logs.cleaner_candidates(lambda: self.replicas.high_watermarks()),
            wall_ms=lambda: T0_MS + broker.clock_ms(),  # the records' time, moving on with the run's
        )
        self.key_map = OffsetMap(KEY_MAP_BYTES)
        self.cleanings = 0  # cleaner passes swapped in (or cut short): the logs changed beneath their readers
        self.config = BrokerConfig(replica_lag_time_max_ms=LAG_MS)
        self.clock_s = broker.clock_s
        self.broker_id = broker.id
        self.trace = broker.trace
        self.fetchers: dict[int, LeaderFetch] = {}  # by leader, as ``ReplicaFetchers`` keeps them
        self.source: dict[Partition, int] = {}
        self.roles = BrokerPartitions(broker.id, incarnation)
        self.groups = GroupCoordinator(
            broker.id,
            lambda: self.broker_epoch,
            GROUP_LIMITS,
            SimLink(broker, self),  # type: ignore[arg-type]
            RECORDS_MAX,
            clock_ms=broker.clock_ms,
        )
        link = SimLink(broker, self)
        self.transactions = TransactionCoordinator(
            broker.id,
            lambda: self.broker_epoch,
            link,  # type: ignore[arg-type]
            ProducerIdManager(link, broker.id, lambda: self.broker_epoch),
            MarkerWriter(
                broker.write_markers,
                lambda: self.replicas.image,
                broker.id,
                lambda: self.broker_epoch,
                broker.sleep,
            ),
            wall_clock_ms=broker.clock_ms,
            sleep=broker.sleep,
        )
        self.replicas = ReplicaManager(
            broker.id,
            self.logs,
            self.config,
            request_isr_change=broker.send_isr_change,
            on_follow=self.follow,
            on_stop_following=self.stop_following,
            high_watermarks=self.logs.read_high_watermarks(),
            clock_ms=broker.clock_ms,
        )

    def follow(self, partition: Partition) -> None:
        self.stop_following(partition)
        fetcher = self.fetchers.get(partition.leader_id)
        if fetcher is None:
            fetch = FollowerFetch(
                self.broker_id, self.config, lambda: self.broker_epoch, self._truncated, clock=self.clock_s
            )
            fetcher = self.fetchers[partition.leader_id] = LeaderFetch(fetch)
        fetcher.fetch.add(partition)
        self.source[partition] = partition.leader_id

    def stop_following(self, partition: Partition) -> None:
        leader = self.source.pop(partition, None)
        if leader is not None:
            self.fetchers[leader].fetch.remove(partition)

    def _truncated(self, partitions: list[Partition], then: Callable[[], None]) -> None:
        for p in partitions:
            self.trace(f"{self.incarnation} truncated to {p.log.log_end_offset} (hw {p.high_watermark})")
        self.replicas.truncated(partitions, then)

    def close_unsynced(self) -> None:
        """The process dies: its files close with nothing synced (the page cache keeps them)."""
        for name in self.logs.names():
            partition_log = self.logs.get(name)
            if partition_log is not None:
                partition_log.close_unflushed()


class _RpcName:
    """Stands in for a stub: ``(lambda stub: stub.CommitGroupOffsets)(_RpcName())`` is its name."""

    def __getattr__(self, name: str) -> str:
        return name


class SimLink:
    """The coordinators' line to the controller over the simulated network: an attempt
    unanswered after ``CALL_TIMEOUT_MS`` is sent again, as ``GroupCoordinator._write``
    retries ``ControllerLink.call``, until ``WRITE_TIMEOUT_MS`` of simulated time have
    passed (``sim_time_writes`` turns the coordinators' own, wall-clock, retries off).

    Buggify (``SimBroker.buggify``): now and then a ``WriteTransaction`` is taken by the
    controller but its answer is lost, and the coordinator hears ``LinkError`` after
    ``TXN_ANSWER_LOST_MS``, as when the quorum commits a write after the coordinator's
    timeout: the image then shows a state nobody was told of."""

    def __init__(self, broker: SimBroker, process: Process) -> None:
        self.broker = broker
        self.process = process

    async def call(self, rpc: Callable[[Any], str], request: Any) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._attempt(rpc(_RpcName()), request, future, self.broker.clock_ms() + WRITE_TIMEOUT_MS)
        return await future

    def _attempt(self, name: str, request: Any, future: asyncio.Future[Any], deadline_ms: int) -> None:
        broker = self.broker
        if future.done() or broker.process is not self.process:
            return
        if broker.clock_ms() >= deadline_ms:
            future.set_exception(LinkError(f"{name}: no answer from the controller"))
            return
        if name == "WriteTransaction" and broker.buggify("txn-answer-lost"):
            broker.network.send(broker.id, CONTROLLER, broker.at_controller_write, name, request, None)
            broker.scheduler.after(
                TXN_ANSWER_LOST_MS, _fail, future, LinkError(f"{name}: the answer was lost")
            )
            return
        broker.network.send(broker.id, CONTROLLER, broker.at_controller_write, name, request, future)
        broker.scheduler.after(CALL_TIMEOUT_MS, self._attempt, name, request, future, deadline_ms)


@contextlib.contextmanager
def sim_time_writes() -> Iterator[None]:
    """The coordinator gives up a controller write at the first LinkError, which ``SimLink``
    raises only once it has retried in simulated time (the coordinator would retry after
    wall-clock sleeps, which a seed cannot replay)."""
    with (
        mock.patch.object(coordinator_module, "CONTROLLER_WRITE_TIMEOUT_S", 0.0),
        mock.patch.object(txn_coordinator_module, "CONTROLLER_WRITE_TIMEOUT_S", 0.0),
    ):
        yield


class SimBroker:
    def __init__(
        self,
        broker_id: int,
        disk: SimDisk,
        scheduler: Scheduler,
        network: Network,
        loop: SimLoop,
        rng: random.Random,
        trace: Callable[[str], None],
        buggify: Callable[[str], bool] = lambda _: False,
    ) -> None:
        """``buggify(point)``: whether the code at ``point`` takes its rare path this time."""
        self.id = broker_id
        self.buggify = buggify
        self.disk = disk
        self.scheduler = scheduler
        self.network = network
        self.loop = loop
        self.rng = rng
        self.trace = trace
        self.flush_ms: int | None = rng.choice((50, 300, 1000, None))  # flush.ms; None: never
        self.process: Process | None = None
        # the last image applied: the broker's copy of the metadata log is on its disk (the
        # quorum's storage fsyncs it), and a restart replays it before it hears the controller
        self.replayed: MetadataImage | None = None
        self.incarnations = 0
        self.controller: Any = None  # the SimController, set by the cluster
        self.peers: dict[int, SimBroker] = {}
        # set by the cluster: whether to cut the power at this step of a swap, and the cut
        self.cut_mid_swap: Callable[[str], bool] = lambda step: False
        self.on_power_cut: Callable[[SimBroker, str], None] = lambda broker, step: None

    def clock_ms(self) -> int:
        return self.scheduler.now_ms

    def clock_s(self) -> float:
        return self.scheduler.now_ms / 1000

    async def sleep(self, seconds: float) -> None:
        """The transaction coordinator's sleeps, in simulated time (``TIMER_SCALE``)."""
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.scheduler.after(max(1, round(seconds * 1000 * TIMER_SCALE)), _answer, woken, None)
        await woken

    def partition(self, partition: int) -> Partition | None:
        """This broker's replica of the topic's ``partition``, while it serves one."""
        return None if self.process is None else self.process.replicas.get(TOPIC, partition)

    # lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.incarnations += 1
        incarnation = f"b{self.id}-{self.incarnations}"
        self.process = Process(self, incarnation)
        self.network.incarnations[self.id] = self.incarnations
        self.trace(f"b{self.id} starts as {incarnation}")
        if self.replayed is not None:
            self.adopt(self.replayed)
        self._register(self.process)
        self._every(self.process, CHECKPOINT_MS, self._checkpoint)
        self._every(self.process, LAG_MS // 2, lambda p: p.replicas.shrink_isrs())
        self._every(self.process, FETCH_IDLE_MS, self._maybe_fetch)
        # on the loop, as ``GroupCoordinator.run`` polls: it may start writes (an emptied group's record)
        self._every(
            self.process, GROUP_POLL_MS, lambda p: self.loop.loop.call_soon(p.groups.poll, self.clock_ms())
        )
        self.process.tasks.add(self.loop.spawn(self.process.transactions.run(), lambda _: None))
        if self.flush_ms is not None:
            self._every(self.process, self.flush_ms, self._flush)
        self._every(self.process, CLEAN_MS, self._clean)

    def wipe(self) -> None:
        """The disk is lost, the broker's copy of the metadata log with it."""
        self.disk.wipe()
        self.replayed = None

    def stop(self) -> None:
        """A clean stop: every log flushed and fsynced, and the clean-shutdown marker naming
        this incarnation's broker epoch (``LogManager.close``), so the next incarnation
        registers as one that holds everything it held. (No controlled shutdown: the
        controller fences it when its session ends, or when it registers again.)"""
        process = self.process
        if process is not None:
            process.logs.close(process.broker_epoch)
            self.crash("stops cleanly")

    def crash(self, how: str = "crashes") -> None:
        process = self.process
        if process is None:
            return
        self.process = None
        self.network.incarnations.pop(self.id, None)
        for task in process.tasks:
            task.cancel()
        self.loop.spawn(process.groups.close(), lambda _: None)  # its writes to the controller stop
        self.loop.spawn(process.transactions.close(), lambda _: None)
        process.close_unsynced()
        self.trace(f"b{self.id} {how} ({process.incarnation})")

    def _every(self, process: Process, period_ms: int, work: Callable[[Process], None]) -> None:
        def tick() -> None:
            if self.process is process:
                if self.id not in self.network.paused:  # a paused process's timers fire once it resumes
                    work(process)
                self.scheduler.after(period_ms, tick)

        self.scheduler.after(self.rng.randint(1, period_ms), tick)

    def _checkpoint(self, process: Process) -> None:
        process.logs.write_high_watermarks(process.replicas.high_watermarks())
        process.logs.checkpoint_recovery_points()

    def _clean(self, process: Process) -> None:
        """One pass of the cleaner, if a log is due; the power may go mid-swap."""

        def step(name: str) -> None:
            if self.cut_mid_swap(name):
                raise PowerCutMidSwap(name)

        try:
            result = process.cleaner.clean_now(process.key_map, step)
        except PowerCutMidSwap as cut:
            process.cleanings += 1
            self.on_power_cut(self, str(cut))
            return
        if result is not None:
            process.cleanings += 1
            self.trace(f"b{self.id} cleaned up to {result.end_offset} ({len(result.groups)} segments)")

    def _flush(self, process: Process) -> None:
        for partition in process.replicas.partitions():
            partition.log.flush()

    # the controller ---------------------------------------------------------------------

    def _register(self, process: Process) -> None:
        if self.process is not process or process.broker_epoch >= 0:
            return
        request = controller_pb2.BrokerRegistrationRequest(
            broker_id=self.id,
            incarnation_id=process.incarnation,
            listeners=[metadata_pb2.BrokerEndpoint(name=DATA_LISTENER, host=f"broker{self.id}", port=9092)],
            log_dir_id=process.logs.directory_id,  # the same after a crash or a power cut, not a wipe
        )
        if process.logs.clean_shutdown_epoch is not None:  # KIP-966: the last stop was clean
            request.previous_broker_epoch = process.logs.clean_shutdown_epoch
        self.network.send(self.id, CONTROLLER, self._at_controller_register, request, process)
        self.scheduler.after(REGISTER_RETRY_MS, self._register, process)

    def _at_controller_register(
        self, request: controller_pb2.BrokerRegistrationRequest, process: Process
    ) -> None:
        response = self.controller.register(request)
        self.network.send(CONTROLLER, self.id, self._registered, response, process)

    def _registered(self, response: controller_pb2.BrokerRegistrationResponse, process: Process) -> None:
        if self.process is not process or process.broker_epoch >= 0 or response.status.error != E.NONE:
            return
        process.broker_epoch = response.broker_epoch
        self.trace(f"b{self.id} registered at epoch {response.broker_epoch}")
        self._heartbeat(process, process.broker_epoch)

    def _heartbeat(self, process: Process, epoch: int) -> None:
        if self.process is not process or process.broker_epoch != epoch:
            return
        request = controller_pb2.BrokerHeartbeatRequest(
            broker_id=self.id, broker_epoch=epoch, current_metadata_offset=process.applied_offset
        )
        self.network.send(self.id, CONTROLLER, self._at_controller_heartbeat, request, process)
        self.scheduler.after(HEARTBEAT_MS, self._heartbeat, process, epoch)

    def _at_controller_heartbeat(
        self, request: controller_pb2.BrokerHeartbeatRequest, process: Process
    ) -> None:
        response = self.controller.heartbeat(request)
        image = self.controller.image  # the metadata log goes on reaching a live broker
        self.network.send(CONTROLLER, self.id, self._heartbeat_answered, request, response, image, process)

    def _heartbeat_answered(
        self,
        request: controller_pb2.BrokerHeartbeatRequest,
        response: controller_pb2.BrokerHeartbeatResponse,
        image: MetadataImage,
        process: Process,
    ) -> None:
        """A registration the controller no longer holds (a later retry of ours replaced
        it, say) is registered again, as ``raftka.broker.lifecycle`` does."""
        if self.process is not process or process.broker_epoch != request.broker_epoch:
            return
        if response.status.error in _REREGISTER:
            self.trace(f"b{self.id} registers again: {E.Name(response.status.error)}")
            process.broker_epoch = -1
            self._register(process)
        self.adopt(image)

    def adopt(self, image: MetadataImage) -> None:
        """A metadata image arrived; older ones than this process has applied are ignored."""
        process = self.process
        if process is None or image.offset <= process.applied_offset:
            return
        process.applied_offset = image.offset
        self.replayed = image
        process.replicas.apply(image, process.roles.update(image))
        process.groups.update(image)
        # on the loop, as the server's image listener runs: it may start completion tasks
        self.loop.loop.call_soon(process.transactions.update, image)

    def send_isr_change(self, partition: Partition, new_isr: tuple[int, ...]) -> None:
        process = self.process
        assert process is not None
        request = controller_pb2.AlterPartitionRequest(broker_id=self.id, broker_epoch=process.broker_epoch)
        request.topics.add(topic_id=partition.topic_id).partitions.add(
            partition=partition.partition,
            leader_epoch=partition.leader_epoch,
            new_isr=new_isr,
            partition_epoch=partition.partition_epoch,
            new_isr_broker_epochs=partition.broker_epochs(new_isr, process.broker_epoch),
        )
        tried = (partition.partition_epoch, new_isr)
        self.network.send(self.id, CONTROLLER, self._at_controller_alter, request, process, partition, tried)
        self.scheduler.after(CALL_TIMEOUT_MS, self._isr_change_lost, process, partition, new_isr)

    def _at_controller_alter(self, request: controller_pb2.AlterPartitionRequest, *answer_to: Any) -> None:
        response = self.controller.alter_partition(request)
        self.network.send(CONTROLLER, self.id, self._isr_changed, response, *answer_to)

    def _isr_change_lost(self, process: Process, partition: Partition, new_isr: tuple[int, ...]) -> None:
        """No answer: send it again (``IsrChanges`` retries a change the link lost)."""
        if (
            self.process is process
            and partition.is_leader
            and partition.pending_isr == new_isr
            and partition.isr_change_waits_for_epoch < 0  # not answered (NEW_LEADER_ELECTED keeps it)
        ):
            self.send_isr_change(partition, new_isr)

    def _isr_changed(
        self,
        response: controller_pb2.AlterPartitionResponse,
        process: Process,
        partition: Partition,
        tried: tuple[int, tuple[int, ...]],
    ) -> None:
        """As ``raftka.broker.replica.isr.IsrChanges`` settles an answer."""
        epoch, new_isr = tried
        if self.process is not process or partition.pending_isr != new_isr:
            return
        if response.status.error != E.NONE:
            partition.isr_change_refused(-1)
        else:
            isr.settle(partition, response.partitions[0], epoch)
        process.replicas.isr_change_done(partition)

    # replication ------------------------------------------------------------------------

    def _maybe_fetch(self, process: Process) -> None:
        for leader, fetcher in process.fetchers.items():
            ready = [] if fetcher.call else fetcher.fetch.ready(self.clock_s())
            if not ready:
                continue
            request, fetcher.sent = fetcher.fetch.request(ready)
            request.max_wait_ms = 0  # never parks: the scheduler paces the fetches
            call = fetcher.call = self.rng.randrange(1, 1 << 30)
            peer = self.peers[leader]
            self.network.send(self.id, leader, peer.serve_fetch, request, self.id, call)
            fetcher.lost = self.scheduler.after(CALL_TIMEOUT_MS, self._fetch_lost, fetcher, call)

    def _fetch_lost(self, fetcher: LeaderFetch, call: int) -> None:
        if fetcher.call == call:
            fetcher.call = 0

    def serve_fetch(self, request: broker_pb2.FetchRequest, follower: int, call: int) -> None:
        assert self.process is not None
        response = run_now(self.process.replicas.fetch(request))
        peer = self.peers[follower]
        self.network.send(self.id, follower, peer.fetched, response, self.id, call)

    def fetched(self, response: broker_pb2.FetchResponse, leader: int, call: int) -> None:
        fetcher = None if self.process is None else self.process.fetchers.get(leader)
        if fetcher is None or fetcher.call != call:
            return
        fetcher.call = 0
        if fetcher.lost is not None:
            fetcher.lost.cancel()
        fetcher.fetch.apply(response, fetcher.sent)

    # clients ----------------------------------------------------------------------------

    def serve_produce(self, request: broker_pb2.ProduceRequest, reply: Callable[[Any], None]) -> None:
        process = self.process
        assert process is not None
        task = self.loop.spawn(process.replicas.produce(request), reply)
        process.tasks.add(task)
        task.add_done_callback(process.tasks.discard)

    def serve_client_fetch(self, request: broker_pb2.FetchRequest, reply: Callable[[Any], None]) -> None:
        assert self.process is not None
        reply(run_now(self.process.replicas.fetch(request)))

    # the group coordinator ---------------------------------------------------------------

    def serve_group(self, kind: str, request: Any, reply: Callable[[Any], None]) -> None:
        """A group request (``join``, ``sync``, ``heartbeat``, ``leave``, ``commit``,
        ``find_coordinator``) to this broker's coordinator; JoinGroup and SyncGroup may park."""
        process = self.process
        assert process is not None
        task = self.loop.spawn(getattr(process.groups, kind)(request), reply)
        process.tasks.add(task)
        task.add_done_callback(process.tasks.discard)

    def at_controller_write(self, name: str, request: Any, future: asyncio.Future[Any] | None) -> None:
        """A coordinator's request at the controller; answered unless ``future`` is None."""
        handlers = {
            "RecordGroupRebalance": self.controller.record_rebalance,
            "CommitGroupOffsets": self.controller.commit_group_offsets,
            "WriteTransaction": self.controller.write_transaction,
            "AllocateProducerIds": self.controller.allocate_producer_ids,
        }
        response = handlers[name](request)
        if future is not None:
            self.network.send(CONTROLLER, self.id, _answer, future, response)

    # the transaction coordinator ----------------------------------------------------------

    def serve_txn(self, kind: str, request: Any, reply: Callable[[Any], None]) -> None:
        """A transactional client's request (``init_producer_id``, ``add_partitions``,
        ``end_txn``) to this broker's transaction coordinator."""
        process = self.process
        assert process is not None
        task = self.loop.spawn(getattr(process.transactions, kind)(request), reply)
        process.tasks.add(task)
        task.add_done_callback(process.tasks.discard)

    async def write_markers(
        self, leader: int, request: broker_pb2.WriteTxnMarkersRequest
    ) -> broker_pb2.WriteTxnMarkersResponse:
        """The coordinator's ``LeaderCall``: WriteTxnMarkers at ``leader`` over the network;
        ``LeaderUnreachable`` when no answer comes within ``CALL_TIMEOUT_MS``."""
        answered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        peer = self.peers[leader]
        self.network.send(self.id, leader, peer.serve_markers, request, self.id, answered)
        self.scheduler.after(CALL_TIMEOUT_MS, _fail, answered, LeaderUnreachable(f"no answer from b{leader}"))
        return await answered

    def serve_markers(
        self, request: broker_pb2.WriteTxnMarkersRequest, coordinator: int, answered: asyncio.Future[Any]
    ) -> None:
        process = self.process
        assert process is not None
        task = self.loop.spawn(
            process.replicas.write_txn_markers(request),
            lambda response: self.network.send(self.id, coordinator, _answer, answered, response),
        )
        process.tasks.add(task)
        task.add_done_callback(process.tasks.discard)

    def forward_offset_fetch(
        self, request: controller_pb2.OffsetFetchRequest, reply: Callable[[Any], None]
    ) -> None:
        """OffsetFetch goes on to the active controller, as ``raftka.broker.data_service`` sends it."""
        self.network.send(self.id, CONTROLLER, self._at_controller_offset_fetch, request, reply)

    def _at_controller_offset_fetch(
        self, request: controller_pb2.OffsetFetchRequest, reply: Callable[[Any], None]
    ) -> None:
        self.network.send(CONTROLLER, self.id, reply, self.controller.fetch_offsets(request))


def _answer(future: asyncio.Future[Any], response: Any) -> None:
    if not future.done():
        future.set_result(response)


def _fail(future: asyncio.Future[Any], error: Exception) -> None:
    if not future.done():
        future.set_exception(error)
