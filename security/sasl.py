"""One connection's SASL login, whatever protocol carries its tokens: which mechanism the
client chose, the exchange under way, and who the client is once it has logged in.

Mechanisms: SCRAM-SHA-256 and SCRAM-SHA-512 (``raftka.security.scram``), and PLAIN
(RFC 4616), which sends the password itself. Every mechanism needs TLS on the node
(``mechanisms_problem``): without it the node's other listeners cannot authenticate the
cluster's own nodes, so a login would have nothing to be judged against. Kafka checks PLAIN
passwords against a JAAS file; raftka has none, so a PLAIN password is checked against
the user's SCRAM credential (SCRAM-SHA-512's if it has one, else SCRAM-SHA-256's): the
password is salted and hashed as that credential was, and the stored keys compared, within
the node's budget for that work (``raftka.security.plain_checks``). A user therefore logs
in with either mechanism once ``raftka users add`` made it one.

A login that succeeds names the connection's principal ``User:<name>`` (judged by the
same ACLs as certificates' principals); one that fails ends the connection (the
protocol's answer says so first), as Kafka's do.
"""

from __future__ import annotations

import contextvars
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from raftka.security import scram
from raftka.security.plain_checks import PlainChecks
from raftka.security.principal import CLIENT, USER_PREFIX, Principal, current_host
from raftka.security.scram import AuthenticationFailed, ScramCredential

PLAIN = "PLAIN"
MECHANISMS = (*scram.MECHANISMS, PLAIN)
_PLAIN_CHECKED_WITH = (
    scram.SCRAM_SHA_512,
    scram.SCRAM_SHA_256,
)  # the credential a PLAIN password is checked against


def mechanisms_problem(mechanisms: Sequence[str], tls: bool) -> str | None:
    """Why a listener cannot offer ``mechanisms`` (None: it can)."""
    unknown = [m for m in mechanisms if m not in MECHANISMS]
    if unknown:
        return f"{', '.join(unknown)}: not one of {', '.join(MECHANISMS)}"
    if len(set(mechanisms)) != len(mechanisms):
        return "a mechanism is listed twice"
    if mechanisms and not tls:
        return (
            "SASL needs [tls] (tls.ca, tls.cert, tls.key) in the node's config: without TLS the gRPC "
            "and data listeners cannot tell the cluster's nodes from anyone else, so logins would "
            "authorize nothing (Kafka's SASL_PLAINTEXT is not offered; use SASL_SSL)"
        )
    return None


def parse_mechanisms(text: str) -> tuple[str, ...]:
    """A config value, "SCRAM-SHA-512,SCRAM-SHA-256" (Kafka's sasl.enabled.mechanisms)."""
    return tuple(m.strip() for m in text.split(",") if m.strip())


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    """How raftka's own clients log in on a data listener with SASL (``sasl=``)."""

    username: str
    password: str = field(repr=False)
    mechanism: str = scram.SCRAM_SHA_512  # or SCRAM-SHA-256, or PLAIN (TLS only)

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"sasl.mechanism: {self.mechanism!r} is not one of {', '.join(MECHANISMS)}")
        if scram.name_problem(self.username) is not None or not self.password:
            raise ValueError("sasl: a user name and a password are needed")


def server_nonce() -> str:
    return secrets.token_urlsafe(24)  # 192 random bits, printable and without commas


