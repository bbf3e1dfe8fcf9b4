"""SASL on the Kafka listener: SaslHandshake and SaslAuthenticate (Kafka's
SaslServerAuthenticator), and the SCRAM credentials admin APIs (AlterUserScramCredentials,
DescribeUserScramCredentials, forwarded to the controller).

With ``kafka.sasl_mechanisms`` set, a connection must log in before anything but
ApiVersions and SaslHandshake is served (``raftka.wire.server``): SaslHandshake v1 picks
the mechanism, then SaslAuthenticate carries its tokens. After SaslHandshake v0 (older
clients: Sarama's default before 1.26, kafka-python before 1.4) the tokens come and go as
bare frames, without request headers, as Kafka reads them. A failed login is answered SASL_AUTHENTICATION_FAILED (58) with a message that
does not say why (the broker's log does, rate-limited), then the connection is closed;
a mechanism the listener does not offer is answered UNSUPPORTED_SASL_MECHANISM with the
ones it does, then closed too. Sessions do not expire (``session_lifetime_ms`` 0), so
clients never re-authenticate (KIP-368). On a listener without SASL, both APIs answer
ILLEGAL_SASL_STATE, as Kafka's do.

Credentials are checked against the metadata image this broker has replayed, so a user
added with ``raftka users add`` can log in once the broker has caught up with that record.
"""

from __future__ import annotations

import structlog
from kafka.protocol.admin import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from raftka.broker.data_service import BrokerApi
from raftka.broker.kafka.errors import kafka_error, kafka_message
from raftka.broker.kafka.protocol import KafkaApi
from raftka.broker.sasl_logins import SaslLogins
from raftka.security import scram
from raftka.security.sasl import current_login
from raftka.v1 import controller_pb2
from raftka.wire.server import current_peer

C = controller_pb2
E = controller_pb2.ErrorCode
log = structlog.get_logger("raftka.broker.kafka.sasl")

ILLEGAL_SASL_STATE = 34
# Kafka's ScramMechanism ids on the wire (AlterUserScramCredentials, DescribeUserScramCredentials)
MECHANISM_IDS = {scram.SCRAM_SHA_256: 1, scram.SCRAM_SHA_512: 2}
MECHANISM_NAMES = {number: name for name, number in MECHANISM_IDS.items()}
LOGIN_APIS = (
    frozenset({ApiVersionsRequest.API_KEY, SaslHandshakeRequest.API_KEY}),
    frozenset({SaslAuthenticateRequest.API_KEY}),
)


def kafka_logins(api: BrokerApi, mechanisms: tuple[str, ...]) -> SaslLogins:
    return SaslLogins(api, mechanisms, LOGIN_APIS, "kafka")


class SaslApis:
    def __init__(self, api: BrokerApi, logins: SaslLogins | None) -> None:
        """``logins``: the listener's (None: it has no SASL)."""
        self._api = api
        self._logins = logins

    def apis(self) -> list[KafkaApi]:
        return [
            KafkaApi(SaslHandshakeRequest, 0, 1, self.handshake),
            KafkaApi(SaslAuthenticateRequest, 0, 2, self.authenticate),
            KafkaApi(AlterUserScramCredentialsRequest, 0, 0, self.alter_user_scram_credentials),
            KafkaApi(DescribeUserScramCredentialsRequest, 0, 0, self.describe_user_scram_credentials),
        ]

    async def handshake(self, request: SaslHandshakeRequest, version: int) -> SaslHandshakeResponse:
        login = current_login.get()
        if login is None or login.principal is not None or self._logins is None:
            return SaslHandshakeResponse(error_code=ILLEGAL_SASL_STATE, mechanisms=[])
        chosen = self._logins.choose(login, request.mechanism)
        if chosen and version == 0:
            logins = self._logins
            login.raw_step = lambda token: logins.step(login, token)
        error = 0 if chosen else kafka_error(E.UNSUPPORTED_SASL_MECHANISM)
        return SaslHandshakeResponse(error_code=error, mechanisms=list(login.mechanisms))

    async def authenticate(self, request: SaslAuthenticateRequest, version: int) -> SaslAuthenticateResponse:
        login = current_login.get()
        if login is None or login.principal is not None or login.mechanism is None or self._logins is None:
            return _authenticated(ILLEGAL_SASL_STATE, "no SASL login is under way on this connection")
        answer = await self._logins.step(login, request.auth_bytes)
        if answer is None:
            return _authenticated(kafka_error(E.SASL_AUTHENTICATION_FAILED), scram.CLIENT_MESSAGE)
        if login.principal is not None:
            log.debug("SASL login", peer=current_peer.get(), principal=login.principal.name)
        return _authenticated(0, None, answer)

    # credentials ------------------------------------------------------------------------

    async def alter_user_scram_credentials(
        self, request: AlterUserScramCredentialsRequest, version: int
    ) -> AlterUserScramCredentialsResponse:
        ours = C.AlterUserScramCredentialsRequest(
            deletions=[
                C.ScramCredentialDeletion(
                    name=d.name, mechanism=MECHANISM_NAMES.get(d.mechanism, str(d.mechanism))
                )
                for d in request.deletions
            ],
            upsertions=[
                C.ScramCredentialUpsertion(
                    name=u.name,
                    mechanism=MECHANISM_NAMES.get(u.mechanism, str(u.mechanism)),
                    iterations=u.iterations,
                    salt=u.salt,
                    salted_password=u.salted_password,
                )
                for u in request.upsertions
            ],
        )
        answer = await self._api.forward(
            lambda stub: stub.AlterUserScramCredentials, ours, C.AlterUserScramCredentialsResponse
        )
        R = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
        users = list(
            dict.fromkeys([*(d.name for d in request.deletions), *(u.name for u in request.upsertions)])
        )
        if answer.status.error != E.NONE:
            code, message = kafka_error(answer.status.error), answer.status.message
            results = [R(user=user, error_code=code, error_message=message) for user in users]
        else:
            results = [
                R(
                    user=r.user,
                    error_code=kafka_error(r.error),
                    error_message=kafka_message(r.error, r.message),
                )
                for r in answer.results
            ]
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results)

    async def describe_user_scram_credentials(
        self, request: DescribeUserScramCredentialsRequest, version: int
    ) -> DescribeUserScramCredentialsResponse:
        ours = C.DescribeUserScramCredentialsRequest(users=[u.name for u in request.users or []])
        answer = await self._api.forward(
            lambda stub: stub.DescribeUserScramCredentials, ours, C.DescribeUserScramCredentialsResponse
        )
        R = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
        results = [
            R(
                user=u.user,
                error_code=kafka_error(u.error),
                error_message=kafka_message(u.error, u.message),
                credential_infos=[
                    R.CredentialInfo(mechanism=MECHANISM_IDS[c.mechanism], iterations=c.iterations)
                    for c in u.credentials
                ],
            )
            for u in answer.users
        ]
        code = kafka_error(answer.status.error)
        return DescribeUserScramCredentialsResponse(
            throttle_time_ms=0,
            error_code=code,
            error_message=kafka_message(answer.status.error, answer.status.message),
            results=results,
        )


def _authenticated(error: int, message: str | None, auth_bytes: bytes = b"") -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(
        error_code=error, error_message=message, auth_bytes=auth_bytes, session_lifetime_ms=0
    )
