"""``raftka chaos kill-broker``: kill or pause partition leaders under an acks=all load,
then prove nothing acknowledged was lost.

A producer (acks=all) writes numbered records to a fresh topic (RF 3,
``min.insync.replicas`` 2) for the whole run. A round: wait until every partition has a
leader and a full ISR, signal the broker leading the most partitions, time until every
partition has a leader again, bring the broker back (restart after KILL, SIGCONT after
STOP) and time until it is in every ISR again. At the end the producer flushes, a
consumer reads every partition from the beginning to its high watermark, and the audit
compares what was read with what was acknowledged: ``lost`` (acknowledged, never read),
``duplicated`` (a number read twice: a retry of a batch whose acknowledgement was lost,
written again), ``out_of_order`` (a partition whose acknowledged numbers, first copies
only, go down) and ``unknown`` (a record never sent). Lost, out-of-order or unknown
records fail it, and so do duplicates: the producer is idempotent, so a retried batch is
answered with the offsets it was first written at. With ``--no-idempotence`` duplicates
are reported, not failed (at least once, as Kafka's producer with
``enable.idempotence=false``).

``raftka chaos power-cut-broker`` runs the same rounds with a power cut instead of a
signal: the victim is SIGKILLed and, before it restarts, each of its partition logs loses
everything past its checkpointed recovery point (``power_cut``), as the page cache would
be lost with the power. acks=all must hold through it: what a broker had not fsynced,
the other replicas of the ISR still have.

With ``--group-consumers N``, N consumers in one group read the topic while it happens
(their coordinator may be the broker that dies); at the end every acknowledged record
must have been processed by some member (``group_missed`` 0: at least once) and the group
must have converged (Stable, every partition owned by exactly one member).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.consumer import Consumer
from raftka.client.errors import KafkaError
from raftka.client.group_admin import GroupAdmin
from raftka.client.producer import Producer
from raftka.client.types import GroupDescription, NewTopic, PartitionInfo, RecordMetadata, TopicPartition
from raftka.command import local, output
from raftka.command.data_args import add_idempotence_option, idempotence
from raftka.command.errors import CliError
from raftka.command.quorum_client import QuorumClient
from raftka.command.tls_args import add_tls_options, client_tls
from raftka.security.tls import TlsFiles
from raftka.tools.chaos.chaos import SIGNALS, LocalTarget
from raftka.tools.chaos.power_cut import Cut, cut_unflushed_tails

POLL_INTERVAL_S = 0.01
PARTITIONS = 6
_NUMBER = struct.Struct(">q")


def register(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    kill = actions.add_parser(
        "kill-broker", help="signal the busiest partition leader under acks=all load; audit what survived"
    )
    kill.add_argument("--rounds", type=int, default=1, help="how many brokers to kill (default 1)")
    kill.add_argument(
        "--signal", choices=sorted(SIGNALS), default="KILL", help="KILL (crash) or STOP (pause)"
    )
    add_load_options(kill)
    kill.set_defaults(func=run_kill_broker, power_cut=False)
    cut = actions.add_parser(
        "power-cut-broker",
        help="power-cut the busiest partition leader under acks=all load (SIGKILL, its logs lose "
        "everything past their recovery points, restart); audit what survived",
    )
    cut.add_argument("--rounds", type=int, default=1, help="how many power cuts (default 1)")
    add_load_options(cut)
    cut.set_defaults(func=run_kill_broker, power_cut=True, signal="KILL")


def add_load_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=int, default=2_000, help="records per second the producer offers")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="bound on each wait in a round")
    parser.add_argument(
        "--group-consumers", type=int, default=0, metavar="N", help="N consumers of one group read along"
    )
    parser.add_argument("--dir", type=Path, help="cluster directory (default: .raftka/local)")
    add_idempotence_option(parser)
    output.add_output_option(parser)
    add_tls_options(parser)


class NumberedLoad:
    """A producer thread sending 0, 1, 2, ... and remembering where each acknowledged one went."""

    def __init__(self, producer: Producer, topic: str, rate: int) -> None:
        self._producer = producer
        self._topic = topic
        self._rate = rate
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.sent = 0
        self.acknowledged: dict[int, tuple[int, int]] = {}  # number -> (partition, offset)
        self.failures = 0
        self.first_failure = ""
        self._thread = threading.Thread(target=self._run, name="chaos-load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            ahead_s = self.sent / self._rate - (time.monotonic() - start)
            if ahead_s > 0:
                time.sleep(min(ahead_s, 0.05))
                continue
            number = self.sent
            future = self._producer.send(self._topic, _NUMBER.pack(number))
            future.add_done_callback(lambda f, n=number: self._done(n, f))
            self.sent += 1

    def _done(self, number: int, future: Future[RecordMetadata]) -> None:
        with self._lock:
            error = future.exception()
            if error is None:
                metadata = future.result()
                self.acknowledged[number] = (metadata.partition, metadata.offset)
            else:
                self.failures += 1
                self.first_failure = self.first_failure or str(error)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._producer.flush()


class GroupReaders:
    """Consumers of one group, each polling on its own thread, recording the numbers read."""

    def __init__(self, addresses: list[str], topic: str, count: int, tls: TlsFiles | None = None) -> None:
        self.group = f"{topic}-readers"
        self._tls = tls
        self.processed: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._consumers = [
            Consumer(
                addresses,
                group_id=self.group,
                client_id=f"chaos-reader-{i}",
                auto_offset_reset="earliest",
                session_timeout_ms=6_000,
                heartbeat_interval_ms=500,
                request_timeout_ms=5_000,
                tls=tls,
            )
            for i in range(count)
        ]
        for consumer in self._consumers:
            consumer.subscribe([topic])
        self._threads = [
            threading.Thread(target=self._read, args=(c,), name=f"chaos-reader-{i}", daemon=True)
            for i, c in enumerate(self._consumers)
        ]
        for thread in self._threads:
            thread.start()

    def _read(self, consumer: Consumer) -> None:
        while not self._stop.is_set():
            try:
                records = consumer.poll(200, 5_000)
            except KafkaError:  # a commit or a join refused mid-failover: the next poll goes on
                continue
            numbers = [
                _NUMBER.unpack(r.value)[0]
                for r in records
                if r.value is not None and len(r.value) == _NUMBER.size
            ]
            with self._lock:
                self.processed.update(numbers)

    def missing(self, wanted: Iterable[int], timeout_s: float) -> int:
        """How many of ``wanted`` no member processed, after waiting up to ``timeout_s``."""
        wanted = set(wanted)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if wanted <= self.processed:
                    return 0
            time.sleep(0.1)
        with self._lock:
            return len(wanted - self.processed)

    def converged(self, addresses: list[str], partitions: int, timeout_s: float) -> bool:
        """Stable, and every partition owned by exactly one member."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            description = asyncio.run(_describe(addresses, self.group, self._tls))
            owned = [tp.partition for m in description.members for tp in m.assignment]
            if description.state == "Stable" and sorted(owned) == list(range(partitions)):
                return True
            time.sleep(0.5)
        return False

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        for consumer in self._consumers:
            consumer.close()


