"""A cluster of real controller processes on loopback, wired through the fault proxy.

``Cluster`` writes each node's config (the product's own ``render_toml``, so a renamed
key breaks here, not in a node that never starts), formats its storage, and gives the
tests what they need to break it and to judge what survived: start, kill, signal and
restart nodes, cut them off, find the leader, append, and read every node's journal.

Each node's ``listener`` is its real port; its ``controller.quorum.voters`` lists itself
at that port and every peer at the proxy link it dials that peer through (see
``proxy.py``). The voter ids are identical on every node; only the addresses differ, as
they would behind NAT.
"""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from raftka.command.local import free_ports
from raftka.node.config import JournalConfig, LogConfig, NodeConfig, Voter, render_toml
from raftka.raft.config import RaftConfig
from raftka.raft.storage.meta import format_storage, new_cluster_id
from raftka.v1 import raft_pb2
from tests.integration.client import AppendOutcome, AppendStatus, JournalView, NodeClient
from tests.integration.history import AppendHistory
from tests.integration.node import NodeProcess
from tests.integration.polling import wait_until
from tests.integration.proxy import LOOPBACK, ProxyNetwork

LEADER_TIMEOUT_S = 10.0
CONVERGE_TIMEOUT_S = 15.0
APPEND_TIMEOUT_S = 5.0

View = raft_pb2.DescribeQuorumResponse


@dataclass(frozen=True, slots=True)
class Leadership:
    leader_id: int
    epoch: int


def _summary(views: Mapping[int, View | None]) -> str:
    """``{1: follower of 2 @3, 2: leader @3, 3: down}``: for failure messages."""

    def one(view: View | None) -> str:
        if view is None:
            return "no answer"
        if view.role == "leader":
            return f"leader @{view.leader_epoch}"
        return f"{view.role} of {view.leader_id} @{view.leader_epoch}"

    return "{" + ", ".join(f"{node_id}: {one(view)}" for node_id, view in views.items()) + "}"


def agreed_leader(views: Mapping[int, View | None]) -> Leadership | None:
    """The leadership every view agrees on, with exactly one node claiming it; else None."""
    if not views or any(view is None for view in views.values()):
        return None
    claims = {(view.leader_id, view.leader_epoch) for view in views.values() if view is not None}
    leaders = [node_id for node_id, view in views.items() if view is not None and view.role == "leader"]
    if len(claims) != 1 or len(leaders) != 1:
        return None
    leader_id, epoch = claims.pop()
    return Leadership(leader_id, epoch) if leader_id == leaders[0] else None


