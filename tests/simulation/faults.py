"""The seed's fault profile and the nemesis that injects faults during the safety phase.

Swarm testing: each seed switches whole fault kinds on or off and picks their rates, so
some seeds hammer one kind of fault and others mix them all.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tests.simulation.network import Link, NetworkParams
from tests.simulation.node import DiskParams

if TYPE_CHECKING:
    from tests.simulation.cluster import Cluster

ACTIONS = (
    "crash",
    "restart",
    "wipe",
    "partition",
    "isolate_leader",
    "asymmetric",
    "swizzle",
    "heal",
    "resign",
    "slow_link",
    "pause",
)
VOTER_CHANGES = ("add_voter", "remove_voter")  # a dynamic seed's (KIP-853)


@dataclass(slots=True)
class FaultProfile:
    network: NetworkParams
    disk: DiskParams
    observers: int  # 0 to 2 observers (node ids 4, 5)
    snapshot_every: int  # 0: the state machine never snapshots
    client_interval_ms: int  # mean time between proposals
    safety_ms: int  # length of the faulty phase
    fault_interval_ms: int  # mean time between faults
    weights: dict[str, int] = field(default_factory=dict)
    downtime_max_ms: int = 2000
    link_skew_max_ms: int = 0  # each link gets its own extra latency up to this
    dynamic: bool = False  # the voter set lives in the log and the nemesis changes it

    @staticmethod
    def sample(rng: random.Random, safety_ms: int) -> FaultProfile:
        delay_max = rng.choice((2, 5, 10, 30))
        network = NetworkParams(
            delay_min_ms=rng.randint(0, min(2, delay_max)),
            delay_max_ms=delay_max,
            spike_probability=rng.choice((0.0, 0.0, 0.01, 0.05)),
            spike_max_ms=rng.choice((50, 300, 1500)),
            loss_probability=rng.choice((0.0, 0.0, 0.01, 0.05, 0.2)),
            duplicate_probability=rng.choice((0.0, 0.0, 0.02, 0.1)),
            unreachable_probability=rng.choice((0.0, 0.5, 0.9)),
        )
        fsync_max = rng.choice((1, 3, 10, 40))
        disk = DiskParams(
            fsync_min_ms=rng.randint(0, min(1, fsync_max)),
            fsync_max_ms=fsync_max,
            spike_probability=rng.choice((0.0, 0.0, 0.01, 0.05)),
            spike_max_ms=rng.choice((50, 300)),
            torn_probability=rng.choice((0.0, 0.3, 0.7)),
            snapshot_save_max_ms=rng.choice((1, 20, 100)),
        )
        weights = {a: (rng.choice((1, 2, 4)) if rng.random() < 0.6 else 0) for a in ACTIONS}
        if weights["crash"] and not weights["restart"]:
            weights["restart"] = weights["crash"]
        dynamic = rng.random() < 0.5
        if dynamic:
            weights.update({a: rng.choice((1, 2, 4)) for a in VOTER_CHANGES})
        return FaultProfile(
            network=network,
            disk=disk,
            observers=2 if dynamic else rng.choice((0, 1, 2, 2)),
            snapshot_every=rng.choice((0, 3, 10, 40)),
            client_interval_ms=rng.choice((3, 10, 30, 100)),
            safety_ms=safety_ms,
            fault_interval_ms=rng.choice((30, 100, 300, 1000)),
            weights=weights,
            downtime_max_ms=rng.choice((50, 500, 3000)),
            link_skew_max_ms=rng.choice((0, 0, 5, 20)),
            dynamic=dynamic,
        )

    @staticmethod
    def calm(
        safety_ms: int, observers: int = 2, snapshot_every: int = 10, dynamic: bool = False
    ) -> FaultProfile:
        """No faults at all: for scripted scenarios that inject their own."""
        return FaultProfile(
            dynamic=dynamic,
            network=NetworkParams(1, 5, 0.0, 0, 0.0, 0.0, 0.9),
            disk=DiskParams(1, 3, 0.0, 0, 0.3, 10),
            observers=observers,
            snapshot_every=snapshot_every,
            client_interval_ms=10,
            safety_ms=safety_ms,
            fault_interval_ms=10**9,
            weights={},
        )

    def describe(self) -> str:
        on = ",".join(f"{a}x{w}" for a, w in sorted(self.weights.items()) if w) or "none"
        on += "; dynamic voter set" if self.dynamic else ""
        n, d = self.network, self.disk
        return (
            f"net delay {n.delay_min_ms}-{n.delay_max_ms}ms (+link skew {self.link_skew_max_ms}) spike "
            f"{n.spike_probability} loss {n.loss_probability} "
            f"dup {n.duplicate_probability} unreach {n.unreachable_probability}; fsync {d.fsync_min_ms}-"
            f"{d.fsync_max_ms}ms torn {d.torn_probability}; observers {self.observers}; snapshot every "
            f"{self.snapshot_every}; client every {self.client_interval_ms}ms; faults every "
            f"{self.fault_interval_ms}ms: {on}"
        )


class Nemesis:
    """Injects one fault at a time, at random intervals, until stopped."""

    def __init__(self, cluster: Cluster, profile: FaultProfile, rng: random.Random) -> None:
        self.cluster = cluster
        self.profile = profile
        self.rng = rng
        self.active = False
        self.counts: dict[str, int] = {}
        actions = [a for a in ACTIONS + VOTER_CHANGES if profile.weights.get(a)]
        self._actions = actions
        self._weights = [profile.weights[a] for a in actions]
        # Power cuts of observers (issue 32: they append without fsync), where the seed
        # crashes nodes at all. Timed by a generator of their own, so seeds found before
        # keep their schedule up to the first such cut.
        self._cuts = random.Random(f"observer-power-cuts-{cluster.seed}")

    def start(self) -> None:
        if not self._actions:
            return
        self.active = True
        self._schedule()
        if self.profile.weights.get("crash") and self.profile.observers:
            self._schedule_observer_cut()

    def stop(self) -> None:
        self.active = False

    def _schedule(self) -> None:
        delay = int(self.rng.expovariate(1.0 / self.profile.fault_interval_ms)) + 1
        self.cluster.scheduler.after(delay, self._fire)

    def _schedule_observer_cut(self) -> None:
        delay = int(self._cuts.expovariate(1.0 / (4 * self.profile.fault_interval_ms))) + 1
        self.cluster.scheduler.after(delay, self._cut_observer_power)

    def _cut_observer_power(self) -> None:
        """Crash an observer (losing what it has not fsynced) and restart it soon after."""
        if not self.active:
            return
        observers = [n for n in self.cluster.up_ids() if not self.cluster.nodes[n].is_voter]
        if observers:
            nid = self._cuts.choice(observers)
            self.cluster.crash(nid)
            self.counts["observer_power_cut"] = self.counts.get("observer_power_cut", 0) + 1
            self.cluster.scheduler.after(self._cuts.randint(1, 300), self._restart_one, nid)
        self._schedule_observer_cut()

    def _fire(self) -> None:
        if not self.active:
            return
        action = self.rng.choices(self._actions, self._weights)[0]
        done = getattr(self, "_" + action)()
        if done:
            self.counts[action] = self.counts.get(action, 0) + 1
        self._schedule()

    # actions: each returns whether it did anything ---------------------------------------
    def _crash(self) -> bool:
        up = self.cluster.up_ids()
        if not up:
            return False
        nid = self.rng.choice(up)
        self.cluster.crash(nid)
        if self.rng.random() < 0.5:
            self.cluster.scheduler.after(
                self.rng.randint(1, self.profile.downtime_max_ms), self._restart_one, nid
            )
        return True

    def _crash_one(self, nid: int) -> None:
        if self.active:
            self.cluster.crash(nid)

    def _restart_one(self, nid: int) -> None:
        if self.active and not self.cluster.nodes[nid].up:
            self.cluster.restart(nid)

    def _restart(self) -> bool:
        down = self.cluster.down_ids()
        if not down:
            return False
        self.cluster.restart(self.rng.choice(down))
        return True

    def _wipe(self) -> bool:
        if self.profile.dynamic:
            return self._wipe_dynamic()
        voters = [self.cluster.nodes[v] for v in sorted(self.cluster.voters)]
        if self.cluster.invariants.unrecovered_wipes() or any(v.recovering() for v in voters):
            # one lost disk at a time, and only once every voter votes: a second voter that
            # cannot vote (lost or new disk) leaves the cluster without a majority for good
            return False
        nid = self.rng.choice(sorted(self.cluster.voters))
        self.cluster.wipe(nid)
        self.cluster.scheduler.after(self.rng.randint(0, 200), self._restart_one, nid)
        return True

    def _wipe_dynamic(self) -> bool:
        """A voter's disk replaced: it comes back with a new directory id, an observer that
        must be added again. Only while the voters could still commit without it and remove it
        (three or more, none dead already) and every node, a down one by its durable log,
        sees the committed voter set."""
        voters = self.cluster.invariants.committed_voters()
        latest = self.cluster.voter_set()
        if latest is None or len(voters) < 3 or self.cluster.dead_voters():
            return False
        views = {getattr(self.cluster.nodes[n].core, "voter_set", None) for n in self.cluster.up_ids()}
        # a node that is down comes back with the latest change in its durable log (seed 10836)
        # (one whose log holds no change past its snapshot restarts on a committed set)
        down = (self.cluster.nodes[n].disk.oracle.latest_voter_change() for n in self.cluster.down_ids())
        views |= {view for view in down if view is not None}
        if views != {voters}:  # a change in flight anywhere: a lost disk now could leave no majority
            return False
        nid = self.rng.choice(sorted(voters.ids))
        self.cluster.wipe(nid)
        self.cluster.scheduler.after(self.rng.randint(0, 200), self._restart_one, nid)
        return True

    def _add_voter(self) -> bool:
        """Ask the leader to add a live node that is no voter (an observer, a wiped voter)."""
        leader, voters = self.cluster.leader_id(), self.cluster.voter_set()
        if leader is None or voters is None or self.cluster.nodes[leader].paused:
            return False  # (a paused leader would take the change later, past the checks here)
        candidates = [n for n in self.cluster.up_ids() if n not in voters.ids]
        if not candidates:
            return False
        node = self.cluster.nodes[self.rng.choice(candidates)]
        voter = node.voter()
        result = self.cluster.nodes[leader].change_voters(lambda core, now: core.add_voter(voter, now))
        self.cluster.note("add-voter", f"{voter} -> {result}")
        return not isinstance(result, Exception)

    def _remove_voter(self) -> bool:
        """Ask the leader to remove a voter: a dead one first, else any, the leader included."""
        leader, voters = self.cluster.leader_id(), self.cluster.voter_set()
        if leader is None or voters is None or self.cluster.nodes[leader].paused:
            return False  # (a paused leader would take the change later, past the checks here)
        dead = self.cluster.dead_voters()
        if dead and not set(dead) & voters.ids:
            return False  # removing a live voter while a dead one counts could leave no majority
        nid = self.rng.choice([v for v in dead if v in voters.ids] or sorted(voters.ids))
        target = voters.get(nid)
        assert target is not None
        result = self.cluster.nodes[leader].change_voters(
            lambda core, now: core.remove_voter(target.node_id, target.directory_id, now)
        )
        self.cluster.note("remove-voter", f"{target} -> {result}")
        return not isinstance(result, Exception)

    def _partition(self) -> bool:
        ids = sorted(self.cluster.nodes)
        self.rng.shuffle(ids)
        cut = self.rng.randint(1, len(ids) - 1)
        self.cluster.partition(sorted(ids[:cut]), sorted(ids[cut:]))
        return True

    def _isolate_leader(self) -> bool:
        leader = self.cluster.leader_id()
        if leader is None:
            return False
        self.cluster.isolate(leader)
        return True

    def _asymmetric(self) -> bool:
        links = self.cluster.network.links()
        chosen = self.rng.sample(links, self.rng.randint(1, max(1, len(links) // 3)))
        self.cluster.cut(sorted(chosen))
        return True

    def _swizzle(self) -> bool:
        """Clog a random subset of links one by one, then unclog them in random order."""
        links = self.cluster.network.links()
        chosen: list[Link] = self.rng.sample(links, self.rng.randint(1, len(links)))
        t = 0
        for link in chosen:
            t += self.rng.randint(1, 100)
            self.cluster.scheduler.after(t, self._clog, link)
        self.rng.shuffle(chosen)
        for link in chosen:
            t += self.rng.randint(1, 300)
            self.cluster.scheduler.after(t, self.cluster.unclog, link)
        return True

    def _clog(self, link: Link) -> None:
        if self.active:
            self.cluster.clog(link)

    def _heal(self) -> bool:
        self.cluster.heal()
        return True

    def _resign(self) -> bool:
        leader = self.cluster.leader_id()
        if leader is None:
            return False
        self.cluster.resign(leader)
        if self.rng.random() < 0.5:  # a graceful shutdown: resign, then stop
            self.cluster.scheduler.after(self.rng.randint(1, 50), self._crash_one, leader)
        return True

    def _pause(self) -> bool:
        """Stop a process for a while (SIGSTOP, a long GC pause): timers and messages queue up."""
        up = [n for n in self.cluster.up_ids() if not self.cluster.nodes[n].paused]
        if not up:
            return False
        nid = self.rng.choice(up)
        self.cluster.pause(nid)
        self.cluster.scheduler.after(self.rng.randint(10, 3000), self.cluster.resume, nid)
        return True

    def _slow_link(self) -> bool:
        link = self.rng.choice(self.cluster.network.links())
        self.cluster.network.slow(link, self.rng.choice((20, 100, 500)))
        return True
