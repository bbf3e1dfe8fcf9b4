"""Kafka's own clients, each driven the same way for the client matrix: produce keyed
records, read them in a group of two members and commit, then read on with a new member
of the group. Each returns what it saw as ``Seen`` records (partition, offset, key), so
the test compares the clients with one another and with raftka's own tools.

The group's members join first and the records are produced once the group is whole,
so no partition moves while they read (a partition that moves before a commit is read
again, which is at least once but not what these tests measure)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from tests import tools
from tests.integration.polling import wait_until

POLL_MS = 200
PHASE_TIMEOUT_S = 120  # under pytest's 300 s: a stuck group fails with what it waited for


class Seen(NamedTuple):
    partition: int
    offset: int
    key: bytes


@dataclass
class GroupRun:
    """What a group of members read, and what each member was assigned at the end."""

    records: list[Seen] = field(default_factory=list)
    assignments: list[set[int]] = field(default_factory=list)


Keyed = list[tuple[bytes, bytes]]
Check = Callable[[], bool]  # True once the group is whole (every partition owned, by one member)
Produce = Callable[[], None]  # the records the group reads, produced once it is whole


class KafkaPython:
    name = "kafka-python"

    def produce(self, bootstrap: str, topic: str, records: Keyed) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=bootstrap, acks="all", linger_ms=5
        )  # idempotent: its default
        futures = [producer.send(topic, key=k, value=v) for k, v in records]
        producer.flush(30)
        for future in futures:
            future.get(10)
        producer.close()

    def group(
        self, bootstrap: str, topic: str, group: str, count: int, whole: Check, produce: Produce
    ) -> GroupRun:
        members = [self.subscribed(topic, bootstrap, group, i) for i in range(2)]
        run = GroupRun()
        with self.polled(members, run.records) as check:
            _read(run, count, whole, produce, check)
        run.assignments = [{tp.partition for tp in m.assignment()} for m in members]
        for consumer in members:
            consumer.commit()
            consumer.close()
        return run

    def resume(self, bootstrap: str, topic: str, group: str, count: int) -> list[Seen]:
        consumer = self.subscribed(topic, bootstrap, group, 2)
        seen: list[Seen] = []
        while len(seen) < count:
            for batch in consumer.poll(timeout_ms=POLL_MS).values():
                seen.extend(Seen(r.partition, r.offset, r.key) for r in batch)
        consumer.commit()
        consumer.close()
        return seen

    @staticmethod
    @contextlib.contextmanager
    def polled(consumers: list, into: list[Seen]) -> Iterator[Callable[[], None]]:
        """Each consumer polled back to back on a thread of its own, as an application
        polls it, what it reads added to ``into``; yields a check that raises what a poll
        raised. kafka-python 3.0.12 discards a join that completes while its consumer is
        not inside ``poll`` and joins again: members polled in turn by one thread complete
        their joins during each other's polls, and the group rebalanced over and over (131
        generations in one run on a loaded machine)."""
        stop = threading.Event()
        failures: list[BaseException] = []

        def poll(consumer) -> None:  # noqa: ANN001
            try:
                while not stop.is_set():
                    for batch in consumer.poll(timeout_ms=POLL_MS).values():
                        into.extend(Seen(r.partition, r.offset, r.key) for r in batch)
            except BaseException as e:  # raised in the test by check()
                failures.append(e)

        def check() -> None:
            if failures:
                raise failures[0]
            stop.wait(POLL_MS / 1000)

        pollers = [threading.Thread(target=poll, args=(c,), daemon=True) for c in consumers]
        for poller in pollers:
            poller.start()
        try:
            yield check
        finally:
            stop.set()
            for poller in pollers:
                poller.join(30)
        check()

    @classmethod
    def subscribed(cls, topic: str, bootstrap: str, group: str, index: int):  # noqa: ANN206
        """A member subscribed to ``topic`` that has seen its partitions since subscribing.

        kafka-python 3.0.12 takes a subscription's partitions (its metadata snapshot) only
        from metadata that arrives after ``subscribe``. A leader that assigns before then
        keeps an empty snapshot, and the next metadata makes it join once more though
        nothing else asks it to. Its ``poll`` finishes a join only while ``need_rejoin()``,
        which that join's own assignment turns False: if the join's SyncGroup is still
        outstanding when the ``poll`` that sent it returns (raftka records the rebalance
        through the quorum before it answers), no later ``poll`` finishes it. The member
        never applies its assignment, never heartbeats again, and is silent until its
        session ends (Java's client also finishes a join that is pending). ``topics()``
        fetches metadata now, so the snapshot is current before the first join."""
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(**cls._options(bootstrap, group, index))
        consumer.subscribe([topic])
        wait_until(
            lambda: topic in consumer.topics() and consumer.partitions_for_topic(topic),
            timeout_s=PHASE_TIMEOUT_S,
            what=f"kafka-python to learn {topic}'s partitions",
        )
        return consumer

    @staticmethod
    def _options(bootstrap: str, group: str, index: int) -> dict:
        return {
            "bootstrap_servers": bootstrap,
            "group_id": group,
            "client_id": f"kafka-python-{index}",
            "auto_offset_reset": "earliest",
            "enable_auto_commit": False,
            "heartbeat_interval_ms": 500,
        }


class ConfluentKafka:
    name = "confluent-kafka"

    def produce(self, bootstrap: str, topic: str, records: Keyed) -> None:
        from confluent_kafka import Producer

        failures: list[str] = []

        def delivered(error, message) -> None:
            if error is not None:
                failures.append(str(error))

        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "partitioner": "murmur2_random",
                "linger.ms": 5,
            }
        )
        for key, value in records:
            producer.produce(topic, key=key, value=value, on_delivery=delivered)
        assert producer.flush(30) == 0, "records left undelivered"
        assert not failures, failures

    def group(
        self, bootstrap: str, topic: str, group: str, count: int, whole: Check, produce: Produce
    ) -> GroupRun:
        members = [self._consumer(bootstrap, group, i) for i in range(2)]
        for consumer in members:
            consumer.subscribe([topic])
        run = GroupRun()

        def poll() -> None:
            for consumer in members:
                run.records.extend(self._poll(consumer))

        _read(run, count, whole, produce, poll)
        run.assignments = [{tp.partition for tp in m.assignment()} for m in members]
        for consumer in members:
            consumer.commit(asynchronous=False)
            consumer.close()
        return run

    def resume(self, bootstrap: str, topic: str, group: str, count: int) -> list[Seen]:
        consumer = self._consumer(bootstrap, group, 2)
        consumer.subscribe([topic])
        seen: list[Seen] = []
        while len(seen) < count:
            seen.extend(self._poll(consumer))
        consumer.commit(asynchronous=False)
        consumer.close()
        return seen

    @staticmethod
    def _consumer(bootstrap: str, group: str, index: int):
        from confluent_kafka import Consumer

        return Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": f"confluent-{index}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "heartbeat.interval.ms": 500,
            }
        )

    @staticmethod
    def _poll(consumer) -> list[Seen]:
        seen = []
        for message in consumer.consume(num_messages=100, timeout=POLL_MS / 1000):
            if message.error() is None:
                seen.append(Seen(message.partition(), message.offset(), message.key()))
        return seen


class AioKafka:
    name = "aiokafka"

    def produce(self, bootstrap: str, topic: str, records: Keyed) -> None:
        from aiokafka import AIOKafkaProducer

        async def produce() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
            await producer.start()
            try:
                sent = [await producer.send(topic, key=k, value=v) for k, v in records]
                await asyncio.gather(*sent)
            finally:
                await producer.stop()

        asyncio.run(produce())

    def group(
        self, bootstrap: str, topic: str, group: str, count: int, whole: Check, produce: Produce
    ) -> GroupRun:
        async def read() -> GroupRun:
            members = [self._consumer(topic, bootstrap, group, i) for i in range(2)]
            try:
                for consumer in members:
                    await consumer.start()
                run = GroupRun()
                produced = False
                deadline = time.monotonic() + 2 * PHASE_TIMEOUT_S  # both of _read's phases
                while not produced or len(run.records) < count:
                    assert time.monotonic() < deadline, (
                        f"produced: {produced}, {len(run.records)} of {count} read"
                    )
                    for consumer in members:
                        run.records.extend(await self._poll(consumer))
                    if not produced and await asyncio.to_thread(whole):
                        await asyncio.to_thread(produce)
                        produced = True
                run.assignments = [{tp.partition for tp in m.assignment()} for m in members]
                for consumer in members:
                    await consumer.commit()
                return run
            finally:
                await self._stop(members)

        return asyncio.run(read())

    def resume(self, bootstrap: str, topic: str, group: str, count: int) -> list[Seen]:
        async def read() -> list[Seen]:
            consumer = self._consumer(topic, bootstrap, group, 2)
            try:
                await consumer.start()
                seen: list[Seen] = []
                while len(seen) < count:
                    seen.extend(await self._poll(consumer))
                await consumer.commit()
                return seen
            finally:
                await self._stop([consumer])

        return asyncio.run(read())

    @staticmethod
    async def _stop(consumers: list) -> None:
        """Every member stopped, also when reading failed: a consumer left running keeps
        tasks that ``asyncio.run`` then waits for until the test's timeout, hiding the error."""
        for consumer in consumers:
            await consumer.stop()

    @staticmethod
    def _consumer(topic: str, bootstrap: str, group: str, index: int):
        from aiokafka import AIOKafkaConsumer

        return AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=f"aiokafka-{index}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            heartbeat_interval_ms=500,
        )

    @staticmethod
    async def _poll(consumer) -> list[Seen]:
        batches = await consumer.getmany(timeout_ms=POLL_MS)
        return [Seen(r.partition, r.offset, r.key) for batch in batches.values() for r in batch]


