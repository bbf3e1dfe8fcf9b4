"""Issue 29 finding 10: a null where a Kafka request's schema does not allow one is a
malformed request, refused before it is decoded, as Kafka's parser refuses it. 45 of 3,045
schema-valid requests with a null in a non-nullable list raised in handlers (DescribeGroups,
ListGroups, DeleteGroups, ListTransactions, DescribeTransactions,
DescribeUserScramCredentials, CreateTopics), before any ACL check, each logging a
traceback at ERROR. Requests are generated from the schemas of every API and version the
Kafka listener serves (its own registry), with a null in each non-nullable list, string
and bytes field in turn; and the line a failing handler logs is rate-limited."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog.testing
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest
from kafka.protocol.schemas.fields.base import BaseField
from kafka.protocol.schemas.fields.codecs import UUID as UUIDCodec
from kafka.protocol.schemas.fields.codecs import BitField, Boolean, Bytes, Float64, String
from kafka.protocol.schemas.fields.struct import StructField

from raftka.broker.kafka.listener import kafka_apis
from raftka.broker.kafka.protocol import KafkaApi, KafkaDispatcher
from raftka.node.config import NodeConfig
from raftka.wire.frames import FrameError
from raftka.wire.server import Listener
from tests.unit.kafka_wire import RawConnection, call, request_frame

SERVED: list[KafkaApi] = list(
    KafkaDispatcher(kafka_apis(None, NodeConfig(1, Path("."), (), "127.0.0.1:1"))).apis.values()  # type: ignore[arg-type]
)


def _may_be_null(field: BaseField) -> bool:
    return field.is_array() or (
        not field.is_struct() and (isinstance(field._type, String) or field._type is Bytes)
    )


def null_targets(
    struct: StructField, version: int, prefix: tuple[str, ...] = (), path: str = ""
) -> Iterator[tuple[tuple[str, ...], str]]:
    """Each field of ``struct`` at ``version`` that may not be null, as (names, the path the
    refusal names), nested fields too."""
    for field in struct.untagged_fields(version):
        names, where = (*prefix, field.name), path + field.name
        if _may_be_null(field) and not field.nullable_for_version_q(version):
            yield names, where
        if field.is_struct_array():
            yield from null_targets(field.array_of, version, names, where + "[].")
        elif field.is_struct():
            yield from null_targets(field, version, names, where + ".")


def values(struct: StructField, version: int, target: tuple[str, ...] | None, empty: bool) -> dict[str, Any]:
    """Every field of ``struct`` set, each list with one entry; the ``target`` field null
    (``empty``: empty instead)."""
    out = {}
    for field in struct.untagged_fields(version):
        below = target[1:] if target and target[0] == field.name else None
        out[field.name] = value(field, version, below, empty)
    return out


def value(field: BaseField, version: int, target: tuple[str, ...] | None, empty: bool) -> Any:
    if target == ():
        return None if not empty else [] if field.is_array() else type(simple(field))()
    if field.is_struct_array():
        entry = field.array_of
        return [entry.data_class(version=version, **values(entry, version, target, empty))]
    if field.is_array():
        return [simple(field.array_of)]
    if field.is_struct():
        return field.data_class(version=version, **values(field, version, target, empty))
    return simple(field)


def simple(field: BaseField) -> Any:
    codec = field._type
    if isinstance(codec, String):
        return "a"
    if codec is Bytes:
        return b"a"
    if codec is UUIDCodec:
        return uuid.UUID(int=1)
    if codec is Boolean:
        return True
    if codec is Float64:
        return 1.0
    if codec is BitField:
        return {1}
    return 1


def frame(api: KafkaApi, version: int, target: tuple[str, ...] | None, empty: bool = False) -> memoryview:
    request = api.request(version=version, **values(api.request._struct, version, target, empty))
    return memoryview(request_frame(request, version, 7))[4:]


def test_the_generator_covers_every_api_and_the_lists_of_the_issue() -> None:
    names = {api.name.removesuffix("Request") for api in SERVED}
    listed = {"DescribeGroups", "ListGroups", "DeleteGroups", "ListTransactions", "DescribeTransactions"}
    assert listed | {"DescribeUserScramCredentials", "CreateTopics", "ApiVersions"} <= names
    targets = {
        (api.name.removesuffix("Request"), where)
        for api in SERVED
        for version in range(api.min_version, api.max_version + 1)
        for _, where in null_targets(api.request._struct, version)
    }
    assert ("DescribeGroups", "groups") in targets and ("CreateTopics", "topics[].configs") in targets


@pytest.mark.parametrize("api", SERVED, ids=lambda api: api.name)
def test_a_null_where_the_schema_allows_none_is_refused_naming_the_field(api: KafkaApi) -> None:
    dispatcher = KafkaDispatcher(SERVED)
    for version in range(api.min_version, api.max_version + 1):
        whole = frame(api, version, None)
        decoded = api.request.decode(bytes(whole), version=version, header=True)
        assert isinstance(decoded, ApiMessage)  # the generated request is a valid one
        for target, where in null_targets(api.request._struct, version):
            nulled = frame(api, version, target)
            if nulled == frame(api, version, target, empty=True):
                continue  # kafka-python wrote no null there (Metadata v0's topics): see below
            with pytest.raises(FrameError) as refused:
                dispatcher.dispatch(nulled)
            assert f"{where}: null, but the field is not nullable at version {version}" in str(refused.value)


def test_a_null_list_of_topics_in_metadata_v0_is_refused() -> None:
    """kafka-python writes an empty list for a v0 Metadata's null topics (v0: every topic);
    on the wire a null there is malformed (nullable from v1)."""
    api = next(api for api in SERVED if api.request is MetadataRequest)
    empty = bytes(frame(api, 0, ("topics",)))
    assert empty.endswith(b"\x00\x00\x00\x00")
    with pytest.raises(FrameError, match="topics: null, but the field is not nullable at version 0"):
        KafkaDispatcher(SERVED).dispatch(memoryview(empty[:-4] + b"\xff\xff\xff\xff"))


def test_a_failing_handler_is_logged_once_per_interval_and_the_listener_serves_on() -> None:
    """A bug a client can reach (as those nulls did) logged a 1.4 kB traceback at ERROR per
    request, unthrottled."""

    async def failing(request: Any, version: int) -> Any:
        raise RuntimeError("a bug")

    async def main() -> list[dict[str, Any]]:
        listener = Listener(KafkaDispatcher([KafkaApi(MetadataRequest, 0, 12, failing)]), name="kafka")
        port = await listener.start("127.0.0.1", 0, None)
        try:
            with structlog.testing.capture_logs() as logs:
                for _ in range(5):
                    await asyncio.to_thread(_failed_once, port, MetadataRequest(topics=None))
                address = f"127.0.0.1:{port}"
                answer = await asyncio.to_thread(call, address, ApiVersionsRequest(), 0, ApiVersionsResponse)
                assert answer.error_code == 0
            return logs
        finally:
            await listener.close()

    logs = asyncio.run(main())
    failed = [e for e in logs if e["event"] == "a request failed; closing its connection"]
    assert len(failed) == 1 and failed[0]["log_level"] == "error" and failed[0]["left_out"] == 0


def _failed_once(port: int, request: Any) -> None:
    with RawConnection(f"127.0.0.1:{port}") as connection:
        connection.send(request_frame(request, 1, 7))
        assert connection.read_frame() is None  # closed