async def _describe(addresses: list[str], group: str, tls: TlsFiles | None) -> GroupDescription:
    admin = GroupAdmin(addresses, tls=tls)
    try:
        return await admin.describe_group(group)
    finally:
        await admin.close()


def audit(
    acknowledged: dict[int, tuple[int, int]], read: Iterable[tuple[int, int, bytes | None]], sent: int
) -> dict[str, int]:
    """Compare the records read, (partition, offset, value), with what was acknowledged."""
    seen: dict[int, int] = {}
    by_partition: dict[int, list[tuple[int, int]]] = {}
    unknown = 0
    for partition, offset, value in read:
        number = _NUMBER.unpack(value)[0] if value is not None and len(value) == _NUMBER.size else -1
        if not 0 <= number < sent:
            unknown += 1
            continue
        seen[number] = seen.get(number, 0) + 1
        if (
            number in acknowledged and seen[number] == 1
        ):  # a retried batch's copy is a duplicate, not disorder
            by_partition.setdefault(partition, []).append((offset, number))
    out_of_order = 0
    for records in by_partition.values():
        records.sort()
        out_of_order += sum(1 for a, b in zip(records, records[1:], strict=False) if b[1] < a[1])
    return {
        "sent": sent,
        "acknowledged": len(acknowledged),
        "read": sum(seen.values()) + unknown,
        "lost": sum(1 for number in acknowledged if number not in seen),
        "duplicated": sum(count - 1 for count in seen.values() if count > 1),
        "out_of_order": out_of_order,
        "unknown": unknown,
        "unacknowledged_read": sum(1 for number in seen if number not in acknowledged),
    }


# A round under load: (admin, target, topic, round number) -> what the round measured.
PlayRound = Callable[[Admin, LocalTarget, str, int], dict[str, Any]]


