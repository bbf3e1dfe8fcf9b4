"""Kafka's WriteTxnMarkers (API 27, versions 0-1, as Kafka 3.9 serves them): a transaction
coordinator's commit or abort markers, written by each partition's leader
(``ReplicaManager.write_txn_markers``) and answered once the ISR holds them.

As Kafka authorizes it: CLUSTER_ACTION on the cluster, which a broker's certificate holds
and ACLs may grant (Kafka's admin ``abortTransaction``, KIP-664, sends it too); a caller
without it gets CLUSTER_AUTHORIZATION_FAILED for every partition, and nothing is written.
With no authorizer every caller may, as on Kafka. raftka's own coordinators use the data
listener, where the request must also name the calling broker at its broker epoch.
"""

from __future__ import annotations

from kafka.protocol.producer.transaction import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from raftka.broker.data_service import BrokerApi
from raftka.broker.kafka.errors import kafka_error
from raftka.broker.kafka.protocol import KafkaApi
from raftka.metadata import acls
from raftka.v1 import broker_pb2, controller_pb2

E = controller_pb2.ErrorCode
Pb = broker_pb2
MR = WriteTxnMarkersResponse.WritableTxnMarkerResult
TR = MR.WritableTxnMarkerTopicResult
PR = TR.WritableTxnMarkerPartitionResult


class MarkerApis:
    def __init__(self, api: BrokerApi) -> None:
        self._api = api

    def apis(self) -> list[KafkaApi]:
        return [KafkaApi(WriteTxnMarkersRequest, 0, 1, self.write_txn_markers)]

    async def write_txn_markers(
        self, request: WriteTxnMarkersRequest, version: int
    ) -> WriteTxnMarkersResponse:
        ours = Pb.WriteTxnMarkersRequest()
        for marker in request.markers:
            ours_marker = ours.markers.add(
                producer_id=marker.producer_id,
                producer_epoch=marker.producer_epoch,
                committed=bool(marker.transaction_result),
                coordinator_epoch=marker.coordinator_epoch,
            )
            for topic in marker.topics:
                ours_marker.topics.add(name=topic.name, partitions=topic.partition_indexes)
        auth = self._api.authorizer
        if auth.allows(auth.caller(), acls.CLUSTER_ACTION, acls.CLUSTER, acls.CLUSTER_NAME):
            answer = await self._api.replicas.write_txn_markers(ours)
        else:
            answer = Pb.WriteTxnMarkersResponse()
            answer.status.error = E.CLUSTER_AUTHORIZATION_FAILED
        return WriteTxnMarkersResponse(markers=_results(ours, answer))


def _results(request: Pb.WriteTxnMarkersRequest, answer: Pb.WriteTxnMarkersResponse) -> list:
    refused = answer.status.error
    if refused != E.NONE:  # every partition asked gets the request's refusal
        answer = Pb.WriteTxnMarkersResponse()
        for marker in request.markers:
            marker_result = answer.markers.add(producer_id=marker.producer_id)
            for topic in marker.topics:
                topic_result = marker_result.topics.add(name=topic.name)
                for partition in topic.partitions:
                    topic_result.partitions.add(partition=partition, error=refused)
    return [
        MR(
            producer_id=marker.producer_id,
            topics=[
                TR(
                    name=topic.name,
                    partitions=[
                        PR(partition_index=p.partition, error_code=kafka_error(p.error))
                        for p in topic.partitions
                    ],
                )
                for topic in marker.topics
            ],
        )
        for marker in answer.markers
    ]
