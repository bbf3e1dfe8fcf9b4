"""A broker listener's SASL logins, whichever protocol carries them (the Kafka listener's
SaslHandshake/SaslAuthenticate, the data listener's frames of the same names): a new
connection's login, checked against the SCRAM credentials this broker has replayed, and
the rate-limited log of refused ones.

The data listener (``broker.data_sasl_mechanisms``): brokers fetch from each other over
it, and log in with their certificates, not passwords, so SASL there needs TLS, and a
connection whose certificate is a broker's is logged in as that broker from the start.

A user with no credential is answered as one with (``ClusterDecoys``), the same by every
broker and across restarts, so no login tells which users exist.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence

import structlog

from raftka.broker.data_service import BrokerApi
from raftka.metadata.image import MetadataImage
from raftka.node.config import NodeConfig
from raftka.node.logs import RateLimitedLog
from raftka.security import scram
from raftka.security.principal import BROKER, Principal
from raftka.security.sasl import SaslLogin, current_login, parse_mechanisms
from raftka.security.scram import CLIENT_MESSAGE, AuthenticationFailed, ScramCredential
from raftka.v1 import broker_pb2, controller_pb2
from raftka.wire.frames import SASL_AUTHENTICATE, SASL_HANDSHAKE
from raftka.wire.guard import DEFAULT_LIMITS, ConnectionLimits
from raftka.wire.server import FrameServer, current_peer

E = controller_pb2.ErrorCode
log = structlog.get_logger("raftka.broker.sasl")
FAILED_LOGIN_LOG_INTERVAL_S = 10.0
# A refusal is answered this late (Kafka's connection.failed.authentication.delay.ms), so a
# client guessing passwords gets at most ten guesses a second per connection it opens.
FAILED_LOGIN_DELAY_S = 0.1
# Until the first credential brings the cluster's decoy key, no user exists to be told apart.
_PROCESS_DECOY_KEY = secrets.token_bytes(scram.DECOY_KEY_BYTES)
LoginApis = tuple[frozenset[int], frozenset[int]]


class SaslLogins:
    """One listener's: ``new`` for each connection; ``choose`` and ``step`` for its requests."""

    def __init__(
        self,
        api: BrokerApi,
        mechanisms: Sequence[str],
        login_apis: LoginApis,
        listener: str,
        certified_role: str | None = None,
    ) -> None:
        """``certified_role``: a connection whose certificate has this role needs no login."""
        self._api = api
        self.mechanisms = tuple(mechanisms)
        self._login_apis = login_apis
        self._listener = listener
        self._certified_role = certified_role
        self._refusals = RateLimitedLog(log, FAILED_LOGIN_LOG_INTERVAL_S)
        self._decoys = ClusterDecoys(lambda: api.image)

    def new(self, certificate: Principal | None) -> SaslLogin:
        login = SaslLogin(
            self.mechanisms, self._credential, self._decoys, self._login_apis, self._api.plain_checks
        )
        if certificate is not None and certificate.role == self._certified_role:
            login.principal = certificate
        return login

    def _credential(self, user: str, mechanism: str):  # noqa: ANN202 - scram.Lookup
        return self._api.image.scram_credentials.get((user, mechanism))

    def choose(self, login: SaslLogin, mechanism: str) -> bool:
        if login.choose(mechanism):
            return True
        self._refused(login, f"mechanism {mechanism[:64]!r} is not offered")
        return False

    async def step(self, login: SaslLogin, token: bytes) -> bytes | None:
        """The answer to the client's next token; None if the login failed."""
        try:
            answer = await login.step(token)
        except AuthenticationFailed as e:
            self._refused(login, str(e))
            await asyncio.sleep(FAILED_LOGIN_DELAY_S)
            return None
        if login.principal is not None:
            self._api.sasl_sessions.opened(login)  # ended if its credential changes
        return answer

    def _refused(self, login: SaslLogin, reason: str) -> None:
        self._refusals.log(
            logging.WARNING,
            "SASL login refused",
            listener=self._listener,
            peer=current_peer.get(),
            mechanism=login.mechanism,
            reason=reason,
        )