def run_kill_broker(args: argparse.Namespace) -> int:
    sig = SIGNALS[args.signal]
    return run_under_load(
        args,
        lambda admin, target, topic, number: _round(
            admin, target, topic, number, sig, args.timeout_s, args.power_cut
        ),
        format_round,
        lambda rounds: {
            "failover_median_ms": round(statistics.median(r["failover_ms"] for r in rounds), 1),
            "failover_max_ms": max(r["failover_ms"] for r in rounds),
            "rejoin_median_ms": round(statistics.median(r["rejoin_ms"] for r in rounds), 1),
        },
    )


def run_under_load(
    args: argparse.Namespace,
    play: PlayRound,
    format_one: Callable[[dict[str, Any]], str],
    summarize_rounds: Callable[[list[dict[str, Any]]], dict[str, Any]],
) -> int:
    """Create the topic, start the acks=all load (and the group), ``play`` the rounds, then
    read everything back and audit it; the exit status of ``exit_status``."""
    if args.rounds < 1:
        raise CliError(f"--rounds: expected 1 or more, got {args.rounds}")
    if args.rate < 1:
        raise CliError(f"--rate: expected 1 or more, got {args.rate}")
    if not 0 <= args.group_consumers <= PARTITIONS:
        raise CliError(f"--group-consumers: expected 0 to {PARTITIONS}, got {args.group_consumers}")
    cluster = local.load(local.resolve_dir(args.dir))
    brokers = [n.id for n in cluster.brokers()]
    if len(brokers) < 3:
        raise CliError(f"{args.action} needs at least 3 brokers (RF 3, min.insync.replicas 2)")
    topic = f"chaos-{uuid.uuid4().hex[:8]}"
    json_out = args.output == "json"
    tls = client_tls(args)
    with Admin(cluster.addresses(), RetryPolicy(total_timeout_s=args.timeout_s), tls) as admin:
        result = admin.create_topics([NewTopic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})])[0]
        result.check()
        producer = Producer(
            cluster.broker_addresses(),
            acks=-1,
            linger_ms=5,
            delivery_timeout_ms=120_000,
            enable_idempotence=idempotence(args),
            tls=tls,
        )
        load = NumberedLoad(producer, topic, args.rate)
        readers = (
            GroupReaders(cluster.broker_addresses(), topic, args.group_consumers, tls)
            if args.group_consumers
            else None
        )
        rounds = []
        try:
            with QuorumClient(call_timeout_s=0.5, tls=tls) as client:
                target = LocalTarget(cluster, client)
                for number in range(1, args.rounds + 1):
                    outcome = play(admin, target, topic, number)
                    rounds.append(outcome)
                    if not json_out:
                        print(format_one(outcome), flush=True)
        finally:
            load.stop()
            producer.close()
        report: dict[str, Any] = audit(
            load.acknowledged, read_everything(cluster.broker_addresses(), topic, tls), load.sent
        )
        if readers is not None:
            try:
                report["group_missed"] = readers.missing(load.acknowledged, args.timeout_s)
                report["group_converged"] = readers.converged(
                    cluster.broker_addresses(), PARTITIONS, args.timeout_s
                )
            finally:
                readers.close()
    report["send_failures"] = load.failures
    report["first_send_failure"] = load.first_failure or None
    summary = {"topic": topic, "idempotent": not args.no_idempotence, **report, **summarize_rounds(rounds)}
    if json_out:
        print(output.to_json({"rounds": rounds, "summary": summary}))
    else:
        print(output.fields([(k.replace("_", " "), v) for k, v in summary.items()]))
    group_ok = readers is None or (report["group_missed"] == 0 and report["group_converged"])
    return exit_status(report, idempotent=not args.no_idempotence, group_ok=group_ok)


def exit_status(report: dict[str, int], *, idempotent: bool, group_ok: bool = True) -> int:
    """1 for anything lost, out of order or unknown, for duplicates from an idempotent
    producer, and for a group that missed records or did not converge; an at-least-once
    producer's duplicates are only reported."""
    failed = report["lost"] or report["out_of_order"] or report["unknown"] or not group_ok
    return 1 if failed or (report["duplicated"] and idempotent) else 0


