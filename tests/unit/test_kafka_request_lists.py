"""A Kafka request's lists are counted before it is decoded: the walk follows every API
the listener serves at every version byte for byte, a list over its bound is refused
without reading its entries, and a broker refuses the request that got one fenced (a
2 MiB Metadata naming 1,048,576 empty topics) by closing that connection alone."""

from __future__ import annotations

import random
import struct
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.protocol.admin import CreateTopicsRequest, DescribeGroupsRequest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.schemas.fields.base import BaseField
from kafka.protocol.schemas.fields.codecs import UUID as UUIDCodec
from kafka.protocol.schemas.fields.codecs import BitField, Boolean, Bytes, Float64, String
from kafka.protocol.schemas.fields.struct import StructField

from raftka.broker.kafka.cluster_apis import ClusterApis
from raftka.broker.kafka.group_apis import GroupApis
from raftka.broker.kafka.log_apis import LogApis
from raftka.broker.kafka.protocol import KafkaApi, KafkaDispatcher
from raftka.broker.kafka.request_lists import (
    ENTRIES_PER_LIST_MAX,
    ENTRIES_PER_REQUEST_MAX,
    TAGGED_SECTIONS_MAX,
    check_request_lists,
)
from raftka.broker.replica.manager import PARTITIONS_PER_REQUEST_MAX
from raftka.wire.frames import FrameError
from tests.unit.kafka_wire import RawConnection, broker_thread, correlation_of, request_frame

SERVED: list[KafkaApi] = list(
    KafkaDispatcher(
        [
            *ClusterApis(None, SimpleNamespace(node_id=1)).apis(),  # type: ignore[arg-type]
            *LogApis(None).apis(),  # type: ignore[arg-type]
            *GroupApis(None).apis(),  # type: ignore[arg-type]
        ]
    ).apis.values()
)


def check(request: Any, version: int) -> int:
    """The entries counted in ``request`` encoded at ``version``, as the listener walks it."""
    frame = request_frame(request, version, 7)
    return check_request_lists(type(request), memoryview(frame)[4:], version)


def refusal(request: Any, version: int) -> str:
    with pytest.raises(FrameError) as refused:
        check(request, version)
    return str(refused.value)


# the walk follows the schema ---------------------------------------------------------


