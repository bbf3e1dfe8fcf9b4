"""Issue 29 finding 12: a SCRAM login as a user with no credential must not tell that user
apart from one with. Its salt differed per broker and per restart (a key of the broker
process) and always said 8,192 iterations. Now two broker processes (two brokers, or one
before and after a restart) that replayed the same metadata log answer an unknown user
with the same salt, and with the iteration count the cluster's credentials have."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from raftka.metadata.image import MetadataImage
from raftka.metadata.snapshot import encode_image
from raftka.security import scram
from raftka.v1 import controller_pb2 as C
from tests.unit.controller_in_memory import ControllerInMemory

ITERATIONS = 16_384  # not Kafka's default: the decoy must say what the cluster's users say
BROKER_PROCESS = """
import asyncio, sys
from types import SimpleNamespace
from raftka.broker.kafka.sasl_apis import LOGIN_APIS
from raftka.broker.sasl_logins import SaslLogins
from raftka.security.plain_checks import PlainChecks
from raftka.metadata.snapshot import decode_image

image = decode_image(sys.stdin.buffer.read())
logins = SaslLogins(SimpleNamespace(image=image, plain_checks=PlainChecks()), ("SCRAM-SHA-512",), LOGIN_APIS, "kafka")
for user in sys.argv[1:]:
    login = logins.new(None)
    login.choose("SCRAM-SHA-512")
    server_first = asyncio.run(login.step(b"n,,n=" + user.encode() + b",r=abc"))
    print(server_first.split(b",", 1)[1].decode())  # s=<salt>,i=<iterations>, not the nonce
"""


def metadata_log() -> bytes:
    """The image after ``raftka users add`` of two users, as every broker replays it."""
    controller = ControllerInMemory(MetadataImage())
    request = C.AlterUserScramCredentialsRequest()
    for user in ("alice", "bob"):
        salt = user.encode() * 8
        request.upsertions.add(
            name=user,
            mechanism=scram.SCRAM_SHA_512,
            iterations=ITERATIONS,
            salt=salt,
            salted_password=scram.salted_password(scram.SCRAM_SHA_512, "pw", salt, ITERATIONS),
        )
    answer = asyncio.run(controller.AlterUserScramCredentials(request, timeout=1))
    assert not answer.status.error and all(not r.error for r in answer.results)
    return encode_image(controller.image)


def answered(image: bytes, *users: str) -> list[str]:
    """What one broker process answers each user's client-first with."""
    done = subprocess.run(
        [sys.executable, "-c", BROKER_PROCESS, *users],
        input=image,
        capture_output=True,
        check=True,
        timeout=120,
    )
    return done.stdout.decode().split()


def test_an_unknown_user_is_answered_alike_by_every_broker_and_restart_as_a_known_one() -> None:
    image = metadata_log()
    one, other = answered(image, "mallory", "alice"), answered(image, "mallory", "alice")
    assert one == other, "two broker processes answer the unknown user (and alice) alike"
    mallory, alice = one
    assert mallory.endswith(f",i={ITERATIONS}") and alice.endswith(f",i={ITERATIONS}")
    assert mallory != alice
