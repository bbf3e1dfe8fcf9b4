"""The Controller gRPC service: each RPC handed to the QuorumController.

The service adds only the safety net: a request that makes the controller raise (a bug,
never bad input, which the controller answers with an error code) is logged and
answered UNKNOWN_SERVER_ERROR, so a bad request cannot take the node down and the
client gets a typed answer rather than a broken call.

Listings (every topic, every committed offset of a group) hold only the topics the caller
may DESCRIBE, and every topic's configs only those it may DESCRIBE_CONFIGS
(``raftka.metadata.authorization.may``), as Kafka's Metadata answers; a request naming
topics is judged whole before it gets here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import structlog

from raftka.metadata.controller import QuorumController
from raftka.v1 import controller_pb2, controller_pb2_grpc

log = structlog.get_logger("raftka.metadata.service")

Pb = controller_pb2


class ControllerService(controller_pb2_grpc.ControllerServicer):
    def __init__(
        self,
        controller: QuorumController,
        describable: Callable[[str], bool] = lambda topic: True,
        configs_describable: Callable[[str], bool] = lambda topic: True,
    ) -> None:
        self._c = controller
        self._describable = describable
        self._configs_describable = configs_describable

    async def _call(self, handler: Callable[[Any], Awaitable[Any]], request: Any, response_type: type) -> Any:
        try:
            return await handler(request)
        except Exception as e:
            log.exception("controller request failed", rpc=type(request).__name__)
            status = Pb.Status(error=Pb.UNKNOWN_SERVER_ERROR, message=f"{type(e).__name__}: {e}")
            return response_type(status=status)

    async def CreateTopics(self, request: Pb.CreateTopicsRequest, context: grpc.aio.ServicerContext) -> Any:
        return await self._call(self._c.create_topics, request, Pb.CreateTopicsResponse)

    async def DeleteTopics(self, request: Pb.DeleteTopicsRequest, context: grpc.aio.ServicerContext) -> Any:
        return await self._call(self._c.delete_topics, request, Pb.DeleteTopicsResponse)

    async def CreatePartitions(
        self, request: Pb.CreatePartitionsRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(self._c.create_partitions, request, Pb.CreatePartitionsResponse)

    async def ListTopics(self, request: Pb.ListTopicsRequest, context: grpc.aio.ServicerContext) -> Any:
        response = await self._call(self._c.list_topics, request, Pb.ListTopicsResponse)
        _keep(response.topics, lambda t: self._describable(t.name))
        return response

    async def DescribeTopics(
        self, request: Pb.DescribeTopicsRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        response = await self._call(self._c.describe_topics, request, Pb.DescribeTopicsResponse)
        if not request.names:
            _keep(response.topics, lambda t: self._describable(t.name))
        return response

    async def DescribeConfigs(
        self, request: Pb.DescribeConfigsRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        response = await self._call(self._c.describe_configs, request, Pb.DescribeConfigsResponse)
        if not request.topics:  # every topic's: only those it may DESCRIBE_CONFIGS
            _keep(response.topics, lambda t: self._configs_describable(t.topic))
        return response

    async def AlterConfigs(self, request: Pb.AlterConfigsRequest, context: grpc.aio.ServicerContext) -> Any:
        return await self._call(self._c.alter_configs, request, Pb.AlterConfigsResponse)

    async def BrokerRegistration(
        self, request: Pb.BrokerRegistrationRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(self._c.register_broker, request, Pb.BrokerRegistrationResponse)

    async def BrokerHeartbeat(
        self, request: Pb.BrokerHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(self._c.broker_heartbeat, request, Pb.BrokerHeartbeatResponse)

    async def UnregisterBroker(
        self, request: Pb.UnregisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(self._c.unregister_broker, request, Pb.UnregisterBrokerResponse)

    async def DescribeCluster(
        self, request: Pb.DescribeClusterRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(self._c.describe_cluster, request, Pb.DescribeClusterResponse)

    async def AlterPartition(
        self, request: Pb.AlterPartitionRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(self._c.alter_partition, request, Pb.AlterPartitionResponse)

    async def ElectLeaders(self, request: Pb.ElectLeadersRequest, context: grpc.aio.ServicerContext) -> Any:
        return await self._call(self._c.elect_leaders, request, Pb.ElectLeadersResponse)

    async def AlterPartitionReassignments(
        self, request: Pb.AlterPartitionReassignmentsRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(
            self._c.alter_partition_reassignments, request, Pb.AlterPartitionReassignmentsResponse
        )

    async def ListPartitionReassignments(
        self, request: Pb.ListPartitionReassignmentsRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(
            self._c.list_partition_reassignments, request, Pb.ListPartitionReassignmentsResponse
        )

    async def AllocateProducerIds(
        self, request: Pb.AllocateProducerIdsRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(self._c.allocate_producer_ids, request, Pb.AllocateProducerIdsResponse)

    async def OffsetCommit(self, request: Pb.OffsetCommitRequest, context: grpc.aio.ServicerContext) -> Any:
        return await self._call(self._c.commit_offsets, request, Pb.OffsetCommitResponse)

    async def OffsetFetch(self, request: Pb.OffsetFetchRequest, context: grpc.aio.ServicerContext) -> Any:
        response = await self._call(self._c.fetch_offsets, request, Pb.OffsetFetchResponse)
        if not request.topics:
            _keep(response.offsets, lambda o: self._describable(o.topic))
        return response

    async def CommitGroupOffsets(
        self, request: Pb.CommitGroupOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(self._c.commit_group_offsets, request, Pb.CommitGroupOffsetsResponse)

    async def RecordGroupRebalance(
        self, request: Pb.RecordGroupRebalanceRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(self._c.record_group_rebalance, request, Pb.RecordGroupRebalanceResponse)

    async def DeleteGroups(self, request: Pb.DeleteGroupsRequest, context: grpc.aio.ServicerContext) -> Any:
        return await self._call(self._c.delete_groups, request, Pb.DeleteGroupsResponse)

    async def WriteTransaction(
        self, request: Pb.WriteTransactionRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(self._c.write_transaction, request, Pb.WriteTransactionResponse)

    async def TxnOffsetCommit(
        self, request: Pb.TxnOffsetCommitRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(self._c.txn_offset_commit, request, Pb.OffsetCommitResponse)

    async def CreateAcls(self, request: Pb.CreateAclsRequest, context: grpc.aio.ServicerContext) -> Any:
        return await self._call(self._c.create_acls, request, Pb.CreateAclsResponse)

    async def DeleteAcls(self, request: Pb.DeleteAclsRequest, context: grpc.aio.ServicerContext) -> Any:
        return await self._call(self._c.delete_acls, request, Pb.DeleteAclsResponse)

    async def DescribeAcls(self, request: Pb.DescribeAclsRequest, context: grpc.aio.ServicerContext) -> Any:
        return await self._call(self._c.describe_acls, request, Pb.DescribeAclsResponse)

    async def AlterClientQuotas(
        self, request: Pb.AlterClientQuotasRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(self._c.alter_client_quotas, request, Pb.AlterClientQuotasResponse)

    async def DescribeClientQuotas(
        self, request: Pb.DescribeClientQuotasRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(self._c.describe_client_quotas, request, Pb.DescribeClientQuotasResponse)

    async def AlterUserScramCredentials(
        self, request: Pb.AlterUserScramCredentialsRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(
            self._c.alter_user_scram_credentials, request, Pb.AlterUserScramCredentialsResponse
        )

    async def DescribeUserScramCredentials(
        self, request: Pb.DescribeUserScramCredentialsRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        return await self._call(
            self._c.describe_user_scram_credentials, request, Pb.DescribeUserScramCredentialsResponse
        )


def _keep(items: Any, wanted: Callable[[Any], bool]) -> None:
    """Leave in the repeated field ``items`` only those ``wanted``."""
    kept = [item for item in items if wanted(item)]
    del items[:]
    items.extend(kept)