def _round(
    admin: Admin,
    target: LocalTarget,
    topic: str,
    number: int,
    sig: signal.Signals,
    timeout_s: float,
    power_cut: bool = False,
) -> dict[str, Any]:
    """``power_cut``: once the SIGKILLed victim is gone, and before its restart, its logs
    lose everything past their recovery points (``power_cut.cut_unflushed_tails``)."""

    def wait(what: str, done: Callable[[list[PartitionInfo]], bool]) -> float:
        return wait_for_partitions(admin, topic, f"round {number}: {what}", done, timeout_s)

    victim, led = busiest_healthy_leader(admin, topic, number, timeout_s)
    target.send_signal(victim, sig)
    cuts: list[Cut] = []
    try:
        failover_s = wait(
            f"not every partition had a leader other than broker {victim}",
            lambda ps: all(p.leader not in (-1, victim) for p in ps),
        )
        if power_cut:
            cuts = _cut_power(target, victim, timeout_s)
    finally:
        if sig is signal.SIGSTOP:
            target.send_signal(victim, signal.SIGCONT)
        else:
            target.restart(victim)
    rejoin_s = wait(f"broker {victim} did not rejoin every ISR", lambda ps: all(victim in p.isr for p in ps))
    outcome: dict[str, Any] = {
        "round": number,
        "signal": sig.name,
        "victim": victim,
        "partitions_led": led,
        "failover_ms": round(failover_s * 1000, 1),
        "rejoin_ms": round(rejoin_s * 1000, 1),
    }
    if power_cut:
        outcome["power_cut"] = {
            "logs_cut": len(cuts),
            "bytes_lost": sum(c.bytes for c in cuts),
            "cuts": [{"partition": c.partition, "from_offset": c.offset, "bytes": c.bytes} for c in cuts],
        }
    return outcome


def _cut_power(target: LocalTarget, victim: int, timeout_s: float) -> list[Cut]:
    """Wait until the killed victim has exited (its files closed), then cut its logs."""
    node = target.cluster.node(victim)
    deadline = time.monotonic() + timeout_s
    while local.is_alive(node):
        if time.monotonic() > deadline:
            raise CliError(f"broker {victim} (pid {node.pid}) is still running after SIGKILL")
        time.sleep(POLL_INTERVAL_S)
    return cut_unflushed_tails(Path(node.data_dir))


def format_round(r: dict[str, Any]) -> str:
    fault = (
        f"power cut of broker {r['victim']}"
        if "power_cut" in r
        else f"SIG{r['signal'].removeprefix('SIG')} broker {r['victim']}"
    )
    line = (
        f"round {r['round']}: {fault} "
        f"(leading {r['partitions_led']} partitions) -> every partition led again after {r['failover_ms']} ms; "
        f"back in every ISR after {r['rejoin_ms']} ms"
    )
    if "power_cut" in r:
        cut = r["power_cut"]
        line += f"; {cut['bytes_lost']} unflushed bytes lost from {cut['logs_cut']} log(s)"
    return line


def wait_for_partitions(
    admin: Admin, topic: str, what: str, done: Callable[[list[PartitionInfo]], bool], timeout_s: float
) -> float:
    """Seconds until ``done`` holds for the topic's partitions; CliError ``what`` after ``timeout_s``."""
    start = time.monotonic()
    while True:
        partitions = _partitions(admin, topic)
        if partitions and done(partitions):
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise CliError(f"{what} within {timeout_s:g} s; see the broker logs")
        time.sleep(POLL_INTERVAL_S)


def busiest_healthy_leader(admin: Admin, topic: str, number: int, timeout_s: float) -> tuple[int, int]:
    """Once every partition has a leader and a full ISR: the broker leading the most, and how many."""
    wait_for_partitions(
        admin,
        topic,
        f"round {number}: the partitions did not all have a leader and a full ISR",
        healthy,
        timeout_s,
    )
    counts: dict[int, int] = {}
    for p in _partitions(admin, topic):
        counts[p.leader] = counts.get(p.leader, 0) + 1
    victim = max(sorted(counts), key=counts.__getitem__)
    return victim, counts[victim]


def _partitions(admin: Admin, topic: str) -> list[PartitionInfo]:
    description = admin.describe_topics([topic])[0]
    return list(description.partitions) if description.error is None else []


def healthy(partitions: list[PartitionInfo]) -> bool:
    return all(p.leader >= 0 and len(p.isr) == len(p.replicas) for p in partitions)


def read_everything(
    addresses: list[str], topic: str, tls: TlsFiles | None = None
) -> list[tuple[int, int, bytes | None]]:
    """Every record of every partition, from the log start to the high watermark."""
    consumer = Consumer(addresses, auto_offset_reset="earliest", tls=tls)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        read: list[tuple[int, int, bytes | None]] = []
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise CliError("reading the topic back did not reach the high watermarks within 120 s")
            read += [(r.partition, r.offset, r.value) for r in consumer.poll(500, 10_000)]
        return read
    finally:
        consumer.close()