class RandomRequest:
    """A request of any schema with every field of its version set, lists of 0 to 3 entries."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.entries = 0
        self.tagged_structs = 0  # set tagged fields in at most TAGGED_SECTIONS_MAX, as the bound allows

    def struct(self, struct: StructField, version: int) -> dict[str, Any]:
        tagged = {f.name for f in struct.tagged_fields(version)._fields}
        if tagged and self.tagged_structs >= TAGGED_SECTIONS_MAX:
            return {f.name: self.value(f, version) for f in struct._fields
                    if f.for_version_q(version) and f.name not in tagged}  # fmt: skip
        self.tagged_structs += bool(tagged)
        return {f.name: self.value(f, version) for f in struct._fields if f.for_version_q(version)}

    def value(self, field: BaseField, version: int) -> Any:
        if field.is_array():
            count = self.rng.randrange(4)
            self.entries += count
            entry = field.array_of
            if field.is_struct_array():
                return [
                    entry.data_class(version=version, **self.struct(entry, version)) for _ in range(count)
                ]
            return [self.simple(entry) for _ in range(count)]
        if field.is_struct():
            return field.data_class(version=version, **self.struct(field, version))
        return self.simple(field)

    def simple(self, field: BaseField) -> Any:
        codec, rng = field._type, self.rng
        if isinstance(codec, String):
            return "".join(rng.choice("ab.-") for _ in range(rng.randrange(6)))
        if codec is Bytes:
            return rng.randbytes(rng.randrange(6))
        if codec is UUIDCodec:
            return uuid.UUID(int=rng.getrandbits(128))
        if codec is Boolean:
            return rng.random() < 0.5
        if codec is Float64:
            return rng.random()
        if codec is BitField:
            return {1, 3}
        return rng.randrange(1, 100)


@pytest.mark.parametrize("api", SERVED, ids=lambda api: api.name)
def test_the_walk_reads_every_served_version_to_its_last_byte_and_counts_every_entry(api: KafkaApi) -> None:
    """kafka-python encodes a random request; the walk must count exactly the entries in
    it and need exactly its bytes (one byte fewer ends inside a field)."""
    rng = random.Random(f"{api.name}-lists")
    for version in range(api.min_version, api.max_version + 1):
        for _ in range(20):
            built = RandomRequest(rng)
            request = api.request(version=version, **built.struct(api.request._struct, version))
            frame = memoryview(request_frame(request, version, 7))[4:]
            assert check_request_lists(api.request, frame, version) == built.entries
            with pytest.raises(FrameError, match="ends at byte"):
                check_request_lists(api.request, frame[:-1], version)


# the bounds --------------------------------------------------------------------------


def metadata(names: list[str], version: int = 12) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
        allow_auto_topic_creation=False,
    )


@pytest.mark.parametrize("version", [1, 9, 12])
def test_a_list_of_names_is_bounded_as_on_the_data_listener(version: int) -> None:
    assert check(metadata(["t"] * ENTRIES_PER_LIST_MAX), version) == ENTRIES_PER_LIST_MAX
    said = refusal(metadata(["t"] * (ENTRIES_PER_LIST_MAX + 1)), version)
    assert said == (
        f"a MetadataRequest v{version} request is refused: "
        f"topics: {ENTRIES_PER_LIST_MAX + 1} entries, at most {ENTRIES_PER_LIST_MAX} in one list"
    )
    groups = DescribeGroupsRequest(
        groups=["g"] * (ENTRIES_PER_LIST_MAX + 1), include_authorized_operations=False
    )
    assert "groups: 1001 entries" in refusal(groups, 5)


def fetch(topics: int, partitions: int) -> FetchRequest:
    T = FetchRequest.FetchTopic
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            T(
                topic=f"t{i}",
                partitions=[T.FetchPartition(partition=p, fetch_offset=0) for p in range(partitions)],
            )
            for i in range(topics)
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def test_the_largest_fetch_the_replica_manager_takes_passes_and_the_request_total_is_bounded() -> None:
    """Partitions are bounded over the request, not per list: 10,000 in one topic pass."""
    assert check(fetch(1, PARTITIONS_PER_REQUEST_MAX), 12) == 1 + PARTITIONS_PER_REQUEST_MAX
    assert check(fetch(ENTRIES_PER_LIST_MAX, 10), 12) == ENTRIES_PER_REQUEST_MAX
    said = refusal(fetch(ENTRIES_PER_LIST_MAX, 11), 12)
    assert f"past {ENTRIES_PER_REQUEST_MAX} entries" in said and "topics[].partitions" in said


def test_nested_lists_of_names_are_bounded_in_total() -> None:
    """1,000 topics of 1,000 configs each: every list within its bound, the request not."""
    T = CreateTopicsRequest.CreatableTopic
    configs = [T.CreatableTopicConfig(name="k", value="v")] * ENTRIES_PER_LIST_MAX
    topics = [
        T(name=f"t{i}", num_partitions=1, replication_factor=1, assignments=[], configs=configs)
        for i in range(ENTRIES_PER_LIST_MAX)
    ]
    said = refusal(CreateTopicsRequest(topics=topics, timeout_ms=1000, validate_only=False), 7)
    assert f"topics[].configs: {ENTRIES_PER_LIST_MAX} entries bring the request's lists past" in said


def test_a_huge_length_in_a_short_frame_is_refused_without_reading_on() -> None:
    header = struct.pack(">hhih", 3, 1, 7, -1)
    frame = memoryview(header + struct.pack(">i", 2**31 - 1))
    with pytest.raises(FrameError, match="topics: 2147483647 entries"):
        check_request_lists(MetadataRequest, frame, 1)


def test_structs_with_tagged_fields_are_bounded() -> None:
    """kafka-python copies the rest of the frame for each struct that carries tags."""
    request = metadata(["t"] * (TAGGED_SECTIONS_MAX + 1), version=9)
    frame = bytearray(request_frame(request, 9, 7)[4:])
    plain = frame.replace(b"\x02t\x00", b"\x02t\x01\x05\x00")  # each topic: one unknown tag, no data
    assert plain != frame
    with pytest.raises(FrameError, match=f"more than {TAGGED_SECTIONS_MAX} structs with tagged fields"):
        check_request_lists(MetadataRequest, memoryview(plain), 9)
    fewer = bytes(plain).replace(b"\x02t\x01\x05\x00", b"\x02t\x00", 1)
    assert check_request_lists(MetadataRequest, memoryview(fewer), 9) == TAGGED_SECTIONS_MAX + 1


# the request that got a broker fenced --------------------------------------------------


def test_a_metadata_request_of_a_million_empty_names_closes_its_connection_and_the_broker_serves_on(
    tmp_path: Path,
) -> None:
    names = 1 << 20
    body = struct.pack(">hhih", 3, 1, 7, -1) + struct.pack(">i", names) + b"\x00\x00" * names
    assert len(body) > 2 << 20
    with (
        broker_thread(tmp_path, {"t": 1}) as served,
        RawConnection(served.bootstrap) as abuser,
        RawConnection(served.bootstrap) as other,
    ):
        abuser.send(len(body).to_bytes(4, "big") + body)
        assert abuser.read_frame() is None, "the request was answered, so it was decoded and planned"
        other.send(request_frame(metadata(["t"]), 12, 8))
        answer = other.read_frame()
    assert correlation_of(answer) == 8
    topics = MetadataResponse.decode(answer, version=12, header=True).topics
    assert [(t.name, t.error_code) for t in topics] == [("t", 0)]
