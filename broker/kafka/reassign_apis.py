"""Kafka's AlterPartitionReassignments (45) and ListPartitionReassignments (46), at the
versions Kafka 3.9 serves, forwarded to the active controller as CreateTopics is (so
``kafka-reassign-partitions`` and ``AdminClient.alter_partition_reassignments`` work).

The controller judges them as the client's principal (ALTER on the cluster to change,
DESCRIBE to list, Kafka's rule) and answers per partition (``raftka.metadata.reassign_ops``).
"""

from __future__ import annotations

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

from raftka.broker.data_service import BrokerApi
from raftka.broker.kafka.errors import kafka_error, kafka_message
from raftka.broker.kafka.protocol import KafkaApi
from raftka.v1 import controller_pb2

C = controller_pb2
_Topic = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
_Ongoing = ListPartitionReassignmentsResponse.OngoingTopicReassignment


class ReassignApis:
    def __init__(self, api: BrokerApi) -> None:
        self._api = api

    def apis(self) -> list[KafkaApi]:
        return [
            KafkaApi(AlterPartitionReassignmentsRequest, 0, 0, self.alter_partition_reassignments),
            KafkaApi(ListPartitionReassignmentsRequest, 0, 0, self.list_partition_reassignments),
        ]

    async def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest, version: int
    ) -> AlterPartitionReassignmentsResponse:
        ours = C.AlterPartitionReassignmentsRequest()
        for topic in request.topics:
            asked = ours.topics.add(name=topic.name)
            for partition in topic.partitions:
                target = asked.partitions.add(partition=partition.partition_index)
                if partition.replicas is not None:
                    target.replicas.SetInParent()
                    target.replicas.ids.extend(partition.replicas)
        answer = await self._api.forward(
            lambda stub: stub.AlterPartitionReassignments, ours, C.AlterPartitionReassignmentsResponse
        )
        status = answer.status
        by_topic: dict[str, list[_Topic.ReassignablePartitionResponse]] = {}
        for result in answer.partitions:
            by_topic.setdefault(result.topic, []).append(
                _Topic.ReassignablePartitionResponse(
                    partition_index=result.partition,
                    error_code=kafka_error(result.error),
                    error_message=kafka_message(result.error, result.message),
                )
            )
        return AlterPartitionReassignmentsResponse(
            throttle_time_ms=0,
            error_code=kafka_error(status.error),
            error_message=kafka_message(status.error, status.message),
            responses=[_Topic(name=name, partitions=partitions) for name, partitions in by_topic.items()],
        )

    async def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest, version: int
    ) -> ListPartitionReassignmentsResponse:
        ours = C.ListPartitionReassignmentsRequest()
        for topic in request.topics or ():
            ours.topics.add(topic=topic.name, partitions=list(topic.partition_indexes))
        answer = await self._api.forward(
            lambda stub: stub.ListPartitionReassignments, ours, C.ListPartitionReassignmentsResponse
        )
        status = answer.status
        by_topic: dict[str, list[_Ongoing.OngoingPartitionReassignment]] = {}
        for ongoing in answer.reassignments:
            by_topic.setdefault(ongoing.topic, []).append(
                _Ongoing.OngoingPartitionReassignment(
                    partition_index=ongoing.partition,
                    replicas=list(ongoing.replicas),
                    adding_replicas=list(ongoing.adding_replicas),
                    removing_replicas=list(ongoing.removing_replicas),
                )
            )
        return ListPartitionReassignmentsResponse(
            throttle_time_ms=0,
            error_code=kafka_error(status.error),
            error_message=kafka_message(status.error, status.message),
            topics=[_Ongoing(name=name, partitions=partitions) for name, partitions in by_topic.items()],
        )
