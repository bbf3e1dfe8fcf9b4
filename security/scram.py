"""SCRAM (RFC 5802, SHA-256 and SHA-512 as RFC 7677 and Kafka's KIP-84): the credential a
password becomes, and the server's side of one login. No I/O: the caller feeds the
client's messages in and sends what comes out; the server's nonce comes from outside.

The server keeps only ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and
``ServerKey = HMAC(SaltedPassword, "Server Key")`` with the salt and the iteration count,
as Kafka's ``ScramCredential`` does: a stolen credential cannot log in (the proof needs
``ClientKey``, which ``StoredKey`` only hashes), and the password is never stored.

A login is two round trips:

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<proof>
    server-final   v=<server signature>

The proof is signed over all three messages before it, server nonce included, so a
client-final captured from one login is refused by any other (its nonce, and then its
proof, are another login's). An unknown user is answered like a known one (``Decoy``: a
salt derived from the name and a secret, and an iteration count a known user could have)
and refused only at the proof, so a login does not reveal which users exist (RFC 5802,
section 9). Every comparison of secrets is
constant-time (``hmac.compare_digest``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass

SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MECHANISMS = tuple(HASHES)
ITERATIONS_MIN = 4_096  # Kafka's bounds (ScramMechanism.minIterations / maxIterations)
ITERATIONS_MAX = 16_384
ITERATIONS_DEFAULT = 8_192
DECOY_KEY_BYTES = 32  # the cluster's key for unknown users' salts (ScramDecoyKeyRecord)
SALT_BYTES = 32
SALT_BYTES_MAX = 1_024
NAME_CHARS_MAX = 256  # a user name; its principal is User:<name>
CHANGES_PER_REQUEST_MAX = 1_000  # credentials added, deleted or described in one request
MESSAGE_BYTES_MAX = 4_096  # a client's SCRAM message; a longer one is refused unread
_PRINTABLE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # RFC 5802's printable: no comma


class AuthenticationFailed(Exception):
    """A login refused. ``str()`` is for the server's log; the client is told only that
    the login failed (``CLIENT_MESSAGE``), as Kafka does."""


CLIENT_MESSAGE = "Authentication failed: invalid credentials"


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def digest_bytes(mechanism: str) -> int:
    return hashlib.new(HASHES[mechanism]).digest_size


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(): PBKDF2 with the mechanism's HMAC (what a client sends Kafka's
    AlterUserScramCredentials, and what PLAIN recomputes to check a password)."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def credential(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """The keys a server keeps, from a salted password."""
    name = HASHES[mechanism]
    client_key = hmac.digest(salted, b"Client Key", name)
    return ScramCredential(
        salt=salt,
        stored_key=hashlib.new(name, client_key).digest(),
        server_key=hmac.digest(salted, b"Server Key", name),
        iterations=iterations,
    )


def password_matches(mechanism: str, stored: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``stored`` was made from (for SASL/PLAIN)."""
    salted = salted_password(mechanism, password, stored.salt, stored.iterations)
    derived = credential(mechanism, salted, stored.salt, stored.iterations)
    return hmac.compare_digest(derived.stored_key, stored.stored_key)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a SCRAM user (None: it can)."""
    if not name:
        return "empty"
    if len(name) > NAME_CHARS_MAX:
        return f"longer than {NAME_CHARS_MAX} characters"
    if any(not c.isprintable() for c in name):
        return "has a control character"
    return None


Lookup = Callable[[str, str], ScramCredential | None]  # (user, mechanism) -> its credential
Decoy = Callable[[str, str], ScramCredential]  # (user, mechanism) -> what an unknown user is answered


def decoy_credential(key: bytes, user: str, mechanism: str, iterations: int) -> ScramCredential:
    """An unknown user's credential: its salt is ``key``'s HMAC of the mechanism and the
    name, the same for every login as that name wherever ``key`` is the same; its keys
    (zeros) match no password."""
    salt = hmac.digest(key, f"{mechanism}\0{user}".encode(), "sha256")
    size = digest_bytes(mechanism)
    return ScramCredential(salt, bytes(size), bytes(size), iterations)


class ScramServer:
    """The server's side of one SCRAM login: ``first`` then ``final``, each once."""

    def __init__(self, mechanism: str, lookup: Lookup, server_nonce: str, decoy: Decoy) -> None:
        """``server_nonce``: fresh and unpredictable for each login (printable, no comma).
        ``decoy``: what an unknown user is answered with (the same for every login as it)."""
        assert mechanism in HASHES, mechanism
        assert _PRINTABLE.fullmatch(server_nonce), "a nonce is printable and has no comma"
        self.mechanism = mechanism
        self._hash = HASHES[mechanism]
        self._lookup = lookup
        self._server_nonce = server_nonce
        self._decoy = decoy
        self._stage = "first"
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._client_first_bare = b""
        self._gs2 = b""
        self._claimed = ""
        self._server_first = b""
        self.user: str | None = None  # set once the login succeeded

    @property
    def credential(self) -> ScramCredential | None:
        """The user's credential this login is checked against (None: unknown user)."""
        return self._credential

    def step(self, message: bytes) -> bytes:
        """The answer to the client's next message: server-first, then server-final."""
        return self.first(message) if self._stage == "first" else self.final(message)

    def first(self, message: bytes) -> bytes:
        """client-first in, server-first out."""
        self._advance("first", "final")
        gs2, authzid, bare = _split_gs2(message)
        fields = _fields(bare, "client-first")
        if list(fields)[:2] != ["n", "r"]:
            raise AuthenticationFailed("client-first: expected n=<user>,r=<nonce>")
        user = _sasl_name(fields["n"])
        if authzid and authzid != b"a=" + fields["n"].encode():  # Kafka's rule too
            raise AuthenticationFailed("client-first: an authorization identity other than the user")
        client_nonce = fields["r"]
        if not _PRINTABLE.fullmatch(client_nonce):
            raise AuthenticationFailed("client-first: the nonce is empty or not printable")
        self._claimed = user
        self._gs2 = gs2
        self._credential = self._lookup(user, self.mechanism)
        stored = self._credential or self._decoy(user, self.mechanism)
        self._nonce = client_nonce + self._server_nonce
        self._client_first_bare = bare
        salt = base64.b64encode(stored.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={stored.iterations}".encode()
        return self._server_first

    def final(self, message: bytes) -> bytes:
        """client-final in, server-final out; raises ``AuthenticationFailed`` unless the
        client proved it knows the user's password in this login."""
        self._advance("final", "done")
        if len(message) > MESSAGE_BYTES_MAX:
            raise AuthenticationFailed(f"client-final: longer than {MESSAGE_BYTES_MAX} bytes")
        without_proof, _, proof_field = message.rpartition(b",")
        fields = _fields(message, "client-final")
        if list(fields)[:2] != ["c", "r"] or list(fields)[-1] != "p" or not proof_field.startswith(b"p="):
            raise AuthenticationFailed("client-final: expected c=<binding>,r=<nonce>,...,p=<proof>")
        if not hmac.compare_digest(fields["c"].encode(), base64.b64encode(self._gs2)):
            raise AuthenticationFailed("client-final: channel binding is not the client-first's header")
        if not hmac.compare_digest(fields["r"].encode(), self._nonce.encode()):
            raise AuthenticationFailed("client-final: the nonce is not this login's (a replay?)")
        proof = _b64(fields["p"], "client-final proof")
        stored = self._credential
        if stored is None:
            raise AuthenticationFailed(f"no {self.mechanism} credential for user {self._claimed!r}")
        auth_message = b",".join((self._client_first_bare, self._server_first, without_proof))
        client_signature = hmac.digest(stored.stored_key, auth_message, self._hash)
        if len(proof) != len(client_signature):
            raise AuthenticationFailed("client-final: the proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), stored.stored_key):
            raise AuthenticationFailed(f"wrong password for user {self._claimed!r}")
        self.user = self._claimed
        server_signature = hmac.digest(stored.server_key, auth_message, self._hash)
        return b"v=" + base64.b64encode(server_signature)

    def _advance(self, expected: str, then: str) -> None:
        if self._stage != expected:
            raise AuthenticationFailed(f"a client-{expected} message after the login's {self._stage} step")
        self._stage = then


class ScramClient:
    """The client's side of one SCRAM login (raftka's own clients on the data listener):
    ``first``, then ``final`` with the server's first answer, then ``verify`` the server's
    last, which proves the server held the user's credential."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str) -> None:
        assert mechanism in HASHES and _PRINTABLE.fullmatch(nonce), (mechanism, nonce)
        self._hash = HASHES[mechanism]
        self.mechanism = mechanism
        self._password = password
        self._nonce = nonce
        self._bare = b"n=" + user.replace("=", "=3D").replace(",", "=2C").encode() + b",r=" + nonce.encode()
        self._server_signature = b""

    def first(self) -> bytes:
        return b"n,," + self._bare

    def final(self, server_first: bytes) -> bytes:
        fields = _fields(server_first, "server-first")
        nonce, salt_text, iterations_text = fields.get("r", ""), fields.get("s", ""), fields.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise AuthenticationFailed("server-first: the nonce does not extend the client's")
        if not iterations_text.isdigit() or not ITERATIONS_MIN <= int(iterations_text) <= ITERATIONS_MAX:
            raise AuthenticationFailed(f"server-first: iterations {iterations_text[:16]!r} out of bounds")
        salt = _b64(salt_text, "server-first salt")
        salted = salted_password(self.mechanism, self._password, salt, int(iterations_text))
        without_proof = b"c=biws,r=" + nonce.encode()
        auth_message = b",".join((self._bare, server_first, without_proof))
        client_key = hmac.digest(salted, b"Client Key", self._hash)
        signature = hmac.digest(hashlib.new(self._hash, client_key).digest(), auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", self._hash)
        self._server_signature = hmac.digest(server_key, auth_message, self._hash)
        return without_proof + b",p=" + base64.b64encode(proof)

    def verify(self, server_final: bytes) -> None:
        expected = b"v=" + base64.b64encode(self._server_signature)
        if not self._server_signature or not hmac.compare_digest(server_final, expected):
            raise AuthenticationFailed("server-final: the server does not know the user's credential")


def _split_gs2(message: bytes) -> tuple[bytes, bytes, bytes]:
    """(GS2 header with its two commas, its authorization identity, client-first-bare)."""
    if len(message) > MESSAGE_BYTES_MAX:
        raise AuthenticationFailed(f"client-first: longer than {MESSAGE_BYTES_MAX} bytes")
    flag, comma, rest = message.partition(b",")
    authzid, comma2, bare = rest.partition(b",")
    if not comma or not comma2:
        raise AuthenticationFailed("client-first: no GS2 header")
    if flag.startswith(b"p="):
        raise AuthenticationFailed("client-first: channel binding is not supported")
    if flag not in (b"n", b"y"):
        raise AuthenticationFailed(f"client-first: GS2 flag {flag[:8]!r} is not n or y")
    if authzid and not authzid.startswith(b"a="):
        raise AuthenticationFailed("client-first: a malformed authorization identity")
    return flag + b"," + authzid + b",", authzid, bare


def _fields(message: bytes, what: str) -> dict[str, str]:
    """``k=v`` pairs in order; the first of a repeated key wins."""
    try:
        text = message.decode()
    except UnicodeDecodeError:
        raise AuthenticationFailed(f"{what}: not UTF-8") from None
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if len(key) != 1 or not eq:
            raise AuthenticationFailed(f"{what}: {part[:32]!r} is not an attribute=value pair")
        fields.setdefault(key, value)
    return fields


def _sasl_name(text: str) -> str:
    """RFC 5802's saslname: "=2C" is a comma, "=3D" an equals sign, no other "="."""
    name = text.replace("=2C", ",").replace("=3D", "=")
    if "=" in text.replace("=2C", "").replace("=3D", "") or name_problem(name) is not None:
        raise AuthenticationFailed("client-first: a malformed user name")
    return name


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise AuthenticationFailed(f"{what}: not base64") from None
