"""The SASL logins open on a node's listeners, ended when the credential they were checked
against changes, so that deleting a user or changing its password reaches the
connections already logged in (a deleted user's open connection was still served).

Kafka's way is KIP-368: the broker tells each login how long it may last
(``connections.max.reauth.ms``) and the client logs in again on the same connection before
then. raftka answers a session lifetime of 0 (none) and acts on the change itself: every
metadata image whose SCRAM credentials changed is compared with the credential each open
login was checked against (by mechanism: a PLAIN login with the SCRAM-SHA-512 one it was
hashed as); a login whose credential was deleted or replaced (a new password, salt or
iteration count) has its connection closed. Its client connects again and logs in with
the new password, or is refused; every Kafka client retries a closed connection.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping

import structlog

from raftka.security.sasl import SaslLogin
from raftka.security.scram import ScramCredential

log = structlog.get_logger("raftka.security.sasl_sessions")


class SaslSessions:
    """One node's logged-in SASL connections (held weakly: a closed one is forgotten)."""

    def __init__(self) -> None:
        self._open: weakref.WeakSet[SaslLogin] = weakref.WeakSet()
        self._seen: Mapping[tuple[str, str], ScramCredential] | None = None

    def __len__(self) -> int:
        return len(self._open)

    def opened(self, login: SaslLogin) -> None:
        """``login`` succeeded against a credential of the image."""
        if login.checked is not None:
            self._open.add(login)

    def credentials_changed(self, credentials: Mapping[tuple[str, str], ScramCredential]) -> int:
        """End the logins whose credential is no longer ``credentials``' (the image's, by
        user and mechanism); how many. Nothing to do for an image with the same ones."""
        if credentials is self._seen:
            return 0
        self._seen = credentials
        ended = [login for login in list(self._open) if login.revoked_by(credentials)]
        for login in ended:
            self._open.discard(login)
            login.end()
        if ended:
            log.info(
                "SASL connections closed: their credentials were deleted or changed",
                connections=len(ended),
                users=sorted({login.user for login in ended if login.user is not None})[:16],
            )
        return len(ended)