class ClusterDecoys:
    """What a SCRAM login as a user with no credential is answered with (``scram.Decoy``):
    a salt derived from the name and the cluster's decoy key (``ScramDecoyKeyRecord``, in
    the metadata log, so the same on every broker and across restarts), and the iteration
    count most of the cluster's credentials of the mechanism have (Kafka's default, 8,192,
    when none has), so neither tells an unknown user from a known one."""

    def __init__(self, image: Callable[[], MetadataImage]) -> None:
        self._image = image
        self._counted: Mapping[tuple[str, str], ScramCredential] | None = None
        self._iterations: dict[str, int] = {}

    def __call__(self, user: str, mechanism: str) -> ScramCredential:
        image = self._image()
        key = image.scram_decoy_key or _PROCESS_DECOY_KEY
        return scram.decoy_credential(key, user, mechanism, self._most_common(image, mechanism))

    def _most_common(self, image: MetadataImage, mechanism: str) -> int:
        """Counted once per set of credentials (an image keeps its mapping until they change)."""
        if image.scram_credentials is not self._counted:
            counts: dict[str, collections.Counter[int]] = {}
            for (_, of), credential in image.scram_credentials.items():
                counts.setdefault(of, collections.Counter())[credential.iterations] += 1
            self._iterations = {m: max(sorted(c), key=c.__getitem__) for m, c in counts.items()}
            self._counted = image.scram_credentials
        return self._iterations.get(mechanism, scram.ITERATIONS_DEFAULT)


def data_listener(
    api: BrokerApi, config: NodeConfig, limits: ConnectionLimits = DEFAULT_LIMITS
) -> FrameServer:
    """The data listener, with SASL if ``broker.data_sasl_mechanisms`` names mechanisms."""
    mechanisms = parse_mechanisms(config.broker.data_sasl_mechanisms)
    if not mechanisms:
        return FrameServer(api.wire_handlers(), limits=limits)
    apis = (frozenset({SASL_HANDSHAKE.key}), frozenset({SASL_AUTHENTICATE.key}))
    logins = SaslLogins(api, mechanisms, apis, "data", certified_role=BROKER)
    sasl = DataSasl(logins)
    handlers = {
        **api.wire_handlers(),
        SASL_HANDSHAKE.key: sasl.handshake,
        SASL_AUTHENTICATE.key: sasl.authenticate,
    }
    return FrameServer(handlers, login=logins.new, limits=limits)


class DataSasl:
    """SaslHandshake and SaslAuthenticate in raftka's data protocol, Kafka's semantics."""

    def __init__(self, logins: SaslLogins) -> None:
        self._logins = logins

    async def handshake(self, request: broker_pb2.SaslHandshakeRequest) -> broker_pb2.SaslHandshakeResponse:
        response = broker_pb2.SaslHandshakeResponse(mechanisms=self._logins.mechanisms)
        login = current_login.get()
        if login is None or login.principal is not None:
            response.status.error, response.status.message = E.INVALID_REQUEST, "no SASL login to start here"
        elif not self._logins.choose(login, request.mechanism):
            response.status.error = E.UNSUPPORTED_SASL_MECHANISM
            response.status.message = (
                f"{request.mechanism[:64]!r} is not one of {', '.join(self._logins.mechanisms)}"
            )
        return response

    async def authenticate(
        self, request: broker_pb2.SaslAuthenticateRequest
    ) -> broker_pb2.SaslAuthenticateResponse:
        response = broker_pb2.SaslAuthenticateResponse()
        login = current_login.get()
        if login is None or login.principal is not None or login.mechanism is None:
            response.status.error, response.status.message = E.INVALID_REQUEST, "no SASL login under way"
            return response
        answer = await self._logins.step(login, request.auth_bytes)
        if answer is None:
            response.status.error, response.status.message = E.SASL_AUTHENTICATION_FAILED, CLIENT_MESSAGE
        else:
            response.auth_bytes = answer
        return response
