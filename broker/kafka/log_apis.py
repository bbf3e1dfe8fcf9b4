"""Kafka's InitProducerId, Produce, Fetch, ListOffsets and OffsetForLeaderEpoch, answered
through the same calls as raftka's data protocol (the replica manager, the broker's
producer ids).

Kafka's requests are translated to raftka's (``broker.proto``) and the answers back;
record batches pass through untouched, but for the message sets of Produce v0-2 and
Fetch v0-3, converted as a Kafka 3.x broker converts them (``raftka.records.legacy``).
A Produce's transactional id goes with it (KIP-890's verification of a transactional
batch). A Fetch (v4 on) and a ListOffsets (v2 on) carry the isolation level: a
``read_committed`` fetch reads below the last stable offset and lists the aborted
transactions its records overlap; every fetch answer carries the last stable offset.
Fetches keep incremental sessions (KIP-227, ``raftka.broker.kafka.fetch_sessions``).

A fetch (version 12 on) whose LastFetchedEpoch is not on the leader's log up to its fetch
offset, which is how a consumer learns that a leader change cut records it read, is
answered as Kafka answers it: DivergingEpoch (the largest epoch at most the asked one and
where it ends) and no records; the client moves its position there or raises log
truncation. An epoch older than the whole log is OFFSET_OUT_OF_RANGE.

A fetch from a follower (a replica id, or a ReplicaState) is refused as Kafka refuses one
whose principal lacks ClusterAction: TOPIC_AUTHORIZATION_FAILED for every partition.
raftka's followers use the data listener, so here nobody has it (answered as a consumer's
fetch, it would silently give a would-be follower only what is below the high watermark).

Produce and Fetch count against their client's byte-rate quotas (``throttling``): the
answer says how long the client is throttled, a throttled fetch carries no records.

Limits a Kafka client may ask beyond raftka's (a fetch's bytes and wait, a produce's
timeout) are lowered to raftka's, as a Kafka broker caps them by its own settings;
negative ones are refused by the replica manager's checks.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from google.protobuf.message import Message
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)

from raftka.broker.data_service import BrokerApi, wire_produce_answer
from raftka.broker.kafka.endpoints import kafka_endpoints
from raftka.broker.kafka.errors import (
    INIT_PRODUCER_ID_FENCED_FROM,
    UNKNOWN_TOPIC_ID,
    fenced_error,
    kafka_error,
    kafka_message,
)
from raftka.broker.kafka.fetch_sessions import FetchSessions, refused
from raftka.broker.kafka.protocol import KafkaApi
from raftka.broker.kafka.throttling import Client, throttle
from raftka.broker.kafka.topic_ids import id_bytes
from raftka.broker.replica.manager import FETCH_BYTES_MAX, FETCH_WAIT_MS_MAX, TIMEOUT_MS_MAX
from raftka.broker.replica.partition import PartitionError
from raftka.metadata import acls
from raftka.records.legacy import (
    FETCH_LEGACY_BEFORE,
    MAGIC_FOR_FETCH,
    PRODUCE_LEGACY_BEFORE,
    LegacyError,
    down_convert,
    up_convert,
)
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.server import CloseConnection, current_peer

E = controller_pb2.ErrorCode
Pb = broker_pb2
PR = ProduceResponse.TopicProduceResponse.PartitionProduceResponse
FR = FetchResponse.FetchableTopicResponse.PartitionData
LR = ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
OR = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult.EpochEndOffset
# where a leader hint goes: the errors that mean "ask another broker"
_LEADER_MOVED = frozenset((E.NOT_LEADER_OR_FOLLOWER, E.FENCED_LEADER_EPOCH, E.UNKNOWN_LEADER_EPOCH))
TOPIC_IDS_FROM = 13  # Produce and Fetch name topics by id from version 13
LAST_FETCHED_EPOCH_FROM = 12  # Fetch carries LastFetchedEpoch, answered by DivergingEpoch (KIP-320)


class LogApis:
    def __init__(self, api: BrokerApi) -> None:
        self._api = api
        self._sessions = FetchSessions()

    def apis(self) -> list[KafkaApi]:
        return [
            KafkaApi(InitProducerIdRequest, 0, 5, self.init_producer_id),  # 6: two-phase commit
            KafkaApi(ProduceRequest, 0, 12, self.produce),
            KafkaApi(FetchRequest, 0, 17, self.fetch),
            KafkaApi(ListOffsetsRequest, 0, 9, self.list_offsets),
            KafkaApi(OffsetForLeaderEpochRequest, 0, 4, self.offset_for_leader_epoch),
        ]

    # produce ----------------------------------------------------------------------------

    async def init_producer_id(self, request: InitProducerIdRequest, version: int) -> InitProducerIdResponse:
        """An idempotent producer's id (a new one each time, as Kafka gives a producer
        without a transactional id), or a transactional id's next epoch (its coordinator's)."""
        ours = Pb.InitProducerIdRequest(
            transactional_id=request.transactional_id or "",
            transaction_timeout_ms=request.transaction_timeout_ms,
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
        )
        answer = await self._api.init_producer_id(ours)
        return InitProducerIdResponse(
            throttle_time_ms=0,
            error_code=fenced_error(answer.status.error, version, INIT_PRODUCER_ID_FENCED_FROM),
            producer_id=answer.producer_id,
            producer_epoch=answer.producer_epoch,
        )

    async def produce(self, request: ProduceRequest, version: int) -> ProduceResponse | None:
        ours = Pb.ProduceRequest(acks=request.acks, timeout_ms=min(request.timeout_ms, TIMEOUT_MS_MAX))
        unconverted: list[tuple[str, int, str]] = []  # Produce v0-2: message sets that do not convert
        for topic in request.topic_data:
            ours_topic = ours.topics.add(name=topic.name)
            for data in topic.partition_data:
                records = data.records or b""
                if version < PRODUCE_LEGACY_BEFORE:
                    records, why = self._up_converted(records)
                    if why is not None:
                        unconverted.append((topic.name, data.index, why))
                        continue
                ours_topic.partitions.add(partition=data.index, records=records)
        if unconverted and request.acks == 0:
            raise CloseConnection(f"acks=0 produce refused: {unconverted[0][2]}")
        ours.transactional_id = request.transactional_id or ""
        answer = await self._api.produce(ours)
        sent = sum(len(p.records) for t in ours.topics for p in t.partitions)
        throttle_ms = throttle(self._api.quotas.produce, Client(request), sent)
        answer = wire_produce_answer(ours, answer)
        if answer is None:
            return None
        response = self._produce_answer(ours, answer, throttle_ms)
        for name, index, why in unconverted:
            _answer_topic(response, name).partition_responses.append(
                _produce_error(index, E.CORRUPT_MESSAGE, why)
            )
        return response

    def _up_converted(self, message_set: bytes) -> tuple[bytes, str | None]:
        """A v0-2 produce's message set as a v2 batch, or why it cannot be one."""
        try:
            return up_convert(
                message_set,
                now_ms=int(time.time() * 1000),
                uncompressed_bytes_max=self._api.replicas.config.uncompressed_batch_bytes_max,
            ), None
        except LegacyError as e:
            return b"", f"records: {e}"

    def _produce_answer(
        self, request: Pb.ProduceRequest, answer: Pb.ProduceResponse, throttle_ms: int
    ) -> ProduceResponse:
        leaders: set[int] = set()
        topics = []
        for topic, outcomes in _outcomes(request, answer):
            partitions = []
            for result, code, message in outcomes:
                if code == E.NONE:
                    answered = PR(
                        index=result.partition,
                        error_code=0,
                        base_offset=result.base_offset,
                        log_append_time_ms=result.log_append_time_ms,
                        log_start_offset=result.log_start_offset,
                        record_errors=[],
                        error_message=None,
                    )
                else:
                    answered = _produce_error(result.partition, code, message)
                answered.current_leader = _leader_hint(result, code, leaders, PR)
                partitions.append(answered)
            topics.append(
                ProduceResponse.TopicProduceResponse(name=topic.name, partition_responses=partitions)
            )
        return ProduceResponse(
            responses=topics,
            throttle_time_ms=throttle_ms,
            node_endpoints=self._node_endpoints(leaders, ProduceResponse),
        )

    # fetch ------------------------------------------------------------------------------

    async def fetch(self, request: FetchRequest, version: int) -> FetchResponse:
        plan = self._sessions.plan(request, version, current_peer.get())
        if plan.error_code:
            return refused(plan)
        by_id = version >= TOPIC_IDS_FROM
        image = self._api.image
        client = Client(request)
        quota_bytes = self._api.quotas.fetch.most_without_throttle(client.user, client.client_id)
        ours = Pb.FetchRequest(
            replica_id=-1,
            max_wait_ms=min(request.max_wait_ms, FETCH_WAIT_MS_MAX),
            min_bytes=min(request.min_bytes, FETCH_BYTES_MAX),
            max_bytes=int(min(request.max_bytes, FETCH_BYTES_MAX, quota_bytes)),
            isolation_level=request.isolation_level,
        )
        unknown_ids: list[FetchResponse.FetchableTopicResponse] = []
        for topic in plan.topics:
            name = topic.topic
            if by_id:
                known = image.topics_by_id.get(id_bytes(topic.topic_id))
                if known is None:
                    unknown_ids.append(_unknown_topic_id(topic))
                    continue
                name = known.name
            ours_topic = ours.topics.add(
                name=name, topic_id=image.topic_ids_by_name.get(name, b"") if by_id else b""
            )
            for data in topic.partitions:
                partition = ours_topic.partitions.add(
                    partition=data.partition,
                    fetch_offset=data.fetch_offset,
                    partition_max_bytes=min(data.partition_max_bytes, FETCH_BYTES_MAX),
                )
                if data.current_leader_epoch >= 0:
                    partition.current_leader_epoch = data.current_leader_epoch
                if version >= LAST_FETCHED_EPOCH_FROM and data.last_fetched_epoch >= 0:
                    partition.last_fetched_epoch = data.last_fetched_epoch
        replica_id = _replica_id(request)
        if replica_id >= 0:
            answer = Pb.FetchResponse()  # every partition refused, nothing read
            answer.status.error = E.TOPIC_AUTHORIZATION_FAILED
            answer.status.message = (
                f"replica_id {replica_id}: a follower fetch needs ClusterAction; raftka's followers "
                "fetch on the data listener, so no principal has it here"
            )
        else:
            answer = await self._api.fetch(ours)
        sent = sum(len(p.records) for t in answer.topics for p in t.partitions)
        throttle_ms = throttle(self._api.quotas.fetch, client, sent)
        if throttle_ms > 0:  # Kafka's throttled fetch: no records, their bytes taken back
            self._api.quotas.fetch.unrecord(client.user, client.client_id, sent)
            return FetchResponse(throttle_time_ms=throttle_ms, error_code=0, session_id=0, responses=[])
        leaders: set[int] = set()
        topics = []
        for topic, outcomes in _outcomes(ours, answer):
            partitions = []
            for asked, (result, code, _) in zip(topic.partitions, outcomes, strict=True):
                if code != E.NONE:
                    failed = _fetch_error(result.partition, kafka_error(code))
                    failed.current_leader = _leader_hint(result, code, leaders, FR)
                    partitions.append(failed)
                    continue
                answered = FR(
                    partition_index=result.partition,
                    error_code=0,
                    high_watermark=result.high_watermark,
                    last_stable_offset=result.last_stable_offset,
                    log_start_offset=result.log_start_offset,
                    aborted_transactions=[
                        FR.AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
                        for t in result.aborted_transactions
                    ],
                    preferred_read_replica=-1,
                    records=result.records,
                )
                if version < FETCH_LEGACY_BEFORE:
                    answered.records = down_convert(
                        result.records,
                        magic=MAGIC_FOR_FETCH[version],
                        from_offset=asked.fetch_offset,
                        max_bytes=asked.partition_max_bytes,
                    )
                if result.HasField("diverging_epoch"):
                    answered.diverging_epoch = FR.EpochEndOffset(
                        epoch=result.diverging_epoch.epoch, end_offset=result.diverging_epoch.end_offset
                    )
                partitions.append(answered)
            topic_id = uuid.UUID(bytes=topic.topic_id) if by_id else None
            topics.append(
                FetchResponse.FetchableTopicResponse(
                    topic=topic.name, topic_id=topic_id, partitions=partitions
                )
            )
        return FetchResponse(
            throttle_time_ms=0,
            error_code=0,
            session_id=plan.session_id,
            responses=self._sessions.answered(plan, topics + unknown_ids, by_id),
            node_endpoints=self._node_endpoints(leaders, FetchResponse),
        )

    # offsets ----------------------------------------------------------------------------

    async def list_offsets(self, request: ListOffsetsRequest, version: int) -> ListOffsetsResponse:
        ours = Pb.ListOffsetsRequest(isolation_level=request.isolation_level or 0)
        for topic in request.topics:
            ours_topic = ours.topics.add(name=topic.name)
            for data in topic.partitions:
                partition = ours_topic.partitions.add(
                    partition=data.partition_index, timestamp=data.timestamp
                )
                if data.current_leader_epoch >= 0:
                    partition.current_leader_epoch = data.current_leader_epoch
        answer = await self._api.list_offsets(ours)
        topics = []
        for topic, outcomes in _outcomes(ours, answer):
            partitions = [
                LR(
                    partition_index=result.partition,
                    error_code=kafka_error(code),
                    timestamp=result.timestamp if code == E.NONE else -1,
                    offset=result.offset if code == E.NONE else -1,
                    leader_epoch=result.leader_epoch if code == E.NONE else -1,
                    # version 0 lists offsets instead (at most one here: the offset found)
                    old_style_offsets=[result.offset] if code == E.NONE and result.offset >= 0 else [],
                )
                for result, code, _ in outcomes
            ]
            topics.append(
                ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=partitions)
            )
        return ListOffsetsResponse(throttle_time_ms=0, topics=topics)

    async def offset_for_leader_epoch(
        self, request: OffsetForLeaderEpochRequest, version: int
    ) -> OffsetForLeaderEpochResponse:
        replicas = self._api.replicas
        auth = self._api.authorizer
        describable = auth.allowed_names(
            auth.caller(), acls.DESCRIBE, acls.TOPIC, (t.topic for t in request.topics)
        )
        topics = []
        for topic in request.topics:
            partitions = []
            for data in topic.partitions:
                if topic.topic not in describable:
                    epoch, end, code = -1, -1, kafka_error(E.TOPIC_AUTHORIZATION_FAILED)
                    partitions.append(
                        OR(partition=data.partition, error_code=code, leader_epoch=epoch, end_offset=end)
                    )
                    continue
                try:
                    epoch, end = replicas.end_offset_for_epoch(
                        topic.topic, data.partition, data.current_leader_epoch, data.leader_epoch
                    )
                except PartitionError as e:
                    epoch, end, code = -1, -1, kafka_error(e.code)
                else:
                    code = 0
                partitions.append(
                    OR(partition=data.partition, error_code=code, leader_epoch=epoch, end_offset=end)
                )
            topics.append(
                OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(
                    topic=topic.topic, partitions=partitions
                )
            )
        return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)

    def _node_endpoints(self, broker_ids: set[int], response: type) -> list:
        """Kafka's leader hints (KIP-951): where each leader named in an error listens."""
        endpoints = kafka_endpoints(self._api.image)
        return [
            response.NodeEndpoint(node_id=e.broker_id, host=e.host, port=e.port, rack=e.rack)
            for i in sorted(broker_ids)
            if (e := endpoints.get(i)) is not None
        ]


