"""Exactly once through faults: a consume-transform-produce loop, as Kafka Streams or any
stream processor runs one, copies an input topic to an output topic in transactions
(confluent-kafka: read_committed consumer, transactional producer, the consumed offsets
sent in each transaction) while the input is still being written and the test SIGKILLs,
one at a time, the leader of an output partition, the broker coordinating the
processor's transactions, and the active controller (the transactions' state lives in
the metadata quorum), each restarted once the processor has committed past its death.

The processor does what librdkafka's documentation asks of an application: a retriable
commit is retried, an abortable error aborts and rewinds the consumer to the group's
committed offsets, a fatal one (fenced) starts a new producer with the same
``transactional.id`` and rewinds too, as does a producer wedged in
``send_offsets_to_transaction`` by librdkafka's bug (``transactions.send_offsets``).
It also gives up every 7th transaction itself once its copies are in the output's logs,
so aborted records are surely there to hide (the faults may cause none: librdkafka
retries through most). Afterwards, read_committed: the output holds each input record
exactly once (none lost, none duplicated; a record of an aborted attempt shown would be
a duplicate), and the group's committed offsets are the input's ends.
"""

from __future__ import annotations

import asyncio
import collections
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from raftka.client.admin import Admin, RetryPolicy
from raftka.client.types import NewTopic
from tests.integration.metadata_cluster import Controllers, MetadataCluster
from tests.integration.polling import wait_until
from tests.integration.transactions import (
    Wedged,
    committed_offsets,
    end_offsets,
    read_back,
    send_offsets,
    transaction_coordinator,
)

pytestmark = pytest.mark.integration
SESSION_TIMEOUT_MS = 2_000  # short, so a killed broker is fenced (and replaced) quickly
HEARTBEAT_MS = 300
PARTITIONS = 3
SOURCE, SINK, GROUP, TRANSACTIONAL_ID = "eos-input", "eos-output", "eos-processor", "eos-processor"
INPUT_RATE = 50  # records/s written while the faults happen
BATCH = 50  # records per transaction at most
GIVE_UP_EVERY = 7  # the processor aborts every 7th transaction itself, its copies written
PROGRESS = 3  # transactions the processor commits with a node down, and again once it is back
RECOVERY_TIMEOUT_S = 90.0
TIMEOUT_S = 30.0


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetadataCluster]:
    cluster = MetadataCluster(tmp_path_factory.mktemp("exactly-once") / "cluster")
    try:
        cluster.up_configured(
            controller__controller={"session_timeout_ms": SESSION_TIMEOUT_MS},
            broker__broker={"heartbeat_interval_ms": HEARTBEAT_MS},
        )
        yield cluster
    finally:
        cluster.close()