class Kcat:
    """Debian's kcat (librdkafka) as a command: -P to produce, -G for a balanced group."""

    name = "kcat"
    FORMAT = "%p %o %k\\n"

    def produce(self, bootstrap: str, topic: str, records: Keyed) -> None:
        lines = b"".join(k + b":" + v + b"\n" for k, v in records)
        subprocess.run(
            [
                self._kcat(),
                "-b",
                bootstrap,
                "-P",
                "-t",
                topic,
                "-K:",
                "-X",
                "partitioner=murmur2_random",
                "-X",
                "enable.idempotence=true",
            ],  # fmt: skip
            input=lines,
            check=True,
            timeout=60,
        )

    def group(
        self, bootstrap: str, topic: str, group: str, count: int, whole: Check, produce: Produce
    ) -> GroupRun:
        members = [self._member(bootstrap, topic, group) for _ in range(2)]
        run = GroupRun()
        readers = [threading.Thread(target=_read_lines, args=(m, run.records), daemon=True) for m in members]
        for reader in readers:
            reader.start()

        def poll() -> None:
            for member in members:
                if member.poll() is not None:
                    raise AssertionError(
                        f"kcat exited with {member.returncode}: {member.stderr.read().decode()}"
                    )
            threading.Event().wait(POLL_MS / 1000)

        try:
            _read(run, count, whole, produce, poll)
        finally:
            for member in members:  # SIGTERM: kcat leaves the group, committing what it printed
                member.send_signal(signal.SIGTERM)
            for member in members:
                member.wait(30)
            for reader in readers:
                reader.join(10)
        return run

    def resume(self, bootstrap: str, topic: str, group: str, count: int) -> list[Seen]:
        member = self._member(
            bootstrap, topic, group, "-e"
        )  # -e: exit once every partition is read to its end
        out, err = member.communicate(timeout=60)
        assert member.returncode == 0, err.decode()
        return [_parse(line) for line in out.decode().splitlines() if line]

    def _member(self, bootstrap: str, topic: str, group: str, *extra: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                self._kcat(),
                "-b",
                bootstrap,
                "-G",
                group,
                "-f",
                self.FORMAT,
                "-q",
                "-u",
                "-X",
                "auto.offset.reset=earliest",
                "-X",
                "enable.auto.commit=true",
                "-X",
                "heartbeat.interval.ms=500",
                *extra,
                topic,
            ],  # fmt: skip
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    @staticmethod
    def _kcat() -> str:
        return tools.command("kcat")


def _read(run: GroupRun, count: int, whole: Check, produce: Produce, poll: Callable[[], None]) -> None:
    """Poll until the group is whole, produce, then poll until ``count`` records are read;
    each phase within ``PHASE_TIMEOUT_S``, so a group that never forms fails saying so."""
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while not whole():
        assert time.monotonic() < deadline, f"the group was not whole after {PHASE_TIMEOUT_S} s"
        poll()
    produce()
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while len(run.records) < count:
        assert time.monotonic() < deadline, (
            f"{len(run.records)} of {count} records read after {PHASE_TIMEOUT_S} s"
        )
        poll()


def _read_lines(process: subprocess.Popen[bytes], into: list[Seen]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        if line.strip():
            into.append(_parse(line.decode()))


def _parse(line: str) -> Seen:
    partition, offset, key = line.rstrip("\n").split(" ", 2)
    return Seen(int(partition), int(offset), key.encode())


CLIENTS: Iterable[type] = (KafkaPython, ConfluentKafka, AioKafka, Kcat)
