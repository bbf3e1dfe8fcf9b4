"""Scripted interaction tests for RaftCore, after etcd-io/raft's ``testdata/*.txt``.

A script drives real cores by hand and records everything they do. It is a list of
commands, each followed by a ``----`` line and the output the command produced, ended by
a blank line. Lines starting with ``#`` between commands are comments and are kept as
they are; every script opens with a paragraph saying what it proves.

Commands (ids are node ids; ``(1,2)`` is a list of ids):

    add-nodes N voters=(1,2,3) [observers=(4)] [shared-id=(4,5)] [<RaftConfig field>=<int> ...]
                                 fresh cores with ids 1..N, each with a MemoryStorage, a
                                 random.Random seeded from its id, and its own clock at 0;
                                 the observers in shared-id all run with the first one's
                                 id (processes configured alike), yet the script names and
                                 prints each by its own number
    tick ID|all MS               advance the clock(s) by MS, polling at every timer that
                                 falls due on the way, as the driver's timer does
    elapse MS                    time passes with the network working: every 10 ms, all
                                 clocks advance (as tick) and then the cluster stabilizes
    campaign ID                  advance the node's clock to its election deadline and poll
    deliver-msgs [from=ID] [to=ID] [type=NAME] [drop=(IDS)]
                                 deliver the queued messages that match, in the order they
                                 were sent; those addressed to a node in drop are lost
    persist ID                   the node's outstanding write reaches its storage
    stabilize                    persist and deliver everything until nothing is left
    propose ID REC...            the node appends one batch holding the records
    resign ID                    graceful shutdown of a leader (EndQuorumEpoch)
    snapshot ID OFFSET           the node's state machine saves a snapshot at a committed
                                 offset (storage.save_snapshot, then core.snapshot_saved)
    unreachable ID PEER          the node's transport reports that a request to PEER failed
                                 at once (connection refused or reset: PEER's process is gone)
    crash ID / restart ID        power off (its unpersisted write is lost) / start again
                                 from what its storage holds
    wipe ID                      a down node's disk is replaced by an empty one
    partition ID...  / heal      cut each named node off from every other node / reconnect
    status [ID...]               role, epoch, leader, vote, high watermark, log, state
                                 machine and clock of each node
    log ID                       the batches the node's log holds

Output, one line per effect, in the order the cores produce them (each event is
followed by ``poll`` and ``ready``, as the driver does):

    2 state: candidate epoch=1 leader=-1 voted=2      role, epoch, leader or vote changed
    2 write#3: state=(...) truncate=.. install=.. append=(...)   a write handed out
    2 persisted write#3
    1 committed: 1@1:a,b 3@1:NoOp                     committed batches
    3 restore: snapshot=5@1 data='a,b'                the state machine is reset
    1->2 FetchRequest epoch=1 fetch=3@1               a message leaves a core
    dropped 1->2 FetchRequest                         lost to a partition or a down node

Requests are numbered afresh for their receiver and its answer goes back to the node
that asked, as a transport does, so nodes sharing an id each get their own answers.

A position is printed ``offset@epoch``; a batch ``base_offset@epoch:records``. The high
watermark shown by ``status`` is the one the node exposes (a new leader: -1 until its
LeaderChange batch commits).
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from raftka.raft.batch import Batch, BatchKind, OffsetAndEpoch, SnapshotId
from raftka.raft.config import RaftConfig
from raftka.raft.core import NEVER, NotLeaderError, RaftCore
from raftka.raft.effects import QuorumStateData, Ready, Snapshot, Write
from raftka.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    Error,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    Response,
    VoteRequest,
    VoteResponse,
)
from raftka.raft.storage.memory import MemoryStorage

CLUSTER_ID = "interaction"
SEPARATOR = "----"
STABILIZE_ROUNDS_MAX = 50  # bound: a cluster that keeps talking without time passing is livelocked
TIMER_FIRES_MAX = 1000  # bound: timers one tick may fire
ELAPSE_STEP_MS = 10


class ScriptError(Exception):
    """The script itself is wrong (unknown command, bad argument, impossible request)."""


# ======================================================================================
# formatting
# ======================================================================================
def _pos(position: OffsetAndEpoch) -> str:
    return f"{position.offset}@{position.epoch}"


def _ids(ids: tuple[int, ...]) -> str:
    return "(" + ",".join(map(str, ids)) + ")"


def _batch(batch: Batch) -> str:
    if batch.kind is BatchKind.LEADER_CHANGE:
        content = "LeaderChange"
    elif batch.kind is BatchKind.NOOP:
        content = "NoOp"
    else:
        content = ",".join(r.decode(errors="backslashreplace") for r in batch.records)
    return f"{batch.base_offset}@{batch.epoch}:{content}"


def _batches(batches: tuple[Batch, ...] | list[Batch]) -> str:
    return " ".join(map(_batch, batches))


def _state(state: QuorumStateData) -> str:
    return f"(epoch={state.epoch} voted={state.voted_id} leader={state.leader_id})"


def _fields(msg: Message) -> str:
    match msg:
        case VoteRequest():
            return (
                f"epoch={msg.candidate_epoch} pre_vote={str(msg.pre_vote).lower()} "
                f"last={msg.log_end_offset}@{msg.last_epoch}"
            )
        case VoteResponse():
            return (
                f"epoch={msg.epoch} leader={msg.leader_id} "
                f"granted={str(msg.vote_granted).lower()} pre_vote={str(msg.pre_vote).lower()}"
            )
        case BeginQuorumEpochRequest() | BeginQuorumEpochResponse() | EndQuorumEpochResponse():
            return f"epoch={msg.epoch} leader={msg.leader_id}"
        case EndQuorumEpochRequest():
            return f"epoch={msg.epoch} leader={msg.leader_id} successors={_ids(msg.preferred_successors)}"
        case FetchRequest():
            return f"epoch={msg.epoch} fetch={msg.fetch_offset}@{msg.last_fetched_epoch}"
        case FetchResponse():
            text = f"epoch={msg.epoch} leader={msg.leader_id} hw={msg.high_watermark} start={msg.log_start_offset}"
            if msg.diverging is not None:
                text += f" diverging={_pos(msg.diverging)}"
            if msg.snapshot_id is not None:
                text += f" snapshot={_pos(msg.snapshot_id)}"
            if msg.batches:
                text += f" batches=({_batches(msg.batches)})"
            return text
        case FetchSnapshotRequest():
            return (
                f"epoch={msg.epoch} snapshot={_pos(msg.snapshot_id)} pos={msg.position} max={msg.max_bytes}"
            )
        case FetchSnapshotResponse():
            return (
                f"epoch={msg.epoch} leader={msg.leader_id} snapshot={_pos(msg.snapshot_id)} "
                f"size={msg.size} pos={msg.position} chunk={msg.chunk.decode()!r}"
            )
    raise AssertionError(f"unknown message {msg!r}")


def _envelope(sent: InFlight) -> str:
    msg = sent.envelope.msg
    error = getattr(msg, "error", Error.NONE)
    head = f"{sent.sender.name}->{sent.receiver.name} {type(msg).__name__}"
    if error is not Error.NONE:
        head += f" error={error.name}"
    return f"{head} {_fields(msg)}"


# ======================================================================================
# the cluster
# ======================================================================================
@dataclass(slots=True)
class StateMachine:
    """The layer above: the data records applied so far, and where each batch ended."""

    records: list[str] = field(default_factory=list)
    boundaries: dict[int, tuple[int, int]] = field(default_factory=dict)  # next offset -> (epoch, records)

    def reset(self, snapshot: Snapshot | None) -> None:
        self.records = snapshot.data.decode().split(",") if snapshot and snapshot.data else []
        offset, epoch = (snapshot.id.offset, snapshot.id.epoch) if snapshot else (0, 0)
        self.boundaries = {offset: (epoch, len(self.records))}

    def apply(self, batch: Batch) -> None:
        if batch.kind is BatchKind.DATA:
            self.records.extend(r.decode() for r in batch.records)
        self.boundaries[batch.next_offset] = (batch.epoch, len(self.records))

    def snapshot_at(self, offset: int) -> Snapshot:
        if offset not in self.boundaries:
            raise ScriptError(f"{offset} is not the end of a committed batch: {sorted(self.boundaries)}")
        epoch, count = self.boundaries[offset]
        return Snapshot(SnapshotId(offset, epoch), ",".join(self.records[:count]).encode())


@dataclass(slots=True)
class Node:
    name: int  # how the script calls it: its node id, unless it shares one (shared-id)
    node_id: int
    storage: MemoryStorage = field(default_factory=MemoryStorage)
    sm: StateMachine = field(default_factory=StateMachine)
    core: RaftCore | None = None
    now_ms: int = 0
    due_ms: int = NEVER  # when the core next needs a poll
    write: Write | None = None  # handed out, not yet persisted
    incarnation: int = 0
    seen: tuple[str, int, int, int] | None = None

    def running(self) -> RaftCore:
        if self.core is None:
            raise ScriptError(f"node {self.name} is down")
        return self.core


@dataclass(frozen=True, slots=True)
class InFlight:
    """A message on the network, with the node that sent it and the one it will reach."""

    sender: Node
    receiver: Node
    envelope: Envelope  # rpc_id: the receiver's number for a request, the sender's for a response


class Interaction:
    """Runs one script's commands against a fresh set of cores."""

    def __init__(self) -> None:
        self.nodes: dict[int, Node] = {}
        self.voters: frozenset[int] = frozenset()
        self.config = RaftConfig()
        self.queue: list[InFlight] = []
        self.calls: dict[int, tuple[Node, int]] = {}  # request number -> (requester, its rpc_id)
        self._call_numbers = itertools.count(1)
        self.isolated: set[int] = set()
        self.out: list[str] = []

    def run(self, line: str) -> str:
        name, *args = line.split()
        handler = self._COMMANDS.get(name)
        if handler is None:
            raise ScriptError(f"unknown command {name!r}")
        self.out = []
        handler(self, args)
        return "\n".join(self.out) if self.out else "ok"

    # commands ------------------------------------------------------------------------
    def _add_nodes(self, args: list[str]) -> None:
        if self.nodes:
            raise ScriptError("add-nodes runs once per script")
        count, options = _positional(args[:1], 1)[0], _options(args[1:])
        voters = _id_list(options.pop("voters", ""))
        observers = _id_list(options.pop("observers", "()"))
        shared = _id_list(options.pop("shared-id", "()"))
        ids = set(range(1, int(count) + 1))
        if set(voters) | set(observers) != ids or set(voters) & set(observers):
            raise ScriptError(f"voters and observers must split the ids {sorted(ids)}")
        if not set(shared) <= set(observers):
            raise ScriptError("only observers may share an id: requests to a voter must find one node")
        fields = {f.name for f in dataclasses.fields(RaftConfig)}
        if unknown := set(options) - fields:
            raise ScriptError(f"unknown options {sorted(unknown)}")
        self.config = RaftConfig(**{k: int(v) for k, v in options.items()})
        self.config.validate()
        self.voters = frozenset(voters)
        for name in sorted(ids):
            self.nodes[name] = Node(name, shared[0] if name in shared else name)
        for node in self.nodes.values():
            self._start(node)

    def _tick(self, args: list[str]) -> None:
        target, ms = _positional(args, 2)
        nodes = list(self.nodes.values()) if target == "all" else [self._node(target)]
        for node in nodes:
            self._advance_to(node, node.now_ms + int(ms))

    def _elapse(self, args: list[str]) -> None:
        remaining = int(_positional(args, 1)[0])
        while remaining > 0:
            step = min(ELAPSE_STEP_MS, remaining)
            remaining -= step
            for node in self.nodes.values():
                self._advance_to(node, node.now_ms + step)
            self._stabilize([])

    def _campaign(self, args: list[str]) -> None:
        node = self._node(_positional(args, 1)[0])
        # Firing exactly the election timer, as etcd's ``campaign`` calls Campaign().
        deadline = node.running().election_deadline_ms
        if deadline >= NEVER:
            raise ScriptError(f"node {node.name} has no election timer armed")
        self._advance_to(node, max(deadline, node.now_ms))

    def _deliver_msgs(self, args: list[str]) -> None:
        options = _options(args)
        src = int(options.pop("from", "-1"))
        dst = int(options.pop("to", "-1"))
        kind = options.pop("type", "")
        drop = set(_id_list(options.pop("drop", "()")))
        if options:
            raise ScriptError(f"unknown options {sorted(options)}")

        def selected(sent: InFlight) -> bool:
            kind_ok = kind in ("", type(sent.envelope.msg).__name__)
            return src in (-1, sent.sender.name) and dst in (-1, sent.receiver.name) and kind_ok

        self._deliver(selected, drop)

    def _persist(self, args: list[str]) -> None:
        node = self._node(_positional(args, 1)[0])
        if node.write is None:
            raise ScriptError(f"node {node.name} has no outstanding write")
        self._complete_write(node)

    def _stabilize(self, args: list[str]) -> None:
        _positional(args, 0)
        for _ in range(STABILIZE_ROUNDS_MAX):
            writing = [n for n in self.nodes.values() if n.write is not None]
            if not writing and not self.queue:
                return
            for node in writing:
                self._complete_write(node)
            self._deliver(lambda _: True, set())
        raise ScriptError(f"still busy after {STABILIZE_ROUNDS_MAX} rounds")

    def _propose(self, args: list[str]) -> None:
        if len(args) < 2:
            raise ScriptError("propose ID RECORD...")
        node = self._node(args[0])
        try:
            position = node.running().propose([r.encode() for r in args[1:]], node.now_ms)
        except NotLeaderError as exc:
            self.out.append(f"{node.name} error: {exc}")
            return
        self.out.append(f"{node.name} proposed at {_pos(position)}")
        self._flush(node)

    def _resign(self, args: list[str]) -> None:
        node = self._node(_positional(args, 1)[0])
        node.running().resign(node.now_ms)
        self._flush(node)

    def _snapshot(self, args: list[str]) -> None:
        name, offset = _positional(args, 2)
        node = self._node(name)
        core = node.running()
        snapshot = node.sm.snapshot_at(int(offset))
        node.storage.save_snapshot(snapshot)
        core.snapshot_saved(snapshot)
        self.out.append(
            f"{node.name} snapshot saved: {_pos(snapshot.id)} data={snapshot.data.decode()!r} "
            f"log=[{core.log_start_offset},{core.log_end_offset})"
        )

    def _unreachable(self, args: list[str]) -> None:
        name, peer = _positional(args, 2)
        node = self._node(name)
        node.running().unreachable(self._node(peer).node_id, node.now_ms)
        self._flush(node)

    def _crash(self, args: list[str]) -> None:
        node = self._node(_positional(args, 1)[0])
        if node.core is None:
            raise ScriptError(f"node {node.name} is already down")
        lost = f" (write#{node.write.write_id} lost)" if node.write else ""
        node.core, node.write, node.due_ms, node.seen = None, None, NEVER, None
        self.out.append(f"{node.name} crashed{lost}")

    def _restart(self, args: list[str]) -> None:
        node = self._node(_positional(args, 1)[0])
        if node.core is not None:
            raise ScriptError(f"node {node.name} is running")
        self._start(node)

    def _wipe(self, args: list[str]) -> None:
        node = self._node(_positional(args, 1)[0])
        if node.core is not None:
            raise ScriptError(f"node {node.name} must be down to lose its disk")
        node.storage.wipe()
        self.out.append(f"{node.name} disk wiped")

    def _partition(self, args: list[str]) -> None:
        self.isolated = {self._node(a).name for a in args}
        if not self.isolated:
            raise ScriptError("partition ID...")

    def _heal(self, args: list[str]) -> None:
        _positional(args, 0)
        self.isolated = set()

    def _status(self, args: list[str]) -> None:
        nodes = [self._node(a) for a in args] or list(self.nodes.values())
        for node in nodes:
            if node.core is None:
                self.out.append(f"{node.name} down")
                continue
            core = node.core
            self.out.append(
                f"{node.name} {_role(core)} epoch={core.epoch} leader={core.leader_id} "
                f"voted={core.voted_id} hw={core.exposed_high_watermark()} "
                f"log=[{core.log_start_offset},{core.log_end_offset}) "
                f"sm=[{','.join(node.sm.records)}] t={node.now_ms}"
            )

    def _log(self, args: list[str]) -> None:
        node = self._node(_positional(args, 1)[0])
        log = node.running().log
        snapshot = f"snapshot={_pos(log.snapshot.id)} " if log.snapshot else ""
        batches = log.batches_between(log.start_offset, log.end_offset)
        self.out.append(f"{node.name} log: {snapshot}{_batches(batches) or '(empty)'}")

    _COMMANDS = {
        "add-nodes": _add_nodes,
        "tick": _tick,
        "elapse": _elapse,
        "campaign": _campaign,
        "deliver-msgs": _deliver_msgs,
        "persist": _persist,
        "stabilize": _stabilize,
        "propose": _propose,
        "resign": _resign,
        "snapshot": _snapshot,
        "unreachable": _unreachable,
        "crash": _crash,
        "restart": _restart,
        "wipe": _wipe,
        "partition": _partition,
        "heal": _heal,
        "status": _status,
        "log": _log,
    }

    # driving the cores ----------------------------------------------------------------
    def _node(self, name: str) -> Node:
        try:
            return self.nodes[int(name)]
        except (ValueError, KeyError):
            raise ScriptError(f"no node {name!r}") from None

    def _start(self, node: Node) -> None:
        node.incarnation += 1
        loaded = node.storage.load()
        node.sm.reset(None)
        rng = random.Random(node.name * 1000 + node.incarnation)
        node.core = RaftCore(node.node_id, self.voters, CLUSTER_ID, self.config, loaded, rng, node.now_ms)
        self._flush(node)

    def _advance_to(self, node: Node, target_ms: int) -> None:
        """Move the node's clock to ``target_ms``, firing each timer that falls due on the way."""
        for _ in range(TIMER_FIRES_MAX):
            if node.core is None or node.due_ms > target_ms:
                break
            node.now_ms = max(node.now_ms, node.due_ms)
            self._flush(node)
        else:
            raise ScriptError(f"node {node.name}: more than {TIMER_FIRES_MAX} timers in one tick")
        node.now_ms = target_ms
        if node.core is not None:
            self._flush(node)

    def _deliver(self, selected: Callable[[InFlight], bool], drop: set[int]) -> None:
        batch = [s for s in self.queue if selected(s)]
        self.queue = [s for s in self.queue if not selected(s)]
        for sent in batch:
            node = sent.receiver
            cut = sent.sender.name in self.isolated or node.name in self.isolated
            if node.name in drop or cut or node.core is None:
                self.out.append(f"dropped {sent.sender.name}->{node.name} {type(sent.envelope.msg).__name__}")
                continue
            node.core.step(sent.envelope, node.now_ms)
            self._flush(node)

    def _route(self, sender: Node, env: Envelope) -> InFlight:
        """Address a message as a transport does: a request to the node running its
        destination id, under a fresh number; a response to the node that asked."""
        if isinstance(env.msg, Response):
            requester, rpc_id = self.calls.pop(env.rpc_id)
            return InFlight(sender, requester, dataclasses.replace(env, rpc_id=rpc_id))
        receivers = [n for n in self.nodes.values() if n.node_id == env.dst]
        if len(receivers) != 1:
            raise ScriptError(f"a request to id {env.dst} must reach one node, not {len(receivers)}")
        number = next(self._call_numbers)
        self.calls[number] = (sender, env.rpc_id)
        return InFlight(sender, receivers[0], dataclasses.replace(env, rpc_id=number))

    def _complete_write(self, node: Node) -> None:
        write, core = node.write, node.running()
        assert write is not None
        node.storage.write(write)
        node.write = None
        core.persisted(write.write_id, node.now_ms)
        self.out.append(f"{node.name} persisted write#{write.write_id}")
        self._flush(node)

    def _flush(self, node: Node) -> None:
        """What the driver does after every event: poll, then act on ``ready``."""
        core = node.running()
        node.due_ms = node.now_ms + core.poll(node.now_ms)
        ready = core.ready()
        self._report_state(node, core)
        self._apply(node, ready)
        if core.fatal_error is not None:
            self.out.append(f"{node.name} fatal: {core.fatal_error}")

    def _report_state(self, node: Node, core: RaftCore) -> None:
        seen = (_role(core), core.epoch, core.leader_id, core.voted_id)
        if seen != node.seen:
            node.seen = seen
            self.out.append(f"{node.name} state: {seen[0]} epoch={seen[1]} leader={seen[2]} voted={seen[3]}")

    def _apply(self, node: Node, ready: Ready) -> None:
        prefix = str(node.name)
        if ready.restore is not None:
            node.sm.reset(ready.restore)
            data = ready.restore.data.decode()
            self.out.append(f"{prefix} restore: snapshot={_pos(ready.restore.id)} data={data!r}")
        if ready.committed:
            for batch in ready.committed:
                node.sm.apply(batch)
            self.out.append(f"{prefix} committed: {_batches(ready.committed)}")
        if ready.write is not None:
            assert node.write is None, "the core handed out a second write before the first persisted"
            node.write = ready.write
            self.out.append(f"{prefix} write#{ready.write.write_id}: {_write(ready.write)}")
        for env in ready.send:
            sent = self._route(node, env)
            self.out.append(_envelope(sent))
            self.queue.append(sent)


