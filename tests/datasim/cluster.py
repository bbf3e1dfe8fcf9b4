"""Three brokers, the controller, the clients and the group's members on one scheduler,
and the nemeses (one for the brokers, one for the members).

The nemesis injects one fault at a time, and only into a healthy cluster (every broker up,
registered under its current incarnation, unfenced, in the ISR, no link cut): a crash, a
power cut, a wiped disk, a paused broker (a long GC pause: it comes back with its stale
view and whatever it had queued), a broker cut off from everyone or from the controller
alone, or a
controller failover (no controller for a while, then a new one that knows none of its
predecessor's heartbeats), or a reassignment (KIP-455) that takes the broker off one
partition (it deletes its log; leadership moves if it led) and, a while later, puts it
back: it fetches the partition from the log start and joins the ISR, under the load and
the run's slow and lossy links, and the next fault may hit it before it joined the ISR
(a crash of the broker coming back, of the leader, a controller failover); or a move
while a replica catches up: a broker crashes, and once it is out of a partition's ISR
the partition is moved off one of the two in-sync replicas and the other loses power
(the move must wait until the crashed one is back in the ISR, issue 30); or clean stops
then a power cut: a broker stops cleanly, a while later another does (into the ELRs),
and the last one loses power and comes back first (it must not lead before the second
one stopped is back, issue 30). Half the faults hit the group's coordinator, so that the
group moves often, and moves back when its broker returns; most of those stall it
(``STALLS``: paused past its session, cut off) rather than kill it, so that the group
moves while its old coordinator still holds the members and their commits: since a new
coordinator carries the group on (issue 30), this, not members rejoining, is what brings
a stale coordinator's writes to the controller, which must refuse them.
The broker comes back (restarted as a new incarnation, or its links healed) after a
while. Slow and lossy links are no fault: they are on, per seed, for the whole run.

Buggify points (FoundationDB's): code that now and then takes its rare path, for the
whole run, counted with the faults (``BUGGIFY``): ``txn-answer-lost``, a transaction
coordinator's quorum write taken but its answer lost (``tests.datasim.broker.SimLink``).
"""

from __future__ import annotations

import random
import uuid
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from raftka.metadata.group_placement import group_coordinator
from raftka.metadata.image import MetadataImage
from tests.datasim.broker import TOPIC, SimBroker
from tests.datasim.clients import CONSUMER, IDEMPOTENT_PRODUCER, PRODUCER, Consumer, Producer
from tests.datasim.controller import SESSION_TIMEOUT_MS, TICK_MS, SimController, topic_records
from tests.datasim.disk import Disks, SimDisk
from tests.datasim.group_invariants import GroupInvariants
from tests.datasim.invariants import Invariants
from tests.datasim.loop import SimLoop
from tests.datasim.members import GROUP, MEMBERS, GroupMember
from tests.datasim.network import CONTROLLER, LinkParams, Network
from tests.datasim.transactional import TRANSACTIONAL_PRODUCER, TransactionalProducer
from tests.simulation.scheduler import Scheduler

BROKERS = (1, 2, 3)
TOPIC_ID = uuid.UUID(int=7).bytes
FAULTS = (
    "crash",
    "power-cut",
    "wipe",
    "pause",
    "isolate",
    "isolate-from-controller",
    "controller-failover",
    "reassign",
    "move-while-catching-up",
    "stop-then-power-cut",
)
MOVES = ("reassign", "move-while-catching-up")
STALLS = ("pause", "isolate", "isolate-from-controller")  # the broker lives on, unheard
STALL_SHARE = 0.8  # of the faults that hit the group's coordinator
MEMBER_FAULTS = ("member-crash", "member-leave")
BUGGIFY = ("txn-answer-lost",)
BUGGIFY_SHARE = 0.1  # of the times a buggify point is reached, it takes its rare path
EVENTS_MAX = 2_000_000
OUT_WAIT_MS = 3_000  # a crashed broker leaves the ISR within its session (or the leader's lag bound)
CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
CLEANER_FAULTS = ("power-cut-mid-swap",)  # injected by the cleaner's swap steps (``_cut_mid_swap``)
MID_SWAP_CUT_SHARE = 0.05  # of a cleaner's swap steps, while no other fault runs, those that cut the power
PARTITIONS = (2, 3, 4)  # the topic's, per seed; partition p is led first by broker p % 3 + 1


