"""What the transaction tests share: reading a topic back as Kafka's clients see it with
either isolation level, finding a transactional id's coordinator, sending a transaction's
offsets with librdkafka without hanging on its bug (``send_offsets``), and KafkaJS.

``read_back`` reads with confluent-kafka (librdkafka), whose read_committed consumer
stops at the last stable offset and drops aborted records and control batches itself
(from the fetch's aborted-transaction list): what a broker answers is judged by what a
real client then shows an application.

KafkaJS is not a Python package: ``kafkajs()`` fetches version ``KAFKAJS_VERSION`` from
the npm registry into a cache outside the repository, once; node comes from
``tests.tools``: without node (or the registry) the tests that need it skip saying so, and
fail under ``CI=true``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from confluent_kafka import Producer, TopicPartition
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from tests import tools
from tests.integration.polling import wait_until
from tests.missing_tool import missing
from tests.unit.kafka_wire import call

READ_TIMEOUT_S = 90.0
POLL_S = 0.2
TRANSACTION_KEY = 1  # FindCoordinator key_type: a transactional id
KAFKAJS_VERSION = "2.2.4"
KAFKAJS_TARBALL = f"https://registry.npmjs.org/kafkajs/-/kafkajs-{KAFKAJS_VERSION}.tgz"
KAFKAJS_INTEGRITY = (  # the registry's dist.integrity of that version
    "sha512-j/YeapB1vfPT2iOIUn/vxdyKEuhuY2PxMBvf5JWux6iSaukAccrMtXEY/Lb7OvavDhOWME589bpLrEdnVHjfjA=="
)
FETCH_TIMEOUT_S = 120
KAFKAJS_SCRIPT = Path(__file__).with_name("kafkajs_transactions.js")
# how long past its own timeout a librdkafka call may run before it counts as wedged: a
# request in flight when the timeout passes still ends within its own request timeout
WEDGED_AFTER_S = 15.0


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes


def read_back(
    bootstrap: str,
    partitions: Iterable[tuple[str, int]],
    isolation: str,
    until: Callable[[list[Record]], bool],
    timeout_s: float = READ_TIMEOUT_S,
) -> list[Record]:
    """Every record of ``partitions`` from the beginning, read with ``isolation.level``
    ``isolation`` until ``until(records)`` holds and every partition is then at its end
    (its LSO for read_committed): so records past the expected ones would be read too."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    wanted = set(partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-back-{time.monotonic_ns()}",  # librdkafka wants one; nothing committed
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    records: list[Record] = []
    at_end: set[tuple[str, int]] = set()
    try:
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in sorted(wanted)])
        deadline = time.monotonic() + timeout_s
        while not (at_end == wanted and until(records)):
            assert time.monotonic() < deadline, (
                f"{isolation}: {len(records)} records read, at the end of {sorted(at_end)} "
                f"of {sorted(wanted)} after {timeout_s:g} s"
            )
            for message in consumer.consume(500, POLL_S):
                where = (message.topic(), message.partition())
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, f"{isolation} read failed: {error}"
                    at_end.add(where)
                    continue
                at_end.discard(where)
                records.append(Record(*where, message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    return records


def keys(records: Iterable[Record]) -> list[bytes]:
    return [r.key for r in records]


def committed_offsets(
    bootstrap: str, group: str, partitions: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """The group's committed offset of each partition (-1001 if none), as a read_committed
    consumer fetches them (librdkafka asks for stable offsets: none pending in a transaction)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"}
    )
    try:
        found = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=30)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in found}


def end_offsets(bootstrap: str, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Each partition's high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets"})
    try:
        return {
            (t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=30)[1] for t, p in partitions
        }
    finally:
        consumer.close()


def transaction_coordinator(kafka_address: str, transactional_id: str) -> int:
    """The broker id FindCoordinator (key_type 1) names for ``transactional_id``; polls
    while the answer is an error (a coordinator moving, or loading its state)."""
    seen: list[Any] = []

    def ask() -> int | None:
        asked = FindCoordinatorRequest(key_type=TRANSACTION_KEY, coordinator_keys=[transactional_id])
        [found] = call(kafka_address, asked, 4, FindCoordinatorResponse).coordinators
        seen[:] = [found]
        return found.node_id if found.error_code == 0 else None

    return wait_until(
        ask,
        timeout_s=30,
        what=f"a coordinator for transactional id {transactional_id!r}",
        detail=lambda: seen,
    )


class Wedged(Exception):
    """A librdkafka call still running well past its own timeout: it may never return."""


def send_offsets(
    producer: Producer, offsets: list[TopicPartition], group_metadata: object, timeout_s: float
) -> None:
    """``producer.send_offsets_to_transaction``, or Wedged once it has run ``WEDGED_AFTER_S``
    past ``timeout_s``; the call is left running on a daemon thread (it holds the producer).

    librdkafka 2.16 can wait forever here (confluentinc/librdkafka#5511, its timeout
    unchecked: #5456): when the group coordinator it has cached was dropped from the
    metadata (a killed broker, once fenced), TxnOffsetCommit waits for that broker's
    connection to come up, which never does, and nothing asks FindCoordinator again until
    some other broker's connection changes state. The application's way out is a new
    producer with the same ``transactional.id``: its InitProducerId fences the wedged one
    and aborts its transaction."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            producer.send_offsets_to_transaction(offsets, group_metadata, timeout_s)
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            outcome.append(e)

    thread = threading.Thread(target=run, name="send-offsets", daemon=True)
    thread.start()
    thread.join(timeout_s + WEDGED_AFTER_S)
    if not outcome:
        raise Wedged(
            f"send_offsets_to_transaction still running {timeout_s + WEDGED_AFTER_S:g} s after its call"
        )
    if outcome[0] is not None:
        raise outcome[0]


# KafkaJS -------------------------------------------------------------------------------


def kafkajs() -> Path:
    """A ``node_modules`` holding KafkaJS ``KAFKAJS_VERSION``, fetched from the npm registry
    into the user's cache on first use (KafkaJS has no dependencies: its tarball is the
    whole install, so npm, with its hundreds of Debian packages, is not needed). The
    tarball must match the registry's pinned integrity; a partial install never takes the
    final name."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "raftka-tests"
    modules = cache / f"kafkajs-{KAFKAJS_VERSION}" / "node_modules"
    if (modules / "kafkajs" / "package.json").is_file():
        return modules
    tools.require("node")
    try:
        with urllib.request.urlopen(KAFKAJS_TARBALL, timeout=FETCH_TIMEOUT_S) as answer:
            tarball = answer.read()
    except OSError as e:
        missing(f"could not fetch KafkaJS {KAFKAJS_VERSION} from {KAFKAJS_TARBALL}: {e}")
    digest = base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    assert f"sha512-{digest}" == KAFKAJS_INTEGRITY, (
        f"{KAFKAJS_TARBALL} is not the tarball the registry pinned"
    )
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="kafkajs-", dir=cache))
    try:
        with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
            archive.extractall(staging, filter="data")  # everything under package/
        (staging / "node_modules").mkdir()
        (staging / "package").rename(staging / "node_modules" / "kafkajs")
        try:
            staging.rename(modules.parent)
        except OSError:  # another run installed it meanwhile
            assert (modules / "kafkajs" / "package.json").is_file(), f"no KafkaJS in {modules}"
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return modules


def run_kafkajs(brokers: str, plan: dict[str, Any], timeout_s: float = 180) -> dict[str, Any]:
    """Run ``kafkajs_transactions.js`` with ``plan`` (JSON); returns what it prints (JSON)."""
    modules = kafkajs()
    done = subprocess.run(
        ["node", str(KAFKAJS_SCRIPT), brokers, json.dumps(plan)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=os.environ | {"NODE_PATH": str(modules)},
        check=False,
    )
    assert done.returncode == 0, f"KafkaJS failed ({done.returncode}): {done.stderr[-4000:]}"
    return json.loads(done.stdout)
