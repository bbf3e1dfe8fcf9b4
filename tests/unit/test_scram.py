"""The SCRAM server (RFC 5802 with RFC 7677's SHA-256 and SHA-512) and a connection's SASL
login: RFC 7677's own test exchange byte for byte, kafka-python's SCRAM client logging in
with both mechanisms, and every way a login must fail: a wrong password, an unknown user
(answered like a known one, refused at the proof), a client-final whose nonce is not this
login's, a client-final captured from one login and replayed into another, a second
client-final in the same login, malformed messages. PLAIN is checked against the user's
SCRAM credential."""

from __future__ import annotations

import asyncio
import base64

import pytest
from kafka.net.sasl.scram import ScramClient

from raftka.security import scram
from raftka.security.plain_checks import PlainChecks
from raftka.security.sasl import PLAIN, SaslLogin, mechanisms_problem, parse_mechanisms
from raftka.security.scram import AuthenticationFailed, ScramCredential, ScramServer

# RFC 7677, section 3
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
DECOY_KEY = b"k" * 32


def decoy(user: str, mechanism: str) -> scram.ScramCredential:
    return scram.decoy_credential(DECOY_KEY, user, mechanism, scram.ITERATIONS_DEFAULT)


SHA256_NAME = scram.SCRAM_SHA_256
LOGIN_APIS = (frozenset({18, 17}), frozenset({36}))


def stored(mechanism: str, password: str, salt: bytes = b"salt", iterations: int = 4096) -> ScramCredential:
    return scram.credential(
        mechanism, scram.salted_password(mechanism, password, salt, iterations), salt, iterations
    )


def users(**passwords: str) -> scram.Lookup:
    credentials = {
        (user, m): stored(m, password, salt=RFC_SALT)
        for user, password in passwords.items()
        for m in scram.MECHANISMS
    }
    return lambda user, mechanism: credentials.get((user, mechanism))


def rfc_server() -> ScramServer:
    return ScramServer(scram.SCRAM_SHA_256, users(user="pencil"), RFC_SERVER_NONCE, decoy)


def test_rfc_7677_exchange_byte_for_byte() -> None:
    server = rfc_server()
    assert server.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.user == "user"


@pytest.mark.parametrize("mechanism", scram.MECHANISMS)
def test_kafka_pythons_client_logs_in_and_checks_the_server(mechanism: str) -> None:
    client = ScramClient("alice", "s3cret", mechanism)
    server = ScramServer(mechanism, users(alice="s3cret"), "servernonce", decoy)
    client.process_server_first_message(server.first(client.first_message()))
    client.process_server_final_message(server.final(client.final_message()))  # raises unless v= is right
    assert server.user == "alice"


def exchange(
    password: str, server: ScramServer, mechanism: str = scram.SCRAM_SHA_512, user: str = "alice"
) -> bytes:
    """A client's first two messages to ``server``; its client-final."""
    client = ScramClient(user, password, mechanism)
    client.process_server_first_message(server.first(client.first_message()))
    return client.final_message()


def test_a_wrong_password_is_refused() -> None:
    server = ScramServer(scram.SCRAM_SHA_512, users(alice="right"), "n1", decoy)
    final = exchange("wrong", server)
    with pytest.raises(AuthenticationFailed, match="wrong password for user 'alice'"):
        server.final(final)
    assert server.user is None


def test_an_unknown_user_is_answered_like_a_known_one_then_refused() -> None:
    lookup = users(alice="right")
    server = ScramServer(scram.SCRAM_SHA_512, lookup, "n1", decoy)
    first = server.first(b"n,,n=mallory,r=abc")
    again = ScramServer(scram.SCRAM_SHA_512, lookup, "n1", decoy).first(b"n,,n=mallory,r=abc")
    assert first == again  # the same salt and iterations every time, as a real user's
    assert first.startswith(b"r=abcn1,s=") and first.endswith(f",i={scram.ITERATIONS_DEFAULT}".encode())
    with pytest.raises(AuthenticationFailed, match="no SCRAM-SHA-512 credential for user 'mallory'"):
        server.final(b"c=biws,r=abcn1,p=" + base64.b64encode(bytes(64)))