def topic_configs(rng: random.Random, compaction: random.Random) -> dict[str, str]:
    """The topic's configs; ``compaction`` (a draw of its own, so that the other draws stay
    as they were) makes it compacted in some seeds, with segments small enough to roll and
    a dirty ratio low enough that the brokers' cleaners pass often."""
    configs = {
        "min.insync.replicas": "2",
        "segment.bytes": str(rng.choice((1024, 4096, 1 << 30))),
        "message.timestamp.before.max.ms": str(1 << 62),  # the records' fixed timestamp is fine
        "message.timestamp.after.max.ms": str(1 << 62),
    }
    policy = compaction.choice(CLEANUP_POLICIES)
    if "compact" in policy:
        configs["cleanup.policy"] = policy
        configs["segment.bytes"] = str(compaction.choice((256, 1024)))
        configs["min.cleanable.dirty.ratio"] = compaction.choice(("0.01", "0.3"))
    return configs


def link_params(rng: random.Random) -> LinkParams:
    nodes = [CONTROLLER, *BROKERS, PRODUCER, CONSUMER, IDEMPOTENT_PRODUCER, TRANSACTIONAL_PRODUCER, *MEMBERS]
    params = LinkParams(loss=rng.choice((0.0, 0.0, 0.01, 0.05)))
    for _ in range(rng.randint(0, 2)):
        a, b = rng.sample(nodes, 2)
        if rng.random() < 0.5:
            params.slow[frozenset((a, b))] = rng.choice((20, 100, 300))
        else:
            params.lossy[frozenset((a, b))] = rng.choice((0.1, 0.3))
    return params