class SaslLogin:
    """Choose a mechanism (``choose``), then exchange tokens (``step``) until ``principal``
    is set or ``failed`` is."""

    def __init__(
        self,
        mechanisms: Sequence[str],
        lookup: scram.Lookup,
        decoy: scram.Decoy,
        login_apis: tuple[frozenset[int], frozenset[int]],
        plain_checks: PlainChecks,
        nonce: Callable[[], str] = server_nonce,
    ) -> None:
        """``login_apis``: the protocol's API keys served before a mechanism is chosen (the
        handshake), and those served after (the token exchange); ``plain_checks``: the
        node's, which bound the hashing of PLAIN passwords."""
        self.mechanisms = tuple(mechanisms)
        self._before, self._during = login_apis
        self._lookup = lookup
        self._decoy = decoy
        self._plain_checks = plain_checks
        self._nonce = nonce
        self.mechanism: str | None = None
        self._scram: scram.ScramServer | None = None
        self.principal: Principal | None = None
        self.user: str | None = None  # once logged in
        # the credential the login was checked against: (its mechanism, it); None for a
        # connection logged in by its certificate
        self.checked: tuple[str, ScramCredential] | None = None
        self.on_end: Callable[[], None] = lambda: None  # closes the connection (its listener sets it)
        self.failed = False
        # After Kafka's SaslHandshake v0 the client sends its tokens as bare frames, without
        # request headers, and reads the answers so: the listener hands each to this.
        self.raw_step: Callable[[bytes], Awaitable[bytes | None]] | None = None

    def refusal(self, api_key: int) -> str | None:
        """Why a request for ``api_key`` may not be served now (None: it may)."""
        if self.principal is not None:
            return None
        if self.failed:
            return "the login failed"
        if api_key not in (self._before if self.mechanism is None else self._during):
            when = "before the SASL handshake" if self.mechanism is None else "during the SASL exchange"
            return f"api {api_key} {when}"
        return None

    def choose(self, mechanism: str) -> bool:
        """The client's mechanism; False (and the login failed) if this listener has no such."""
        if mechanism not in self.mechanisms:
            self.failed = True
            return False
        self.mechanism = mechanism
        if mechanism in scram.MECHANISMS:
            self._scram = scram.ScramServer(mechanism, self._lookup, self._nonce(), self._decoy)
        return True

    async def step(self, token: bytes) -> bytes:
        """The answer to the client's next token; raises ``AuthenticationFailed`` (and the
        login has failed) if the client may not log in."""
        assert self.mechanism is not None and self.principal is None and not self.failed
        try:
            if len(token) > scram.MESSAGE_BYTES_MAX:
                raise AuthenticationFailed(
                    f"a token of {len(token)} bytes: at most {scram.MESSAGE_BYTES_MAX}"
                )
            if self._scram is None:
                user, answer = await self._plain(token), b""
            else:
                answer = self._scram.step(token)
                if self._scram.user is None:
                    return answer  # server-first: the client's proof comes next
                user = self._scram.user
        except AuthenticationFailed:
            self.failed = True
            raise
        if self._scram is not None:
            assert self._scram.credential is not None
            self.checked = (self._scram.mechanism, self._scram.credential)
        self.user = user
        self.principal = Principal(USER_PREFIX + user, CLIENT)
        return answer

    def revoked_by(self, credentials: Mapping[tuple[str, str], ScramCredential]) -> bool:
        """Whether the credential this login was checked against is gone from ``credentials``
        (deleted, or replaced by another)."""
        if self.checked is None or self.user is None:
            return False
        mechanism, credential = self.checked
        return credentials.get((self.user, mechanism)) != credential

    def end(self) -> None:
        """Close the connection: its login no longer holds."""
        self.on_end()

    async def _plain(self, token: bytes) -> str:
        """RFC 4616: authzid NUL authcid NUL password; the authzid empty or the user."""
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("PLAIN: expected authzid NUL user NUL password")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN: not UTF-8") from None
        if scram.name_problem(user) is not None or not password:
            raise AuthenticationFailed("PLAIN: an empty or malformed user name, or an empty password")
        if authzid and authzid != user:
            raise AuthenticationFailed("PLAIN: an authorization identity other than the user")
        found = next(((m, c) for m in _PLAIN_CHECKED_WITH if (c := self._lookup(user, m)) is not None), None)
        # An unknown user costs the same hashing as a known one, so timing does not tell them apart.
        mechanism, stored = found or (scram.SCRAM_SHA_512, self._decoy(user, scram.SCRAM_SHA_512))
        matches = await self._plain_checks.matches(
            user, mechanism, stored, password, current_host.get(), known=found is not None
        )
        if found is None:
            raise AuthenticationFailed(f"PLAIN: no SCRAM credential for user {user!r}")
        if not matches:
            raise AuthenticationFailed(f"PLAIN: wrong password for user {user!r}")
        self.checked = (mechanism, stored)
        return user


# The login of the connection whose request is being handled (None: the listener has no SASL).
current_login: contextvars.ContextVar[SaslLogin | None] = contextvars.ContextVar(
    "current_login", default=None
)
