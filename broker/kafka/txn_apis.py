"""Kafka's transaction APIs on the Kafka listener: AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn, DescribeTransactions and ListTransactions, answered through
``BrokerApi`` by the transaction coordinator (``raftka.broker.transactions``) and, for
TxnOffsetCommit, the group coordinator. InitProducerId is in ``log_apis``.

What is translated here is each version's shape: AddPartitionsToTxn from version 4
carries several transactions (KIP-890: brokers verify with it), and versions before
PRODUCER_FENCED existed (2 for most, 4 for InitProducerId) hear INVALID_PRODUCER_EPOCH
instead, as Kafka's KafkaApis answers them.
"""

from __future__ import annotations

from kafka.protocol.admin import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from raftka.broker.data_service import BrokerApi
from raftka.broker.kafka.errors import fenced_error, kafka_error
from raftka.broker.kafka.protocol import KafkaApi
from raftka.v1 import broker_pb2, controller_pb2

E = controller_pb2.ErrorCode
Pb = broker_pb2
C = controller_pb2
BATCHED_FROM = 4  # AddPartitionsToTxn versions with a list of transactions
APR = AddPartitionsToTxnResponse
APR_TOPIC = APR.AddPartitionsToTxnTopicResult
TOR_TOPIC = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic


class TxnApis:
    def __init__(self, api: BrokerApi) -> None:
        self._api = api

    def apis(self) -> list[KafkaApi]:
        return [
            KafkaApi(AddPartitionsToTxnRequest, 0, 5, self.add_partitions_to_txn),
            KafkaApi(AddOffsetsToTxnRequest, 0, 4, self.add_offsets_to_txn),
            KafkaApi(EndTxnRequest, 0, 4, self.end_txn),
            KafkaApi(TxnOffsetCommitRequest, 0, 4, self.txn_offset_commit),
            KafkaApi(DescribeTransactionsRequest, 0, 0, self.describe_transactions),
            KafkaApi(ListTransactionsRequest, 0, 1, self.list_transactions),
        ]

    async def add_partitions_to_txn(self, request: AddPartitionsToTxnRequest, version: int) -> APR:
        if version < BATCHED_FROM:
            ours = Pb.AddPartitionsToTxnRequest(
                transactional_id=request.v3_and_below_transactional_id,
                producer_id=request.v3_and_below_producer_id,
                producer_epoch=request.v3_and_below_producer_epoch,
                topics=[
                    Pb.TxnTopic(name=t.name, partitions=t.partitions) for t in request.v3_and_below_topics
                ],
            )
            answer = await self._api.add_partitions_to_txn(ours)
            return APR(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(answer, version))
        results = []
        for txn in request.transactions:
            ours = Pb.AddPartitionsToTxnRequest(
                transactional_id=txn.transactional_id,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                topics=[Pb.TxnTopic(name=t.name, partitions=t.partitions) for t in txn.topics],
                verify_only=txn.verify_only,
            )
            answer = await self._api.add_partitions_to_txn(ours)
            results.append(
                APR.AddPartitionsToTxnResult(
                    transactional_id=txn.transactional_id, topic_results=_topic_results(answer, version)
                )
            )
        return APR(throttle_time_ms=0, error_code=0, results_by_transaction=results)

    async def add_offsets_to_txn(
        self, request: AddOffsetsToTxnRequest, version: int
    ) -> AddOffsetsToTxnResponse:
        answer = await self._api.add_offsets_to_txn(
            Pb.AddOffsetsToTxnRequest(
                transactional_id=request.transactional_id,
                producer_id=request.producer_id,
                producer_epoch=request.producer_epoch,
                group_id=request.group_id,
            )
        )
        return AddOffsetsToTxnResponse(
            throttle_time_ms=0, error_code=fenced_error(answer.status.error, version)
        )

    async def end_txn(self, request: EndTxnRequest, version: int) -> EndTxnResponse:
        answer = await self._api.end_txn(
            Pb.EndTxnRequest(
                transactional_id=request.transactional_id,
                producer_id=request.producer_id,
                producer_epoch=request.producer_epoch,
                committed=request.committed,
            )
        )
        return EndTxnResponse(throttle_time_ms=0, error_code=fenced_error(answer.status.error, version))

    async def txn_offset_commit(
        self, request: TxnOffsetCommitRequest, version: int
    ) -> TxnOffsetCommitResponse:
        offsets = C.OffsetCommitRequest(group=request.group_id, member_id=request.member_id or "")
        if request.generation_id >= 0 or request.member_id:
            offsets.generation_id = request.generation_id
        if request.group_instance_id is not None:
            offsets.group_instance_id = request.group_instance_id
        for topic in request.topics:
            offsets.topics.add(
                topic=topic.name,
                partitions=[
                    C.OffsetCommitPartition(
                        partition=p.partition_index,
                        offset=p.committed_offset,
                        metadata=p.committed_metadata or "",
                    )
                    for p in topic.partitions
                ],
            )
        answer = await self._api.txn_offset_commit(
            C.TxnOffsetCommitRequest(
                transactional_id=request.transactional_id,
                producer_id=request.producer_id,
                producer_epoch=request.producer_epoch,
                offsets=offsets,
            )
        )
        status = answer.status.error
        errors = {(r.topic, r.partition): r.error for r in answer.partitions}
        return TxnOffsetCommitResponse(
            throttle_time_ms=0,
            topics=[
                TOR_TOPIC(
                    name=topic.name,
                    partitions=[
                        TOR_TOPIC.TxnOffsetCommitResponsePartition(
                            partition_index=p.partition_index,
                            error_code=fenced_error(
                                status
                                if status != E.NONE
                                else errors.get((topic.name, p.partition_index), E.NONE),
                                version,
                            ),
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ],
        )

    async def describe_transactions(
        self, request: DescribeTransactionsRequest, version: int
    ) -> DescribeTransactionsResponse:
        answer = await self._api.describe_transactions(
            Pb.DescribeTransactionsRequest(transactional_ids=request.transactional_ids)
        )
        TS = DescribeTransactionsResponse.TransactionState
        return DescribeTransactionsResponse(
            throttle_time_ms=0,
            transaction_states=[
                TS(
                    error_code=kafka_error(d.error),
                    transactional_id=d.transactional_id,
                    transaction_state=d.state,
                    transaction_timeout_ms=d.timeout_ms,
                    transaction_start_time_ms=d.start_time_ms,
                    producer_id=d.producer_id,
                    producer_epoch=d.producer_epoch,
                    topics=[TS.TopicData(topic=t.name, partitions=t.partitions) for t in d.topics],
                )
                for d in answer.transactions
            ],
        )

    async def list_transactions(
        self, request: ListTransactionsRequest, version: int
    ) -> ListTransactionsResponse:
        answer = await self._api.list_transactions(
            Pb.ListTransactionsRequest(
                states=request.state_filters,
                producer_ids=request.producer_id_filters,
                duration_filter_ms=request.duration_filter if version >= 1 else -1,
            )
        )
        TS = ListTransactionsResponse.TransactionState
        return ListTransactionsResponse(
            throttle_time_ms=0,
            error_code=kafka_error(answer.status.error),
            unknown_state_filters=list(answer.unknown_state_filters),
            transaction_states=[
                TS(transactional_id=t.transactional_id, producer_id=t.producer_id, transaction_state=t.state)
                for t in answer.transactions
            ],
        )


def _topic_results(answer: Pb.AddPartitionsToTxnResponse, version: int) -> list[APR_TOPIC]:
    return [
        APR_TOPIC(
            name=topic.name,
            results_by_partition=[
                APR_TOPIC.AddPartitionsToTxnPartitionResult(
                    partition_index=p.partition, partition_error_code=fenced_error(p.error, version)
                )
                for p in topic.partitions
            ],
        )
        for topic in answer.topics
    ]
