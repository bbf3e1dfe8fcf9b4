"""Incremental fetch sessions (KIP-227): the session follows what the client sends (added,
updated, forgotten partitions) whatever the order, its answers leave out partitions with
nothing new, Kafka's epoch and id rules hold, the cache stays within its bounds, and
kafka-python, which uses sessions, reads every record through them."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest, FetchResponse

from raftka.broker.kafka.errors import FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH
from raftka.broker.kafka.fetch_sessions import FetchSessions
from raftka.broker.kafka.protocol import REQUEST_PREFIX, KafkaDispatcher
from tests.unit.kafka_wire import BrokerThread, broker_thread

F = FetchRequest.FetchTopic
FR = FetchResponse.FetchableTopicResponse.PartitionData
VERSION = 12  # by name; 13 on: by topic id
ME, OTHER = "127.0.0.1:1000", "127.0.0.1:2000"


def fetch(session_id: int, epoch: int, wanted: dict[tuple[str, int], int], forgotten=()) -> FetchRequest:
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in wanted.items():
        by_topic.setdefault(topic, []).append(
            F.FetchPartition(
                partition=partition,
                fetch_offset=offset,
                partition_max_bytes=1 << 20,
                current_leader_epoch=-1,
                last_fetched_epoch=-1,
                log_start_offset=-1,
            )  # fmt: skip
        )
    gone: dict[str, list[int]] = {}
    for topic, partition in forgotten:
        gone.setdefault(topic, []).append(partition)
    return FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch, rack_id="",
        topics=[F(topic=t, partitions=p) for t, p in by_topic.items()],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic=t, partitions=p) for t, p in gone.items()],
    )  # fmt: skip


def asked(plan) -> dict[tuple[str, int], int]:  # noqa: ANN001 - a Plan
    return {(t.topic, p.partition): p.fetch_offset for t in plan.topics for p in t.partitions}


def answer(topic: str, partition: int, high_watermark: int, records: bytes = b"", error: int = 0) -> FR:
    return FR(partition_index=partition, error_code=error, high_watermark=high_watermark,
              last_stable_offset=high_watermark, log_start_offset=0, aborted_transactions=[],
              preferred_read_replica=-1, records=records)  # fmt: skip


def answered_topics(*partitions: tuple[str, FR]) -> list:
    by_topic: dict[str, list] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return [FetchResponse.FetchableTopicResponse(topic=t, partitions=p) for t, p in by_topic.items()]


keys = st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 4))
steps = st.lists(
    st.tuples(st.dictionaries(keys, st.integers(0, 1000), max_size=5), st.lists(keys, max_size=3)),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(first=st.dictionaries(keys, st.integers(0, 1000), min_size=1, max_size=8), steps=steps)
def test_a_session_fetches_what_the_client_has_sent_and_not_forgotten(first, steps) -> None:
    sessions = FetchSessions()
    plan = sessions.plan(fetch(0, 0, first), VERSION, ME)
    assert plan.session_id > 0 and asked(plan) == first
    model, epoch = dict(first), 1
    for changed, forgotten in steps:
        plan = sessions.plan(fetch(plan.session_id, epoch, changed, forgotten), VERSION, ME)
        model.update(changed)
        for key in forgotten:
            model.pop(key, None)
        assert plan.error_code == 0 and plan.incremental
        assert asked(plan) == model
        epoch += 1


def test_an_incremental_answer_holds_only_partitions_with_something_new() -> None:
    sessions = FetchSessions()
    full = sessions.plan(fetch(0, 0, {("a", 0): 0, ("a", 1): 0, ("b", 0): 0}), VERSION, ME)
    first = sessions.answered(full, answered_topics(("a", answer("a", 0, 5)), ("a", answer("a", 1, 0)),
                                                    ("b", answer("b", 0, 0))), by_id=False)  # fmt: skip
    assert sum(len(t.partitions) for t in first) == 3  # a full fetch answers every partition
    again = sessions.plan(fetch(full.session_id, 1, {}), VERSION, ME)
    news = sessions.answered(again, answered_topics(
        ("a", answer("a", 0, 5)),  # nothing new
        ("a", answer("a", 1, 2, records=b"x")),  # records
        ("b", answer("b", 0, 0, error=6)),  # an error (NOT_LEADER_OR_FOLLOWER)
    ), by_id=False)  # fmt: skip
    assert [(t.topic, [p.partition_index for p in t.partitions]) for t in news] == [("a", [1]), ("b", [0])]
    later = sessions.plan(fetch(full.session_id, 2, {}), VERSION, ME)
    moved = sessions.answered(later, answered_topics(("a", answer("a", 0, 6)), ("a", answer("a", 1, 2)),
                                                     ("b", answer("b", 0, 0))), by_id=False)  # fmt: skip
    # a's 0 high watermark moved; b's 0 last answered an error, so its state is news again
    assert [(t.topic, [p.partition_index for p in t.partitions]) for t in moved] == [("a", [0]), ("b", [0])]


def test_kafkas_epoch_and_id_rules() -> None:
    sessions = FetchSessions()
    one = sessions.plan(fetch(0, 0, {("a", 0): 0}), VERSION, ME)
    assert sessions.plan(fetch(one.session_id, 2, {}), VERSION, ME).error_code == INVALID_FETCH_SESSION_EPOCH
    assert (
        sessions.plan(fetch(one.session_id + 1, 1, {}), VERSION, ME).error_code == FETCH_SESSION_ID_NOT_FOUND
    )
    assert (
        sessions.plan(fetch(one.session_id, 1, {}), VERSION, OTHER).error_code == FETCH_SESSION_ID_NOT_FOUND
    )
    assert sessions.plan(fetch(one.session_id, 1, {}), VERSION, ME).error_code == 0  # the owner's still works
    final = sessions.plan(fetch(one.session_id, -1, {("a", 0): 3}), VERSION, ME)
    assert (final.session_id, final.incremental, asked(final), len(sessions)) == (0, False, {("a", 0): 3}, 0)
    sessionless = sessions.plan(fetch(0, -1, {("a", 0): 0}), VERSION, ME)
    assert (sessionless.session_id, len(sessions)) == (0, 0)
    old = sessions.plan(fetch(0, 0, {("a", 0): 0}), VERSION, ME)
    renewed = sessions.plan(fetch(old.session_id, 0, {("b", 1): 0}), VERSION, ME)
    assert renewed.session_id not in (0, old.session_id) and len(sessions) == 1
    assert sessions.plan(fetch(0, 5, {}), VERSION, ME).error_code == FETCH_SESSION_ID_NOT_FOUND
    assert FetchSessions().plan(fetch(7, 1, {}), 6, ME).session_id == 0  # before v7: no sessions


def test_a_full_cache_evicts_only_an_idle_or_smaller_session() -> None:
    now = [0.0]
    sessions = FetchSessions(slots=2, eviction_s=120, clock=lambda: now[0])
    big = {("a", p): 0 for p in range(3)}
    first = sessions.plan(fetch(0, 0, big), VERSION, ME)
    second = sessions.plan(fetch(0, 0, big), VERSION, OTHER)
    assert first.session_id and second.session_id
    assert sessions.plan(fetch(0, 0, {("a", 0): 0}), VERSION, "c:1").session_id == 0  # smaller, none idle
    bigger = sessions.plan(fetch(0, 0, {("a", p): 0 for p in range(4)}), VERSION, "c:2")
    assert bigger.session_id > 0 and len(sessions) == 2  # evicted the least recently used smaller one
    assert sessions.plan(fetch(first.session_id, 1, {}), VERSION, ME).error_code == FETCH_SESSION_ID_NOT_FOUND
    now[0] = 121.0
    assert sessions.plan(fetch(0, 0, {("a", 0): 0}), VERSION, "c:3").session_id > 0  # the idle one goes


def test_the_cache_holds_at_most_its_partitions() -> None:
    sessions = FetchSessions(partitions_max=4)
    assert sessions.plan(fetch(0, 0, {("a", p): 0 for p in range(5)}), VERSION, ME).session_id == 0
    one = sessions.plan(fetch(0, 0, {("a", p): 0 for p in range(3)}), VERSION, ME)
    grown = sessions.plan(fetch(one.session_id, 1, {("b", p): 0 for p in range(2)}), VERSION, ME)
    assert grown.error_code == FETCH_SESSION_ID_NOT_FOUND and len(sessions) == 0  # closed: start over


def test_topic_ids_key_the_session_from_version_13() -> None:
    sessions = FetchSessions()
    topic_id = uuid.uuid4()
    request = fetch(0, 0, {})
    request.topics = [F(topic_id=topic_id, partitions=[F.FetchPartition(
        partition=0, fetch_offset=9, partition_max_bytes=1, current_leader_epoch=-1, last_fetched_epoch=-1,
        log_start_offset=-1)])]  # fmt: skip
    plan = sessions.plan(request, 13, ME)
    again = sessions.plan(fetch(plan.session_id, 1, {}), 13, ME)
    assert [(t.topic_id, [p.fetch_offset for p in t.partitions]) for t in again.topics] == [(topic_id, [9])]


PARTITIONS = 40


@pytest.fixture
def served(tmp_path):
    with broker_thread(tmp_path, {"wide": PARTITIONS}) as broker:
        yield broker


def test_kafka_python_reads_every_record_of_a_wide_topic_through_one_session(
    served: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=served.bootstrap, linger_ms=5)
    sent = {(p, f"{p}-{i}".encode()) for p in range(PARTITIONS) for i in range(5)}
    for partition, value in sorted(sent):
        producer.send("wide", value=value, partition=partition)
    producer.flush(30)
    producer.close()
    epochs: list[int] = []
    dispatch = KafkaDispatcher.dispatch

    def recording(self: KafkaDispatcher, frame: memoryview):  # noqa: ANN202 - as dispatch
        key, version, _ = REQUEST_PREFIX.unpack_from(frame)
        if key == FetchRequest.API_KEY:
            epochs.append(FetchRequest.decode(bytes(frame), version=version, header=True).session_epoch)
        return dispatch(self, frame)

    monkeypatch.setattr(KafkaDispatcher, "dispatch", recording)
    consumer = KafkaConsumer(bootstrap_servers=served.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, fetch_max_wait_ms=100)  # fmt: skip
    consumer.assign([TopicPartition("wide", p) for p in range(PARTITIONS)])
    received: list[tuple[int, bytes]] = []
    for _ in range(100):
        for tp, records in consumer.poll(timeout_ms=200).items():
            received += [(tp.partition, r.value) for r in records]
        if len(received) >= len(sent) and sum(1 for e in epochs if e > 0) >= 3:
            break
    consumer.close()
    monkeypatch.undo()
    assert sorted(received) == sorted(sent) and len(received) == len(sent)  # every record, once
    assert epochs[0] == 0 and sum(1 for e in epochs if e > 0) >= 3  # a session, then incremental fetches


def test_the_perf_tool_counts_fetches_and_records_with_and_without_sessions(served: BrokerThread) -> None:
    """``raftka perf kafka-fetch-sessions``' measure on a tiny workload: both runs fetch and
    read what the writer wrote (the CPU figures are for a quiet machine, not for tests)."""
    import argparse

    from raftka.tools.perf.perf_fetch_sessions import measure

    args = argparse.Namespace(topic="wide", seconds=1, rate=50, bootstrap_server=served.bootstrap, dir=None)
    for sessions in (False, True):
        result = measure(args, served.bootstrap, PARTITIONS, sessions=sessions)
        assert result["fetches"] > 0 and result["records"] > 0, result
        assert set(result["cpu_s"]) == {"perf-client"}  # no local cluster here: only this process measured


def test_a_connection_holds_one_session_so_asking_for_new_ones_cannot_fill_the_cache() -> None:
    sessions = FetchSessions(slots=3)
    others = [
        sessions.plan(fetch(0, 0, {("a", p): 0 for p in range(5)}), VERSION, f"other:{i}") for i in range(2)
    ]
    for _ in range(10):
        latest = sessions.plan(fetch(0, 0, {("b", 0): 0}), VERSION, ME)  # a new session each fetch
    assert len(sessions) == 3 and latest.session_id > 0
    for other in others:  # the others' sessions were never evicted
        assert sessions.plan(fetch(other.session_id, 1, {}), VERSION, other.session.owner).error_code == 0