class Feeder:
    """The input, written at ``INPUT_RATE`` by an idempotent producer (acks=all) on a
    thread of its own until stopped; every record must be acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        self._stop = threading.Event()
        self.sent = 0
        self.failures: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        def delivered(error, message) -> None:  # noqa: ANN001
            if error is not None:
                self.failures.append(str(error))

        while not self._stop.wait(1 / INPUT_RATE):
            key = f"id-{self.sent}".encode()
            self._producer.produce(
                SOURCE, key=key, value=key, partition=self.sent % PARTITIONS, on_delivery=delivered
            )
            self.sent += 1
            self._producer.poll(0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def stop(self) -> int:
        """Stop writing; every record acknowledged. Returns how many were written."""
        self.close()
        assert self._producer.flush(RECOVERY_TIMEOUT_S) == 0, "input records left undelivered"
        assert not self.failures, self.failures[:5]
        return self.sent


class Processor:
    """The consume-transform-produce loop on a thread of its own; ``check()`` raises what
    stopped it."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._stop = threading.Event()
        self.attempts = self.commits = self.aborts = self.new_producers = 0
        self.errors: collections.deque[str] = collections.deque(maxlen=8)  # the last ones, for failures
        self._failed: KafkaError | None = None  # why the last transaction failed; None: wedged
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def where(self) -> str:
        """The processor thread's stack now: which call it waits in, for failures."""
        frame = sys._current_frames().get(self._thread.ident or 0)
        return "".join(traceback.format_stack(frame)[-4:]) if frame is not None else "not running"

    def check(self) -> None:
        if self.failure is not None:
            raise AssertionError("the processor stopped") from self.failure

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(RECOVERY_TIMEOUT_S)  # a librdkafka call in flight ends within its timeout
        assert not self._thread.is_alive(), f"the processor did not stop; it waits in:\n{self.where()}"
        self.check()

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self._bootstrap,
                "group.id": GROUP,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        producer = None
        try:
            self._rewind(consumer)
            producer = self._producer()
            while not self._stop.is_set():
                messages = [m for m in consumer.consume(BATCH, 0.2) if m.error() is None]
                if messages and not self._transaction(producer, consumer, messages):
                    producer = self._recover(producer, consumer)
        except BaseException as e:  # raised in the test by check(); once stopping, a call cut short
            if not self._stop.is_set():
                self.failure = e
        finally:
            consumer.close()

    def _producer(self) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self._bootstrap,
                "transactional.id": TRANSACTIONAL_ID,
                "transaction.timeout.ms": 20_000,
            }
        )
        self._retrying(lambda: producer.init_transactions(TIMEOUT_S))
        self.new_producers += 1
        return producer

    def _retrying(self, call: Callable[[], None]) -> None:
        """``call`` again while it fails with a retriable error (a coordinator moving)."""
        while True:
            try:
                call()
                return
            except KafkaException as e:
                self.errors.append(f"{time.strftime('%H:%M:%S')} {e.args[0]}")
                if not e.args[0].retriable() or self._stop.is_set():
                    raise

    def _transaction(self, producer: Producer, consumer: Consumer, messages: list) -> bool:
        """One transaction: the batch copied, the positions after it committed with it.
        False if it failed and was not committed (the caller recovers). Every
        ``GIVE_UP_EVERY``-th fails on purpose once its copies are in the output's logs, as
        an application's own error would: aborted records read_committed must not show."""
        self.attempts += 1
        try:
            producer.begin_transaction()
            for m in messages:
                producer.produce(SINK, key=m.key(), value=m.value(), partition=m.partition())
            if self.attempts % GIVE_UP_EVERY == 0:
                assert producer.flush(TIMEOUT_S) == 0, "copies left unsent"
                raise KafkaException(KafkaError(KafkaError._APPLICATION, "given up", txn_requires_abort=True))
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            metadata = consumer.consumer_group_metadata()
            self._retrying(lambda: send_offsets(producer, positions, metadata, TIMEOUT_S))
            self._retrying(lambda: producer.commit_transaction(TIMEOUT_S))
        except KafkaException as e:
            self._failed = e.args[0]
            self.errors.append(f"{time.strftime('%H:%M:%S')} {e.args[0]}")
            return False
        except Wedged as e:
            self._failed = None  # the producer is stuck in a call: it cannot abort
            self.errors.append(f"{time.strftime('%H:%M:%S')} {e}")
            return False
        self.commits += 1
        return True

    def _recover(self, producer: Producer, consumer: Consumer) -> Producer:
        """Abort what the failed transaction wrote (or, fenced, fatal or wedged in a call,
        start a new producer: its InitProducerId aborts it), and read again from the commits."""
        error = self._failed
        if error is not None and not error.fatal():
            try:
                self._retrying(lambda: producer.abort_transaction(TIMEOUT_S))
                self.aborts += 1
            except KafkaException as e:
                if not e.args[0].fatal():
                    raise
                error = e.args[0]
        if error is None or error.fatal():
            producer = self._producer()
        self._rewind(consumer)
        return producer

    def _rewind(self, consumer: Consumer) -> None:
        """Every input partition from the group's committed offset (the beginning if none);
        messages fetched past it are dropped with the old assignment."""
        consumer.unassign()
        consumer.assign([TopicPartition(SOURCE, p) for p in range(PARTITIONS)])