def _outcomes(request: Message, answer: Message) -> Iterator[tuple[Any, list[tuple[Any, int, str]]]]:
    """Each asked topic with (result, error, message) per partition: the answer's own, or
    the request's refusal for every partition (``result`` is then what was asked, which
    names the partition)."""
    refused = answer.status
    if refused.error != E.NONE:
        for topic in request.topics:
            yield topic, [(asked, refused.error, refused.message) for asked in topic.partitions]
        return
    for topic, answered in zip(request.topics, answer.topics, strict=True):
        yield topic, [(result, result.error, result.message) for result in answered.partitions]


def _replica_id(request: FetchRequest) -> int:
    """The broker a Kafka fetch says it comes from, -1 for a consumer: ReplicaId before
    version 15, ReplicaState from 15."""
    state = request.replica_state
    return request.replica_id if state is None else state.replica_id


def _leader_hint(result: Any, code: int, leaders: set[int], partition_type: type) -> Any:
    """Where the partition's leader is for an error that means "ask another broker"
    (KIP-951), None otherwise; the leader joins ``leaders``, whose endpoints the answer lists."""
    if code not in _LEADER_MOVED or getattr(result, "leader_id", -1) < 0:
        return None
    leaders.add(result.leader_id)
    return partition_type.LeaderIdAndEpoch(leader_id=result.leader_id, leader_epoch=result.leader_epoch)


def _produce_error(partition: int, code: int, message: str) -> PR:
    return PR(
        index=partition,
        error_code=kafka_error(code),
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        record_errors=[],
        error_message=kafka_message(code, message),
    )


def _answer_topic(response: ProduceResponse, name: str) -> ProduceResponse.TopicProduceResponse:
    """The topic's entry in ``response``, added if none of its partitions was produced."""
    for topic in response.responses:
        if topic.name == name:
            return topic
    topic = ProduceResponse.TopicProduceResponse(name=name, partition_responses=[])
    response.responses.append(topic)
    return topic


def _fetch_error(partition: int, error_code: int) -> FR:
    return FR(
        partition_index=partition,
        error_code=error_code,
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=b"",  # as Kafka's MemoryRecords.EMPTY: librdkafka refuses a null record set
    )


def _unknown_topic_id(topic: FetchRequest.FetchTopic) -> FetchResponse.FetchableTopicResponse:
    partitions = [_fetch_error(p.partition, UNKNOWN_TOPIC_ID) for p in topic.partitions]
    return FetchResponse.FetchableTopicResponse(topic_id=topic.topic_id, partitions=partitions)
