"""Kafka's wire protocol on a broker's Kafka listener: framing, request headers, the
ApiVersions handshake, and which APIs this listener serves at which versions.

The message schemas are kafka-python's (``kafka.protocol``, generated from Kafka's own
JSON schemas): a request is decoded with its header, handled, and its answer encoded at
the request's version with a response header. Record batches pass through as bytes.

As Kafka does, answers go back in request order on each connection (clients rely on
it), a Produce with acks=0 gets none, and an ApiVersions at a version this listener does
not know gets the version 0 answer with ``UNSUPPORTED_VERSION`` and the versions it
does serve, so the client can ask again. Any other API or version it does not serve
closes the connection, as Kafka closes it (an answer in a shape the client did not ask
for is one it cannot decode), and so does a request that does not decode, or whose
lists are longer than ``raftka.broker.kafka.request_lists`` allows.

The versions served are Kafka 3.9's for each API, from 0 (Kafka 4.0 dropped the old
ones, KIP-896; clients still send them), up to the newest this listener implements.
With client quotas, every request's loop time counts against its client's (``throttling``).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from raftka.broker.kafka.errors import UNSUPPORTED_VERSION
from raftka.broker.kafka.request_lists import check_request_lists
from raftka.broker.kafka.throttling import answer_within_quotas
from raftka.broker.quota.manager import ClientQuotas
from raftka.wire.frames import FrameError
from raftka.wire.server import Call

# api_key, api_version and correlation_id begin every request header version
REQUEST_PREFIX = struct.Struct(">hhi")

KafkaHandler = Callable[[Any, int], Awaitable[ApiMessage | None]]  # (request, version) -> answer; None: none


@dataclass(frozen=True, slots=True)
class KafkaApi:
    """One API this listener serves, at versions ``min_version`` to ``max_version``."""

    request: type[ApiMessage]
    min_version: int
    max_version: int
    handler: KafkaHandler

    @property
    def key(self) -> int:
        return self.request.API_KEY

    @property
    def name(self) -> str:
        return self.request.name


API_VERSIONS_MAX = 4


class KafkaDispatcher:
    """Kafka's requests for ``raftka.wire.server.Listener``: answers in request order."""

    ordered = True

    def __init__(self, apis: Iterable[KafkaApi], quotas: ClientQuotas | None = None) -> None:
        self.quotas = quotas
        self.apis = {api.key: api for api in apis}
        self.apis[ApiVersionsRequest.API_KEY] = KafkaApi(
            ApiVersionsRequest, 0, API_VERSIONS_MAX, self._api_versions
        )
        for api in self.apis.values():
            assert api.request.max_version >= api.max_version, (
                f"kafka-python has no {api.name} v{api.max_version}"
            )

    def dispatch(self, frame: memoryview) -> Call | bytes:
        started = time.perf_counter()
        if len(frame) < REQUEST_PREFIX.size:
            raise FrameError(f"a Kafka request of {len(frame)} bytes is shorter than its header")
        key, version, correlation_id = REQUEST_PREFIX.unpack_from(frame)
        api = self.apis.get(key)
        if api is None or not api.min_version <= version <= api.max_version:
            if key == ApiVersionsRequest.API_KEY:
                return self._encode(self._versions_answer(UNSUPPORTED_VERSION), 0, correlation_id)
            what = f"API {key}" if api is None else f"{api.name} v{version}"
            raise FrameError(f"{what} is not served here (ApiVersions lists what is)")
        check_request_lists(api.request, frame, version)
        try:
            request = api.request.decode(bytes(frame), version=version, header=True)
        except Exception as e:  # kafka-python's decoders raise several kinds; any means malformed
            raise FrameError(
                f"a {api.name} v{version} request does not decode: {type(e).__name__}: {e}"
            ) from None
        return self._answer(api, request, version, correlation_id, time.perf_counter() - started)

    def api_key(self, frame: memoryview) -> int:
        return REQUEST_PREFIX.unpack_from(frame)[0] if len(frame) >= REQUEST_PREFIX.size else -1

    async def _answer(
        self, api: KafkaApi, request: ApiMessage, version: int, correlation_id: int, decode_s: float
    ) -> bytes | None:
        if self.quotas is None:
            response = await api.handler(request, version)
        else:
            response = await answer_within_quotas(self.quotas, api.handler, request, version, decode_s)
        return None if response is None else self._encode(response, version, correlation_id)

    @staticmethod
    def _encode(response: ApiMessage, version: int, correlation_id: int) -> bytes:
        response.API_VERSION = version  # before the header: kafka-python sets a request's version on it
        response.with_header(correlation_id=correlation_id)
        return bytes(response.encode(header=True, framed=True))

    async def _api_versions(self, request: ApiVersionsRequest, version: int) -> ApiVersionsResponse:
        return self._versions_answer(0)

    def _versions_answer(self, error_code: int) -> ApiVersionsResponse:
        keys = [
            ApiVersionsResponse.ApiVersion(
                api_key=api.key, min_version=api.min_version, max_version=api.max_version
            )
            for api in sorted(self.apis.values(), key=lambda a: a.key)
        ]
        return ApiVersionsResponse(error_code=error_code, api_keys=keys, throttle_time_ms=0)
