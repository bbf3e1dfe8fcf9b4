"""The standard gRPC health service and server reflection on a node's gRPC server.

Health (``grpc.health.v1.Health``) is what Docker's ``HEALTHCHECK`` (``raftka health``),
Kubernetes' ``grpc`` probes and load balancers ask. Every name the server answers for,
"" (the server as a whole) and each raftka service by its full name, has one status,
NOT_SERVING until the node says it serves: a controller once its raft node has caught up
(``RaftNode.caught_up``: in the quorum with a live leader, and every record that leader
said was committed applied), a broker once it is registered and unfenced. ``shut_down``
sets NOT_SERVING for good; a node calls it first thing when it starts shutting down, so
traffic leaves before the listeners close.

The messages and stubs are grpc_health's; the servicer is ours because the aio one sets
a status with a coroutine, and a node's status changes in raft's callbacks, which run on
the loop and must not await.

Reflection (``grpc.reflection.v1alpha``) lists the services and serves their
descriptors from the generated modules, so ``grpcurl`` needs no .proto files.

Both are open to every certificate of the cluster's CA (``HEALTH_RULES``): probes must
work without ACLs, health says only SERVING or NOT_SERVING, and reflection serves the
descriptors every raftka release publishes in ``proto/``, nothing of the cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import grpc
import structlog
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from raftka.security.grpc_gate import Rule, anyone, method_names
from raftka.v1 import raft_pb2

Status = health_pb2.HealthCheckResponse.ServingStatus
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# Every node's server has the Raft service (the transport serves it).
RAFT_SERVICE = raft_pb2.DESCRIPTOR.services_by_name["Raft"]
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"]
REFLECTION_SERVICE = reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"]
HEALTH_RULES: dict[str, Rule] = {
    method: anyone for service in (HEALTH_SERVICE, REFLECTION_SERVICE) for method in method_names(service)
}

log = structlog.get_logger("raftka.node.health")


class NodeHealth:
    """One node's health status and reflection, added to its server with ``add_to_server``."""

    def __init__(self, node_id: int, services: Iterable[ServiceDescriptor]) -> None:
        """``services``: the raftka services the node's server has besides Raft."""
        names = tuple(dict.fromkeys(s.full_name for s in (RAFT_SERVICE, *services)))
        self._servicer = _HealthServicer(("", *names))
        self._reflected = (*names, health.SERVICE_NAME, reflection.SERVICE_NAME)
        self._shut_down = False
        self._served = False
        self._log = log.bind(node_id=node_id)

    @property
    def serving(self) -> bool:
        return self._servicer.status == SERVING

    def add_to_server(self, server: grpc.aio.Server) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, server)
        reflection.enable_server_reflection(self._reflected, server)

    def set_serving(self, serving: bool) -> None:
        """Follow the node's state; ignored once shut down."""
        if self._shut_down or serving == self.serving:
            return
        self._servicer.set_status(SERVING if serving else NOT_SERVING)
        # The first SERVING is news; later flips (a follower applying a large commit in
        # slices is briefly behind) would flood INFO.
        first = serving and not self._served
        self._served |= serving
        (self._log.info if first else self._log.debug)(
            "health", status="SERVING" if serving else "NOT_SERVING"
        )

    def shut_down(self) -> None:
        """NOT_SERVING from now on, whatever the node says later."""
        if self._shut_down:
            return
        self._shut_down = True
        self._servicer.set_status(NOT_SERVING)
        self._log.info("health", status="NOT_SERVING", reason="shutting down")


class _HealthServicer(health_pb2_grpc.HealthServicer):
    """Check and Watch over one status shared by every name in ``names``."""

    def __init__(self, names: Iterable[str]) -> None:
        self._names = frozenset(names)
        self.status: Status = NOT_SERVING
        self._changed = asyncio.Event()  # set, and replaced, at every change

    def set_status(self, status: Status) -> None:
        self.status = status
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        if request.service not in self._names:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"service: unknown here, got {request.service!r}")
        return health_pb2.HealthCheckResponse(status=self.status)

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext) -> None:
        """The status now, then each change, until the caller hangs up (bounded by the
        server's call budget: each watch is one call in progress)."""
        known = request.service in self._names
        sent: Status | None = None
        while True:
            changed = self._changed
            status = self.status if known else health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
            if status != sent:
                await context.write(health_pb2.HealthCheckResponse(status=status))
                sent = status
            await changed.wait()