@pytest.mark.timeout(600)  # five kills, each waited out and restarted, on a loaded machine
def test_consume_transform_produce_is_exactly_once_through_leader_coordinator_and_controller_kills(
    cluster: MetadataCluster,
) -> None:
    bootstrap = ",".join(n.kafka_address for n in cluster.nodes("broker"))
    admin = Admin(cluster.controller_addresses(), RetryPolicy(total_timeout_s=30))
    try:
        for result in admin.create_topics(
            [NewTopic(t, PARTITIONS, 3, {"min.insync.replicas": "2"}) for t in (SOURCE, SINK)]
        ):
            result.check()
        feeder = Feeder(bootstrap)
        processor = Processor(bootstrap)
        try:
            victims: list[tuple[str, Callable[[], int]]] = [
                ("the leader of output partition 0", lambda: output_leader(admin, 0)),
                (
                    "the transaction coordinator",
                    lambda: transaction_coordinator(any_broker(cluster), TRANSACTIONAL_ID),
                ),
                ("the active controller", lambda: active_controller(cluster)),
                ("the leader of output partition 1", lambda: output_leader(admin, 1)),
                (
                    "the transaction coordinator",
                    lambda: transaction_coordinator(any_broker(cluster), TRANSACTIONAL_ID),
                ),
            ]
            for what, pick in victims:
                committed_past(processor, PROGRESS, f"the processor to commit before killing {what}")
                victim = pick()
                cluster.kill(victim)
                committed_past(
                    processor, PROGRESS, f"the processor to commit with {what} (node {victim}) killed"
                )
                cluster.up()  # restarts it; waits until it is registered and unfenced
                every_replica_in_sync(admin)
            written = feeder.stop()
            ends = end_offsets(bootstrap, [(SOURCE, p) for p in range(PARTITIONS)])
            assert sum(ends.values()) == written, "the input holds each written record once"
            wait_until(
                lambda: processor.check() or committed_offsets(bootstrap, GROUP, ends) == ends,
                timeout_s=RECOVERY_TIMEOUT_S,
                what="the processor's committed offsets to reach the input's ends",
                detail=lambda: (committed_offsets(bootstrap, GROUP, ends), ends),
            )
        finally:
            feeder.close()
            processor.stop()
        print(f"{processor.commits} transactions committed, {processor.aborts} aborted, "
              f"{processor.new_producers} producers")  # fmt: skip

        output = read_back(bootstrap, [(SINK, p) for p in range(PARTITIONS)], "read_committed",
                           lambda rs: len(rs) >= written)  # fmt: skip
        copied = [r.key for r in output]
        assert len(copied) == written, f"{len(copied)} output records for {written} input records"
        assert len(set(copied)) == written, "a record was copied twice"
        assert set(copied) == {f"id-{i}".encode() for i in range(written)}
        assert all(r.value == r.key for r in output)
        written_twice = read_back(bootstrap, [(SINK, p) for p in range(PARTITIONS)], "read_uncommitted",
                                  lambda rs: len(rs) >= written)  # fmt: skip
        assert processor.aborts > 0 and len(written_twice) > written, "aborted copies are in the logs"
    finally:
        admin.close()


def committed_past(processor: Processor, count: int, what: str) -> None:
    target = processor.commits + count
    wait_until(lambda: processor.check() or processor.commits >= target, timeout_s=RECOVERY_TIMEOUT_S,
               what=what, detail=lambda: f"{processor.commits} commits, {processor.aborts} aborts, "
               f"{processor.new_producers} producers, last errors {list(processor.errors)}, "
               f"waiting in:\n{processor.where()}")  # fmt: skip


def output_leader(admin: Admin, partition: int) -> int:
    """The broker leading ``partition`` of the output topic."""
    [topic] = admin.describe_topics([SINK])
    return next(p.leader for p in topic.partitions if p.partition == partition)


def any_broker(cluster: MetadataCluster) -> str:
    return cluster.nodes("broker")[0].kafka_address


def active_controller(cluster: MetadataCluster) -> int:
    async def ask() -> str:
        controllers = Controllers(cluster.controller_addresses())
        try:
            return await controllers.active(TIMEOUT_S)
        finally:
            await controllers.close()

    address = asyncio.run(ask())
    return next(n.id for n in cluster.nodes("controller") if n.address == address)


def every_replica_in_sync(admin: Admin) -> None:
    """Every partition of both topics has all its replicas in its ISR again, so the next
    kill leaves each with min.insync.replicas."""

    def in_sync() -> bool:
        topics = admin.describe_topics([SOURCE, SINK])
        return all(sorted(p.isr) == sorted(p.replicas) for t in topics for p in t.partitions)

    wait_until(in_sync, timeout_s=RECOVERY_TIMEOUT_S, what="every replica back in its ISR")