def test_a_client_final_with_another_nonce_is_refused() -> None:
    server = rfc_server()
    server.first(RFC_CLIENT_FIRST)
    tampered = RFC_CLIENT_FINAL.replace(b"hNlF$k0", b"hNlF$k1")
    with pytest.raises(AuthenticationFailed, match="the nonce is not this login's"):
        server.final(tampered)


def test_a_captured_client_final_is_refused_by_another_login() -> None:
    """An eavesdropper replays the RFC client's client-first and client-final: the new
    login's server nonce differs, so the captured client-final's nonce (and proof) are wrong."""
    replayed = ScramServer(scram.SCRAM_SHA_256, users(user="pencil"), "freshnonce", decoy)
    assert replayed.first(RFC_CLIENT_FIRST) != RFC_SERVER_FIRST
    with pytest.raises(AuthenticationFailed, match="a replay"):
        replayed.final(RFC_CLIENT_FINAL)
    assert replayed.user is None


def test_a_login_takes_one_client_final() -> None:
    server = rfc_server()
    server.first(RFC_CLIENT_FIRST)
    server.final(RFC_CLIENT_FINAL)
    with pytest.raises(AuthenticationFailed, match="after the login's done step"):
        server.final(RFC_CLIENT_FINAL)


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (b"n=user,r=abc", "no GS2 header"),
        (b"p=tls-unique,,n=user,r=abc", "channel binding is not supported"),
        (b"n,a=admin,n=user,r=abc", "authorization identity other than the user"),
        (b"n,,r=abc,n=user", "expected n=<user>,r=<nonce>"),
        (b"n,,n=us=er,r=abc", "malformed user name"),
        (b"n,,n=user,r=", "nonce is empty"),
        (b"n,,n=user,r=abc,\xff", "not UTF-8"),
        (b"n,,n=user,r=" + b"a" * 5000, "longer than 4096 bytes"),
    ],
)
def test_malformed_client_firsts_are_refused(message: bytes, problem: str) -> None:
    with pytest.raises(AuthenticationFailed, match=problem):
        rfc_server().first(message)


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"), "channel binding"),
        (RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=!Hzb"), "not base64"),
        (RFC_CLIENT_FINAL.rpartition(b",")[0], "expected c=<binding>"),
        (RFC_CLIENT_FINAL.rpartition(b",p=")[0] + b",p=AAAA", "the proof has the wrong length"),
    ],
)
def test_malformed_client_finals_are_refused(message: bytes, problem: str) -> None:
    server = rfc_server()
    server.first(RFC_CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed, match=problem):
        server.final(message)


def test_escaped_user_names_are_read_as_rfc_5802_writes_them() -> None:
    server = ScramServer(scram.SCRAM_SHA_256, users(**{"a,b=c": "pw"}), "n1", decoy)
    client = ScramClient(
        "a=2Cb=3Dc", "pw", scram.SCRAM_SHA_256
    )  # kafka-python does not escape; we do it for it
    client.process_server_first_message(server.first(client.first_message()))
    server.final(client.final_message())
    assert server.user == "a,b=c"


# a connection's login ---------------------------------------------------------------------


def login(mechanisms: tuple[str, ...] = (*scram.MECHANISMS, PLAIN), **passwords: str) -> SaslLogin:
    return SaslLogin(mechanisms, users(**passwords), decoy, LOGIN_APIS, PlainChecks())


def test_a_scram_login_names_the_principal_and_serves_everything_after() -> None:
    alice = login(alice="pw")
    assert alice.refusal(3) == "api 3 before the SASL handshake"
    assert alice.refusal(17) is None and alice.refusal(36) is not None
    assert alice.choose(scram.SCRAM_SHA_256)
    assert alice.refusal(36) is None and alice.refusal(18) == "api 18 during the SASL exchange"
    client = ScramClient("alice", "pw", scram.SCRAM_SHA_256)
    client.process_server_first_message(asyncio.run(alice.step(client.first_message())))
    assert alice.principal is None
    client.process_server_final_message(asyncio.run(alice.step(client.final_message())))
    assert alice.principal is not None and alice.principal.name == "User:alice"
    assert alice.refusal(3) is None