class Cluster:
    def __init__(
        self,
        seed: int,
        root: Path,
        disks: Disks,
        trace_lines: int,
        echo: TextIO | None,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.scheduler = Scheduler(EVENTS_MAX)
        self.trace_lines: deque[str] = deque(maxlen=trace_lines)
        self.echo = echo
        self.params = link_params(self.rng)
        self.network = Network(self.scheduler, self.rng, self.params)
        self.network.incarnations[CONTROLLER] = 1
        self.loop = SimLoop()
        self.partitions = self.rng.choice(PARTITIONS)
        self.configs = topic_configs(self.rng, random.Random(f"compaction-{seed}"))
        self.compacted = "compact" in self.configs.get("cleanup.policy", "")
        self.invariants = Invariants(self.partitions, self.compacted)
        self.group_invariants = GroupInvariants()
        self.brokers = {
            b: SimBroker(
                b,
                disks.add(SimDisk(root / f"broker-{b}")),
                self.scheduler,
                self.network,
                self.loop,
                self.rng,
                self.trace,
                self.buggify,
            )
            for b in BROKERS
        }
        self.controller = SimController(
            lambda: self.scheduler.now_ms, self._publish, self.group_invariants.commits_written, self.trace
        )
        for broker in self.brokers.values():
            broker.controller = self.controller
            broker.peers = self.brokers
            broker.cut_mid_swap = self._cut_mid_swap
            broker.on_power_cut = self._power_cut_mid_swap
        self.producer = Producer(
            self.brokers,
            self.scheduler,
            self.network,
            self.rng,
            self.invariants,
            self.trace,
            idempotent=False,
            partitions=self.partitions,
        )
        self.idempotent = Producer(
            self.brokers,
            self.scheduler,
            self.network,
            self.rng,
            self.invariants,
            self.trace,
            idempotent=True,
            partitions=self.partitions,
        )
        self.transactional = TransactionalProducer(
            self.brokers, self.scheduler, self.network, self.rng, self.invariants, self.trace, self.partitions
        )
        self.consumer = Consumer(
            self.brokers, self.scheduler, self.network, self.rng, self.invariants, self.trace, self.partitions
        )
        self.members = [
            GroupMember(
                node,
                self.brokers,
                self.scheduler,
                self.network,
                self.rng,
                self.invariants,
                self.group_invariants,
                self.trace,
                self.partitions,
            )
            for node in MEMBERS[: self.rng.choice((2, 3))]
        ]
        self.faults: dict[str, int] = {}
        self.faulting = False  # a fault is in progress: no other starts
        self.nemesis_on = True

    def trace(self, line: str) -> None:
        text = f"{self.scheduler.now_ms:>6} {line}"
        self.trace_lines.append(text)
        if self.echo is not None:
            print(text, file=self.echo)

    def buggify(self, point: str) -> bool:
        """Whether the code at ``point`` (one of ``BUGGIFY``) takes its rare path this time."""
        if self.rng.random() >= BUGGIFY_SHARE:
            return False
        self.faults[point] = self.faults.get(point, 0) + 1
        self.trace(f"BUGGIFY {point}")
        return True

    def _publish(self, image: MetadataImage) -> None:
        topic = image.topic(TOPIC)
        if topic is not None:
            fenced = sorted(b.broker_id for b in image.brokers.values() if b.fenced)
            states = ", ".join(
                f"{p}: leader {s.leader} epoch {s.leader_epoch} isr {list(s.isr)}"
                for p, s in sorted(topic.partitions.items())
            )
            self.trace(f"image {image.offset}: {states}; fenced {fenced}")
        for broker in self.brokers.values():
            self.network.send(CONTROLLER, broker.id, broker.adopt, image)

    # running ----------------------------------------------------------------------------

    def start(self) -> None:
        for broker in self.brokers.values():
            broker.start()
        self.producer.start()
        self.idempotent.start()
        self.transactional.start()
        self.consumer.start()
        for member in self.members:
            member.start()
        self.scheduler.after(TICK_MS, self._controller_tick)
        self.scheduler.after(self.rng.randint(200, 600), self._nemesis)
        self.scheduler.after(self.rng.randint(1000, 3000), self._member_nemesis)

    def run_until(self, time_ms: int, done: Callable[[], bool] | None = None) -> bool:
        """Run events, checking the invariants after each; True once ``done()`` holds."""
        scheduler, invariants = self.scheduler, self.invariants
        while scheduler.now_ms < time_ms:
            if not scheduler.step():
                break
            self.loop.settle()
            invariants.check(self.brokers, self.controller.image)
            if done is not None and scheduler.events_run % 10 == 0 and done():
                return True
        return done is not None and done()

    def _controller_tick(self) -> None:
        """Session expiry; and the topic, created once every broker has registered."""
        self.controller.tick()
        image = self.controller.image
        if image.topic(TOPIC) is None and all(b in image.brokers for b in BROKERS):
            replicas = [
                BROKERS[p % len(BROKERS) :] + BROKERS[: p % len(BROKERS)] for p in range(self.partitions)
            ]
            self.controller.commit(topic_records(TOPIC, TOPIC_ID, replicas, self.configs))
        self.scheduler.after(TICK_MS, self._controller_tick)

    # the nemesis ------------------------------------------------------------------------

    def healthy(self, *, moving: bool = False) -> bool:
        """Every broker up and in every ISR; ``moving``: or, for a partition being moved,
        every replica but the ones it adds (so the next fault may hit a move midway)."""
        image = self.controller.image
        topic = image.topic(TOPIC)
        if topic is None:
            return False
        for broker in self.brokers.values():
            registration = image.brokers.get(broker.id)
            process = broker.process
            if process is None or registration is None or registration.fenced:
                return False
            if registration.incarnation_id != process.incarnation:
                return False
        return (
            not self.network.cut
            and not self.network.paused
            and all(
                len(state.isr) == len(BROKERS) - (len(state.adding_replicas) if moving else 0)
                and state.leader >= 0
                for state in topic.partitions.values()
            )
        )

    def _nemesis(self) -> None:
        if not self.nemesis_on:
            return
        if not self.faulting and self.healthy(moving=True):
            coordinator = group_coordinator(self.controller.image, GROUP)
            target = (
                self.rng.choice(BROKERS) if coordinator is None or self.rng.random() < 0.5 else coordinator
            )
            topic = self.controller.image.topic(TOPIC)
            still = topic is not None and any(not s.reassigning for s in topic.partitions.values())
            faults = [f for f in FAULTS if f not in MOVES or still]
            if target == coordinator and self.rng.random() < STALL_SHARE:
                faults = list(STALLS)  # the group moves while its old coordinator still holds it
            self._inject(self.rng.choice(faults), target)
        self.scheduler.after(self.rng.randint(50, 400), self._nemesis)

    def _member_nemesis(self) -> None:
        """Members crash or leave and come back, at any time: a group's safety has no budget."""
        if not self.nemesis_on:
            return
        member = self.rng.choice(self.members)
        if member.up:
            fault = self.rng.choice(MEMBER_FAULTS)
            self.faults[fault] = self.faults.get(fault, 0) + 1
            member.crash() if fault == "member-crash" else member.leave()
            self.scheduler.after(self.rng.randint(50, 800), self._member_back, member)
        self.scheduler.after(self.rng.randint(1000, 3000), self._member_nemesis)

    def _member_back(self, member: GroupMember) -> None:
        if not member.up:
            member.start()

    def group_settled(self) -> bool:
        """Every member holds its share of the generation the controller recorded last, and
        together they hold every partition."""
        recorded = self.controller.image.groups.get(GROUP)
        if recorded is None or not all(m.up and m.stable for m in self.members):
            return False
        held = sorted(p for m in self.members if m.generation == recorded.generation_id for p in m.assigned)
        return held == list(range(self.partitions)) and all(
            m.generation == recorded.generation_id for m in self.members
        )

    def _inject(self, fault: str, broker_id: int) -> None:
        self.faults[fault] = self.faults.get(fault, 0) + 1
        self.faulting = True
        broker = self.brokers[broker_id]
        self.trace(f"FAULT {fault} b{broker_id}")
        lasts = self.rng.randint(50, 1500)
        if fault in ("crash", "power-cut", "wipe"):
            broker.crash()
            if fault == "power-cut":
                broker.disk.power_cut()
            elif fault == "wipe":
                broker.wipe()
            self.scheduler.after(lasts, self._restart, broker)
        elif fault == "pause":
            if broker_id == group_coordinator(self.controller.image, GROUP):  # long enough to move the group
                lasts = max(lasts, SESSION_TIMEOUT_MS + self.rng.randint(100, 900))
            self.network.pause(broker_id)
            self.scheduler.after(lasts, self._resume, broker_id)
        elif fault == "reassign":
            topic = self.controller.image.topic(TOPIC)
            still = [p for p, state in topic.partitions.items() if not state.reassigning]  # type: ignore[union-attr]
            partition = self.rng.choice(still)
            replicas = topic.partitions[partition].replicas  # type: ignore[union-attr]
            if self._reassign(partition, tuple(r for r in replicas if r != broker_id)):
                self.scheduler.after(lasts, self._reassign_back, partition, replicas)
            else:
                self.faulting = False
        elif fault == "move-while-catching-up":
            topic = self.controller.image.topic(TOPIC)
            still = [p for p, state in topic.partitions.items() if not state.reassigning]  # type: ignore[union-attr]
            broker.crash()
            self._move_once_out(broker, self.rng.choice(still), self.scheduler.now_ms + OUT_WAIT_MS, lasts)
        elif fault == "stop-then-power-cut":
            broker.stop()
            self.controller.shut_down(broker_id)
            self.scheduler.after(self.rng.randint(0, 300), self._stop_then_power_cut, broker, lasts)
        elif fault == "controller-failover":
            self.controller.fail()
            self.network.isolate(CONTROLLER, list(BROKERS))  # no controller until one is elected
            self.scheduler.after(lasts, self._new_controller)
        else:
            others = (
                [CONTROLLER]
                if fault == "isolate-from-controller"
                else [
                    CONTROLLER,
                    *BROKERS,
                    PRODUCER,
                    CONSUMER,
                    IDEMPOTENT_PRODUCER,
                    TRANSACTIONAL_PRODUCER,
                    *MEMBERS,
                ]
            )
            self.network.isolate(broker_id, others)
            self.scheduler.after(lasts, self._heal)

    def _cut_mid_swap(self, step: str) -> bool:
        """Whether a broker's cleaner loses power at this step of its swap: a fault, so only
        while no other runs."""
        return (
            self.nemesis_on
            and not self.faulting
            and self.healthy(moving=True)
            and self.rng.random() < MID_SWAP_CUT_SHARE
        )

    def _power_cut_mid_swap(self, broker: SimBroker, step: str) -> None:
        [fault] = CLEANER_FAULTS
        self.faults[fault] = self.faults.get(fault, 0) + 1
        self.faulting = True
        self.trace(f"FAULT {fault} b{broker.id} at {step!r}")
        broker.crash("loses power mid-swap")
        broker.disk.power_cut()
        self.scheduler.after(self.rng.randint(50, 1500), self._restart, broker)

    def _reassign(self, partition: int, target: tuple[int, ...]) -> bool:
        """False if the controller refused (a target broker fenced meanwhile, or no controller)."""
        if not self.controller.active:
            return False
        [result] = self.controller.reassign(TOPIC, partition, target).partitions
        self.trace(f"controller: reassign partition {partition} to {list(target)}: {result.error or 'ok'}")
        return result.error == 0

    def _move_once_out(self, crashed: SimBroker, partition: int, until_ms: int, lasts: int) -> None:
        """Once ``crashed`` is out of the partition's ISR (the two others in it), move the
        partition off one of those two, and cut the other's power at once. The move must
        wait for ``crashed`` to be back in the ISR: completed now, it would leave the
        other alone in the ISR, and its power cut would lose the records it had not
        fsynced, which the replica moved off held (issue 30)."""
        state = self.controller.image.topic(TOPIC).partitions[partition]  # type: ignore[union-attr]
        if crashed.id in state.isr or len(state.isr) != len(BROKERS) - 1 or state.reassigning:
            if self.scheduler.now_ms < until_ms:
                self.scheduler.after(TICK_MS, self._move_once_out, crashed, partition, until_ms, lasts)
            else:
                self._restart(crashed)
            return
        moved_off, cut = self.rng.sample(state.isr, 2)
        if not self._reassign(partition, tuple(r for r in state.replicas if r != moved_off)):
            self._restart(crashed)
            return
        self.brokers[cut].crash("loses power")
        self.brokers[cut].disk.power_cut()
        self.scheduler.after(
            lasts, self._restart_then_move_back, (crashed, self.brokers[cut]), partition, state.replicas
        )

    def _stop_then_power_cut(self, first: SimBroker, lasts: int) -> None:
        """``first`` stopped cleanly a while ago; now one of the two others stops cleanly
        too (its controlled shutdown puts it in the ELR of the partitions whose ISR it
        leaves below min.insync.replicas: it holds every acknowledged record), and the
        last one loses power. The last one comes back first, then ``first``, and the one
        stopped now last: until it is back, the last one (crashed, maybe without
        acknowledged records it had not fsynced) must not lead (issue 30)."""
        stopped, last = (self.brokers[b] for b in self.rng.sample([b for b in BROKERS if b != first.id], 2))
        stopped.stop()
        self.controller.shut_down(stopped.id)
        last.crash("loses power")
        last.disk.power_cut()
        self.scheduler.after(lasts, last.start)
        self.scheduler.after(lasts + TICK_MS, first.start)
        self.scheduler.after(2 * lasts + SESSION_TIMEOUT_MS, self._restart, stopped)

    def _restart_then_move_back(
        self, brokers: tuple[SimBroker, ...], partition: int, replicas: tuple[int, ...]
    ) -> None:
        for broker in brokers:
            broker.start()
        self._reassign_back(partition, replicas)

    def _reassign_back(self, partition: int, replicas: tuple[int, ...]) -> None:
        """Put the broker back (once the controller takes it); the next fault may come while
        it catches up (``healthy``)."""
        if not self._reassign(partition, replicas):
            self.scheduler.after(TICK_MS, self._reassign_back, partition, replicas)
            return
        self.faulting = False

    def _resume(self, broker_id: int) -> None:
        self.trace(f"b{broker_id} resumes")
        self.network.resume(broker_id)
        self.faulting = False

    def _new_controller(self) -> None:
        self.controller.fail_over()
        self._heal()

    def _restart(self, broker: SimBroker) -> None:
        broker.start()
        self.faulting = False

    def _heal(self) -> None:
        self.trace("heal")
        self.network.heal()
        self.faulting = False

    # reporting --------------------------------------------------------------------------

    def status(self) -> str:
        lines = []
        image = self.controller.image
        topic = image.topic(TOPIC)
        lines.append(f"controller image {image.offset}")
        for p in range(self.partitions):
            state = None if topic is None else topic.partitions[p]
            if state is not None:
                lines.append(
                    f" partition {p}: leader {state.leader} epoch {state.leader_epoch} isr {list(state.isr)}"
                )
            for broker in self.brokers.values():
                partition = broker.partition(p)
                if broker.process is None:
                    lines.append(f"  b{broker.id}: down")
                elif partition is None:
                    lines.append(f"  b{broker.id}: {broker.process.incarnation}, no partition (not serving)")
                else:
                    log = partition.log
                    lines.append(
                        f"  b{broker.id}: {broker.process.incarnation} {partition.role} "
                        f"epoch {partition.leader_epoch} hw {partition.high_watermark} "
                        f"leo {log.log_end_offset} recovery point {log.recovery_point}"
                    )
            committed = self.invariants.partitions[p].committed
            lines.append(
                f"  committed (acknowledged or read): {len(committed)} records, up to offset "
                f"{max(committed) if committed else -1}"
            )
        recorded = image.groups.get(GROUP)
        lines.append(
            f"group {GROUP}: generation {recorded.generation_id if recorded else None} recorded, "
            f"coordinator b{group_coordinator(image, GROUP)}, committed "
            f"{ {p: o.offset for (_, p), o in sorted(image.offsets.get(GROUP, {}).items())} }"
        )
        for m in self.members:
            lines.append(
                f"  {m.name}: {'up' if m.up else 'down'} {m.member_id[:12]} generation {m.generation} "
                f"{'stable ' if m.stable else ''}assigned {m.assigned} positions {m.positions}"
            )
        return "\n".join(lines)
