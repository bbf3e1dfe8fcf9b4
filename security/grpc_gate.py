"""Authorization at a node's gRPC server: who the caller is, and whether it may make this
call, decided before the handler runs.

``PrincipalGate`` reads the caller's principal from its certificate, asks a ``Policy``,
and either runs the handler with ``current_principal`` set (so a broker forwarding the
request names the client it serves) or answers the refusal: in the response's ``status``
where the method's response has one (``CLUSTER_AUTHORIZATION_FAILED`` and friends, which
clients report like any other error), else as ``PERMISSION_DENIED``. A refused call is
logged with the principal and never reaches the handler, so it writes nothing.

Forwarding: a broker that sends a request on a client's behalf (a Kafka client's
CreateTopics) puts the client's principal in the call's metadata (``FORWARDED_KEY``).
The gate hands it to the policy only when the caller's own certificate is a broker's:
anyone else claiming to forward is judged as itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from google.protobuf import descriptor_pool, message_factory

from raftka.security.principal import BROKER, Principal, current_host, current_principal, from_grpc, host_of

FORWARDED_KEY = "raftka-principal"  # gRPC metadata: the principal a broker forwards a request for
FORWARDED_HOST_KEY = "raftka-host"  # and the address that principal connected from

log = structlog.get_logger("raftka.security.grpc_gate")


@dataclass(frozen=True, slots=True)
class Denial:
    code: int  # an ErrorCode value (controller.proto)
    message: str


# (method name, e.g. "CreateTopics"; the caller; the principal it forwards for, if a broker;
# the request) -> why it is refused, or None
Policy = Callable[[str, Principal, str | None, Any], Denial | None]
_Behavior = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


def forwarded_metadata() -> tuple[tuple[str, str], ...]:
    """The metadata a broker's call to the controller carries: the principal of the
    request it is handling, if any."""
    principal = current_principal.get()
    if principal is None:
        return ()
    return (FORWARDED_KEY, principal.name), (FORWARDED_HOST_KEY, current_host.get())


class PrincipalGate(grpc.aio.ServerInterceptor):
    """Every unary call passes ``policy``; streams (the quorum's Exchange) have their own gate."""

    def __init__(self, policy: Policy | None = None) -> None:
        self._policy = policy
        self._gated: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        gated = self._gated.get(method)
        if gated is not None:
            return gated
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        gated = self._gated[method] = grpc.unary_unary_rpc_method_handler(
            self._gate(method, handler.unary_unary),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        return gated

    def _gate(self, method: str, behavior: _Behavior) -> _Behavior:
        name = method.rpartition("/")[2]
        response_type = _response_type(method)

        async def gated(request: Any, context: grpc.aio.ServicerContext) -> Any:
            caller = from_grpc(context)
            if caller is None:  # a plaintext server: no authorization
                return await behavior(request, context)
            forwarded, host = None, host_of(context.peer() or "")
            if caller.role == BROKER:
                metadata = dict(context.invocation_metadata() or ())
                forwarded = metadata.get(FORWARDED_KEY)
                if forwarded is not None:
                    host = metadata.get(FORWARDED_HOST_KEY, "")
            host_token = current_host.set(host)  # the policy reads it, as the handler does
            try:
                return await self._judged(behavior, name, caller, forwarded, request, context, response_type)
            finally:
                current_host.reset(host_token)

        return gated

    async def _judged(
        self,
        behavior: _Behavior,
        name: str,
        caller: Principal,
        forwarded: str | None,
        request: Any,
        context: grpc.aio.ServicerContext,
        response_type: type | None,
    ) -> Any:
        denial = self._policy(name, caller, forwarded, request) if self._policy is not None else None
        if denial is not None:
            log.warning(
                "request refused",
                rpc=name,
                principal=caller.name,
                forwarded_for=forwarded,
                reason=denial.message,
            )
            if response_type is None:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, denial.message)
            response = response_type()
            response.status.error, response.status.message = denial.code, denial.message
            return response
        token = current_principal.set(caller)
        try:
            return await behavior(request, context)
        finally:
            current_principal.reset(token)


def _response_type(method: str) -> type | None:
    """The method's response class if it has a ``status`` (a typed refusal fits in it)."""
    service, _, name = method.strip("/").rpartition("/")
    try:
        output = descriptor_pool.Default().FindMethodByName(f"{service}.{name}").output_type
    except KeyError:
        return None
    return message_factory.GetMessageClass(output) if "status" in output.fields_by_name else None