def test_a_failed_login_serves_nothing_more() -> None:
    alice = login(alice="pw")
    alice.choose(scram.SCRAM_SHA_256)
    client = ScramClient("alice", "nope", scram.SCRAM_SHA_256)
    client.process_server_first_message(asyncio.run(alice.step(client.first_message())))
    with pytest.raises(AuthenticationFailed):
        asyncio.run(alice.step(client.final_message()))
    assert alice.failed and alice.principal is None
    assert alice.refusal(36) == "the login failed"


def test_a_mechanism_not_offered_fails_the_login() -> None:
    only_scram = login(scram.MECHANISMS, alice="pw")
    assert not only_scram.choose(PLAIN)
    assert only_scram.failed


@pytest.mark.parametrize(
    ("token", "problem"),
    [
        (b"\0alice\0wrong", "wrong password for user 'alice'"),
        (b"\0bob\0pw", "no SCRAM credential for user 'bob'"),
        (b"bob\0alice\0pw", "authorization identity other than the user"),
        (b"alice\0pw", "expected authzid NUL user NUL password"),
        (b"\0alice\0", "an empty password"),
        (b"\0alice\0" + b"p" * 5000, "a token of 5007 bytes: at most 4096"),
    ],
)
def test_plain_is_checked_against_the_scram_credential(token: bytes, problem: str) -> None:
    plain = login(alice="pw")
    plain.choose(PLAIN)
    with pytest.raises(AuthenticationFailed, match=problem):
        asyncio.run(plain.step(token))
    assert plain.failed and plain.principal is None


def test_plain_logs_in_with_the_scram_password() -> None:
    plain = login(alice="pw")
    plain.choose(PLAIN)
    assert asyncio.run(plain.step(b"alice\0alice\0pw")) == b""
    assert plain.principal is not None and plain.principal.name == "User:alice"


@pytest.mark.parametrize(
    ("text", "tls", "problem"),
    [
        ("SCRAM-SHA-512, SCRAM-SHA-256", True, None),
        ("", False, None),
        ("SCRAM-SHA-512, SCRAM-SHA-256", False, "SASL needs [tls] (tls.ca, tls.cert, tls.key)"),
        ("PLAIN", True, None),
        ("PLAIN", False, "SASL needs [tls]"),
        ("SCRAM-SHA-1", False, "SCRAM-SHA-1: not one of"),
        ("PLAIN,PLAIN", True, "listed twice"),
    ],
)
def test_listener_mechanisms_are_checked(text: str, tls: bool, problem: str | None) -> None:
    found = mechanisms_problem(parse_mechanisms(text), tls)
    assert found == problem if problem is None else problem in (found or "")


def test_our_client_speaks_rfc_7677s_exchange_and_checks_the_server() -> None:
    client = scram.ScramClient(SHA256_NAME, "user", "pencil", "rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)
    with pytest.raises(AuthenticationFailed, match="does not know the user's credential"):
        client.verify(RFC_SERVER_FINAL.replace(b"v=6", b"v=7"))


@pytest.mark.parametrize(
    ("server_first", "problem"),
    [
        (b"r=someone-else,s=QQ==,i=4096", "does not extend the client's"),
        (b"r=rOprNGfwEbeRWgbNEkqO,s=QQ==,i=4096", "does not extend the client's"),
        (b"r=rOprNGfwEbeRWgbNEkqOx,s=QQ==,i=100000000", "out of bounds"),
    ],
)
def test_our_client_refuses_a_server_first_it_cannot_trust(server_first: bytes, problem: str) -> None:
    client = scram.ScramClient(SHA256_NAME, "user", "pencil", "rOprNGfwEbeRWgbNEkqO")
    client.first()
    with pytest.raises(AuthenticationFailed, match=problem):
        client.final(server_first)