def _write(write: Write) -> str:
    parts = []
    if write.install_snapshot is not None:
        parts.append(f"install={_pos(write.install_snapshot.id)}")
    if write.truncate_to is not None:
        parts.append(f"truncate={write.truncate_to}")
    if write.append:
        parts.append(f"append=({_batches(write.append)})")
    if write.quorum_state is not None:
        parts.append(f"state={_state(write.quorum_state)}")
    return " ".join(parts)


def _role(core: RaftCore) -> str:
    return core.role.value if core.is_voter else f"observer/{core.role.value}"


# ======================================================================================
# arguments
# ======================================================================================
def _positional(args: list[str], count: int) -> list[str]:
    if len(args) != count or any("=" in a for a in args):
        raise ScriptError(f"expected {count} positional arguments, got {args}")
    return args


def _options(args: list[str]) -> dict[str, str]:
    options = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep:
            raise ScriptError(f"expected key=value, got {arg!r}")
        options[key] = value
    return options


def _id_list(text: str) -> tuple[int, ...]:
    if not (text.startswith("(") and text.endswith(")")):
        raise ScriptError(f"expected a list like (1,2,3), got {text!r}")
    inner = text[1:-1]
    return tuple(int(i) for i in inner.split(",")) if inner else ()


# ======================================================================================
# scripts
# ======================================================================================
def run_script(text: str, interaction: Interaction | None = None) -> str:
    """Run every command in ``text``; return the script with the outputs they produced.

    Pass ``interaction`` to inspect the cores afterwards.
    """
    interaction = interaction or Interaction()
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        i += 1
        if not line.strip() or line.startswith("#"):
            out.append(line)
            continue
        if i >= len(lines) or lines[i] != SEPARATOR:
            raise ScriptError(f"line {number}: {line!r} must be followed by {SEPARATOR!r}")
        while i < len(lines) and lines[i].strip():
            i += 1  # the expected output: replaced by what the command prints now
        i += 1  # the blank line that ends it
        try:
            output = interaction.run(line)
        except ScriptError as exc:
            raise ScriptError(f"line {number}: {line!r}: {exc}") from None
        out += [line, SEPARATOR, output, ""]
    return "\n".join(out).rstrip("\n") + "\n"