class Cluster:
    def __init__(
        self,
        root: Path,
        *,
        size: int = 3,
        raft: RaftConfig | None = None,
        log: LogConfig | None = None,
        journal: JournalConfig | None = None,
        initial_cluster: bool = False,
    ) -> None:
        """``initial_cluster``: format like ``raftka storage format --initial-cluster``, so
        voters may vote before they have heard every peer."""
        self.cluster_id = new_cluster_id()
        self._initial_cluster = initial_cluster
        self.history = AppendHistory()
        self.network = ProxyNetwork()
        try:
            self.nodes = self._configure(
                root, size, raft or RaftConfig(), log or LogConfig(), journal or JournalConfig()
            )
        except BaseException:
            self.network.close()  # nothing else is running yet
            raise
        self.clients = {node_id: NodeClient(node.address) for node_id, node in self.nodes.items()}

    def _configure(
        self, root: Path, size: int, raft: RaftConfig, log: LogConfig, journal: JournalConfig
    ) -> dict[int, NodeProcess]:
        """Write every node's config and format its storage; start the proxy links."""
        ids = range(1, size + 1)
        ports = dict(zip(ids, free_ports(size), strict=True))
        link_ports = {
            (src, dst): self.network.add_link(src, dst, ports[dst])
            for src in ids
            for dst in ids
            if src != dst
        }
        nodes: dict[int, NodeProcess] = {}
        for node_id in ids:
            home = root / f"node-{node_id}"
            home.mkdir(parents=True)
            node = NodeProcess(
                node_id, ports[node_id], home / "server.toml", home / "data", home / "server.log"
            )
            voters = tuple(
                Voter(peer, LOOPBACK, node.port if peer == node_id else link_ports[(node_id, peer)])
                for peer in ids
            )
            config = NodeConfig(
                node_id=node_id,
                data_dir=node.data_dir,
                voters=voters,
                listener=node.address,
                raft=raft,
                log=log,
                journal=journal,
            )
            node.config_path.write_text(render_toml(config), encoding="utf-8")
            format_storage(node.data_dir, self.cluster_id, node_id, initial_cluster=self._initial_cluster)
            nodes[node_id] = node
        return nodes

    @property
    def node_ids(self) -> list[int]:
        return list(self.nodes)

    # processes -------------------------------------------------------------------------

    def start(self, *node_ids: int) -> None:
        """Start (or restart) the given nodes, or every node if none is given."""
        for node_id in node_ids or self.node_ids:
            self.nodes[node_id].start()

    def kill(self, *node_ids: int) -> None:
        """SIGKILL the given nodes, as close together as possible, and reap them."""
        for node_id in node_ids:
            if self.nodes[node_id].running:
                self.nodes[node_id].send_signal(signal.SIGKILL)
        for node_id in node_ids:
            self.nodes[node_id].wait_exit()

    def reformat(self, node_id: int, cluster_id: str) -> None:
        """Give a stopped node fresh storage formatted for ``cluster_id``: a replaced disk."""
        node = self.nodes[node_id]
        assert not node.running, f"node {node_id} must be stopped first"
        shutil.rmtree(node.data_dir)
        format_storage(node.data_dir, cluster_id, node_id)

    def send_signal(self, node_id: int, sig: signal.Signals) -> None:
        self.nodes[node_id].send_signal(sig)

    def close(self) -> None:
        """Kill every process (a SIGSTOPped one too), then the clients and the proxy."""
        for node in self.nodes.values():
            node.kill()
        for client in self.clients.values():
            client.close()
        self.network.close()

    def log_tails(self, lines: int) -> dict[int, str]:
        return {node_id: node.log_tail(lines) for node_id, node in self.nodes.items()}

    # observing -------------------------------------------------------------------------

    def describe(self, node_id: int) -> View | None:
        return self.clients[node_id].describe()

    def views(self, node_ids: Iterable[int]) -> dict[int, View | None]:
        return {node_id: self.describe(node_id) for node_id in node_ids}

    def wait_for_leader(
        self, among: Sequence[int] | None = None, *, above_epoch: int = 0, timeout_s: float = LEADER_TIMEOUT_S
    ) -> Leadership:
        """Wait until the nodes ``among`` (default: all) agree on one leader, in an epoch
        above ``above_epoch``, and exactly one of them claims to be it."""
        node_ids = list(among or self.node_ids)
        last: dict[int, View | None] = {}

        def probe() -> Leadership | None:
            last.update(self.views(node_ids))
            leadership = agreed_leader(last)
            return leadership if leadership is not None and leadership.epoch > above_epoch else None

        what = f"nodes {node_ids} to agree on a leader above epoch {above_epoch}"
        return wait_until(probe, timeout_s=timeout_s, what=what, detail=lambda: _summary(last))

    def wait_following(
        self, node_id: int, leadership: Leadership, timeout_s: float = LEADER_TIMEOUT_S
    ) -> None:
        """Wait until ``node_id`` follows ``leadership``'s leader in that epoch."""
        last: list[View | None] = [None]

        def probe() -> bool:
            last[0] = view = self.describe(node_id)
            return (
                view is not None
                and view.role == "follower"
                and (view.leader_id, view.leader_epoch) == (leadership.leader_id, leadership.epoch)
            )

        what = f"node {node_id} to follow {leadership}"
        wait_until(probe, timeout_s=timeout_s, what=what, detail=lambda: _summary({node_id: last[0]}))

    # the journal -------------------------------------------------------------------------

    def try_append(
        self, node_id: int, entries: Sequence[bytes], timeout_s: float = APPEND_TIMEOUT_S
    ) -> AppendOutcome:
        """One append attempt at ``node_id``, recorded in ``history``; never retried."""
        self.history.attempt(entries)
        outcome = self.clients[node_id].append(entries, timeout_s)
        if outcome.status is AppendStatus.ACKED:
            self.history.ack(entries)
        return outcome

    def append(self, leader: Leadership, entries: Sequence[bytes]) -> None:
        """Append through a leader known to be stable; anything but an ack fails the test."""
        outcome = self.try_append(leader.leader_id, entries)
        assert outcome.status is AppendStatus.ACKED, f"append via {leader} was not acknowledged: {outcome}"

    def journal(self, node_id: int) -> JournalView | None:
        return self.clients[node_id].read_journal()

    def wait_converged(
        self, node_ids: Sequence[int] | None = None, timeout_s: float = CONVERGE_TIMEOUT_S
    ) -> tuple[bytes, ...]:
        """Wait until the nodes hold the same journal with every acknowledged entry, check
        it against ``history``, and return it."""
        node_ids = list(node_ids or self.node_ids)
        last: dict[int, JournalView | None] = {}

        def probe() -> tuple[bytes, ...] | None:
            acked = set(self.history.acked)
            last.update({node_id: self.journal(node_id) for node_id in node_ids})
            entries = {None if view is None else view.entries for view in last.values()}
            journal = entries.pop() if len(entries) == 1 else None
            return journal if journal is not None and acked <= set(journal) else None

        what = f"nodes {node_ids} to hold the same journal with every acknowledged entry"
        journal = wait_until(probe, timeout_s=timeout_s, what=what, detail=lambda: self._diagnose(last))
        for node_id in node_ids:
            self.history.check(journal, node_id)
        return journal

    def _diagnose(self, journals: Mapping[int, JournalView | None]) -> str:
        """How many entries each node holds, and the first safety violation, if any."""
        sizes = {node_id: None if view is None else len(view.entries) for node_id, view in journals.items()}
        problems = []
        for node_id, view in journals.items():
            try:
                if view is not None:
                    self.history.check(view.entries, node_id)
            except AssertionError as e:
                problems.append(str(e))
        return f"entries per node {sizes}, {len(self.history.acked)} acknowledged; " + (
            "; ".join(problems) or "no violation"
        )
