"""Authorization at a node's gRPC server: who the caller is, and whether it may make this
call, decided before the handler runs.

``PrincipalGate`` reads the caller's principal from its certificate and judges the call by
the node's ``Rules``: one ``Rule`` per method of every service the server has (the
quorum's, the controller's or the broker's, health and reflection). It fails closed: a
method with no rule is refused, whatever its kind (unary or streaming), so a method added
to a .proto is closed until someone writes down who may call it. A refused call is
answered in the response's ``status`` where the method's response has one
(``CLUSTER_AUTHORIZATION_FAILED`` and friends, which clients report like any other error),
else as ``PERMISSION_DENIED``; it is logged with the principal and never reaches the
handler, so it writes nothing. An allowed call runs with ``current_principal`` set (so a
broker forwarding the request names the client it serves).

Forwarding: a broker that sends a request on a client's behalf (a Kafka client's
CreateTopics) puts the client's principal in the call's metadata (``FORWARDED_KEY``).
The gate hands it to the rule only when the caller's own certificate is a broker's:
anyone else claiming to forward is judged as itself.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import ServiceDescriptor

from raftka.security.principal import BROKER, Principal, current_host, current_principal, from_grpc, host_of
from raftka.v1 import controller_pb2

FORWARDED_KEY = "raftka-principal"  # gRPC metadata: the principal a broker forwards a request for
FORWARDED_HOST_KEY = "raftka-host"  # and the address that principal connected from

log = structlog.get_logger("raftka.security.grpc_gate")


@dataclass(frozen=True, slots=True)
class Denial:
    code: int  # an ErrorCode value (controller.proto)
    message: str


# (the caller; the principal it forwards for, if a broker; the request, None for a
# client stream) -> why it is refused, or None
Rule = Callable[[Principal, str | None, Any], Denial | None]
# full method name ("/raftka.v1.Controller/CreateTopics") -> its rule
Rules = Mapping[str, Rule]


def anyone(caller: Principal, forwarded: str | None, request: Any) -> Denial | None:
    """Open to every certificate the cluster's CA signed (the handshake checked that)."""
    return None


def method_names(service: ServiceDescriptor) -> list[str]:
    """The full gRPC names of a service's methods, as ``Rules`` keys them."""
    return [f"/{service.full_name}/{method.name}" for method in service.methods]


def by_name(service: ServiceDescriptor, rules: Mapping[str, Rule]) -> dict[str, Rule]:
    """``rules`` keyed by a method's short name (``CreateTopics``), keyed by full name;
    a name the service does not have is a programming error."""
    known = {method.name for method in service.methods}
    unknown = set(rules) - known
    assert not unknown, f"{service.full_name} has no method {sorted(unknown)}"
    return {f"/{service.full_name}/{name}": rule for name, rule in rules.items()}


def forwarded_metadata() -> tuple[tuple[str, str], ...]:
    """The metadata a broker's call to the controller carries: the principal of the
    request it is handling, if any."""
    principal = current_principal.get()
    if principal is None:
        return ()
    return (FORWARDED_KEY, principal.name), (FORWARDED_HOST_KEY, current_host.get())


class PrincipalGate(grpc.aio.ServerInterceptor):
    """Every call, unary or streaming, passes its method's rule; a method without one is
    refused."""

    def __init__(self, rules: Rules) -> None:
        self._rules = dict(rules)
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
        if handler is None:
            return None
        gated = self._gated[method] = _wrapped(handler, _Judge(method, self._rules.get(method)))
        return gated


class _Judge:
    """One method's rule applied to one call's caller."""

    def __init__(self, method: str, rule: Rule | None) -> None:
        self.method = method
        self.name = method.rpartition("/")[2]
        self.rule = rule
        self.response_type = _response_type(method)

    def denial(
        self, context: grpc.aio.ServicerContext, request: Any
    ) -> tuple[Principal | None, Denial | None]:
        """The caller, and why it is refused (None: allowed). Sets ``current_host``."""
        caller = from_grpc(context)
        if caller is None:  # a plaintext server: no authorization
            return None, None
        forwarded, host = None, host_of(context.peer() or "")
        if caller.role == BROKER:
            metadata = dict(context.invocation_metadata() or ())
            forwarded = metadata.get(FORWARDED_KEY)
            if forwarded is not None:
                host = metadata.get(FORWARDED_HOST_KEY, "")
        current_host.set(host)  # the rule reads it, as the handler does
        if self.rule is None:
            denial = Denial(
                controller_pb2.CLUSTER_AUTHORIZATION_FAILED,
                f"{self.method}: no rule says who may call it, so nobody may",
            )
        else:
            denial = self.rule(caller, forwarded, request)
        if denial is not None:
            log.warning(
                "request refused",
                rpc=self.name,
                principal=caller.name,
                forwarded_for=forwarded,
                reason=denial.message,
            )
        return caller, denial

    async def refuse(self, context: grpc.aio.ServicerContext, denial: Denial, unary: bool) -> Any:
        if not unary or self.response_type is None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, denial.message)
        response = self.response_type()
        response.status.error, response.status.message = denial.code, denial.message
        return response


def _wrapped(handler: grpc.RpcMethodHandler, judge: _Judge) -> grpc.RpcMethodHandler:
    """``handler`` with ``judge`` before it, of the same kind."""
    serializers = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        behavior = handler.unary_unary

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            caller, denial = judge.denial(context, request)
            if denial is not None:
                return await judge.refuse(context, denial, unary=True)
            token = current_principal.set(caller)
            try:
                return await behavior(request, context)
            finally:
                current_principal.reset(token)

        return grpc.unary_unary_rpc_method_handler(unary_unary, **serializers)

    streaming = handler.unary_stream or handler.stream_unary or handler.stream_stream
    client_streams = handler.unary_stream is None

    async def stream(request_or_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        caller, denial = judge.denial(context, None if client_streams else request_or_iterator)
        if denial is not None:
            await judge.refuse(context, denial, unary=False)
        token = current_principal.set(caller)
        try:
            result = streaming(request_or_iterator, context)
            if inspect.isasyncgen(result):
                await _write_all(result, context)
                return None
            return await result
        finally:
            current_principal.reset(token)

    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(stream, **serializers)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(stream, **serializers)
    return grpc.stream_stream_rpc_method_handler(stream, **serializers)


async def _write_all(answers: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> None:
    async for answer in answers:
        await context.write(answer)


def _response_type(method: str) -> type | None:
    """The method's response class if it has a raftka ``Status`` (a typed refusal fits in it)."""
    service, _, name = method.strip("/").rpartition("/")
    try:
        output = descriptor_pool.Default().FindMethodByName(f"{service}.{name}").output_type
    except KeyError:
        return None
    status = output.fields_by_name.get("status")
    if status is None or status.message_type is not controller_pb2.Status.DESCRIPTOR:
        return None
    return message_factory.GetMessageClass(output)
