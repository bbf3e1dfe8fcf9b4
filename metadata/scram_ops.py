"""SCRAM credential requests (``raftka users add|delete|list``, Kafka's
AlterUserScramCredentials and DescribeUserScramCredentials), pure functions of the image
like the other ``*_ops`` modules.

As Kafka's ScramControlManager: the client sends the salt and the salted password, the
controller derives the keys a server keeps and writes those
(``UserScramCredentialRecord``), never what it was sent. Each user's changes are judged
together: a user with one bad change (an unknown mechanism, iterations out of
[4096, 16384], a salted password of the wrong length, the same mechanism twice, deleting
a credential that does not exist) has none written and its own error; the other users'
changes commit as one batch. The first batch that writes a credential also writes the
cluster's decoy key (``ScramDecoyKeyRecord``: unknown users' salts, ``decoy_key``).
"""

from __future__ import annotations

from raftka.metadata.image import MetadataImage
from raftka.metadata.plan import ErrorCode, MetadataRecord, Plan, duplicates, refuse
from raftka.metadata.snapshot import scram_record
from raftka.security import scram
from raftka.v1 import controller_pb2, metadata_pb2

CREDENTIALS_MAX = 10_000  # SCRAM credentials in the cluster; more are refused
Pb = controller_pb2
Change = Pb.ScramCredentialDeletion | Pb.ScramCredentialUpsertion


def alter(image: MetadataImage, request: Pb.AlterUserScramCredentialsRequest, decoy_key: bytes) -> Plan:
    """``decoy_key``: fresh random bytes, written only if the image has no decoy key yet."""
    response = Pb.AlterUserScramCredentialsResponse()
    changes: list[Change] = [*request.deletions, *request.upsertions]
    if len(changes) > scram.CHANGES_PER_REQUEST_MAX:
        return refuse(
            response,
            ErrorCode.INVALID_REQUEST,
            f"deletions, upsertions: more than {scram.CHANGES_PER_REQUEST_MAX} in all",
        )
    twice = duplicates((c.name, c.mechanism) for c in changes)
    by_user: dict[str, list[Change]] = {}
    for change in changes:
        by_user.setdefault(change.name, []).append(change)
    records: list[MetadataRecord] = []
    added = 0
    for user, theirs in by_user.items():
        problem = next((p for c in theirs if (p := _problem(image, c, twice)) is not None), None)
        if problem is None:
            records.extend(_record(c) for c in theirs)
            added += sum(
                isinstance(c, Pb.ScramCredentialUpsertion)
                and (c.name, c.mechanism) not in image.scram_credentials
                for c in theirs
            )
        code, message = problem or (ErrorCode.NONE, "")
        response.results.add(user=user, error=code, message=message)
    if len(image.scram_credentials) + added > CREDENTIALS_MAX:
        return refuse(
            Pb.AlterUserScramCredentialsResponse(),
            ErrorCode.INVALID_REQUEST,
            f"upsertions: the cluster would hold more than {CREDENTIALS_MAX} SCRAM credentials",
        )
    if not image.scram_decoy_key and any(r.HasField("user_scram_credential") for r in records):
        records.append(MetadataRecord(scram_decoy_key=metadata_pb2.ScramDecoyKeyRecord(key=decoy_key)))
    return Plan(response, records)


def describe(
    image: MetadataImage, request: Pb.DescribeUserScramCredentialsRequest
) -> Pb.DescribeUserScramCredentialsResponse:
    response = Pb.DescribeUserScramCredentialsResponse()
    by_user: dict[str, list[Pb.ScramCredentialInfo]] = {}
    for (user, mechanism), c in sorted(image.scram_credentials.items()):
        by_user.setdefault(user, []).append(
            Pb.ScramCredentialInfo(mechanism=mechanism, iterations=c.iterations)
        )
    twice = duplicates(request.users)
    for user in request.users or by_user:
        described = response.users.add(user=user, credentials=by_user.get(user, []))
        if user in twice:
            described.error, described.message = ErrorCode.DUPLICATE_RESOURCE, "the user is asked for twice"
        elif user not in by_user:
            described.error, described.message = (
                ErrorCode.RESOURCE_NOT_FOUND,
                "the user has no SCRAM credential",
            )
    return response


def _problem(image: MetadataImage, change: Change, twice: set[tuple[str, str]]) -> tuple[int, str] | None:
    """The error of one change (None: it can be written)."""
    kind = "deletion" if isinstance(change, Pb.ScramCredentialDeletion) else "upsertion"
    name_problem = scram.name_problem(change.name)
    if name_problem is not None:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"{kind}.name: {name_problem}"
    if change.mechanism not in scram.MECHANISMS:
        return (
            ErrorCode.UNSUPPORTED_SASL_MECHANISM,
            f"{kind}.mechanism: {change.mechanism!r} is not one of {', '.join(scram.MECHANISMS)}",
        )
    if (change.name, change.mechanism) in twice:
        return ErrorCode.DUPLICATE_RESOURCE, f"{kind}: {change.mechanism} is changed twice in one request"
    if isinstance(change, Pb.ScramCredentialDeletion):
        if (change.name, change.mechanism) not in image.scram_credentials:
            return ErrorCode.RESOURCE_NOT_FOUND, f"deletion: the user has no {change.mechanism} credential"
        return None
    return _upsertion_problem(change)


def _upsertion_problem(change: Pb.ScramCredentialUpsertion) -> tuple[int, str] | None:
    if not scram.ITERATIONS_MIN <= change.iterations <= scram.ITERATIONS_MAX:
        return (
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
            f"upsertion.iterations: {change.iterations} is not in [{scram.ITERATIONS_MIN}, {scram.ITERATIONS_MAX}]",
        )
    if not change.salt:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "upsertion.salt: empty"
    if len(change.salt) > scram.SALT_BYTES_MAX:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"upsertion.salt: longer than {scram.SALT_BYTES_MAX} bytes"
    size = scram.digest_bytes(change.mechanism)
    if len(change.salted_password) != size:
        return (
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
            f"upsertion.salted_password: {len(change.salted_password)} bytes, {change.mechanism} makes {size}",
        )
    return None


def _record(change: Change) -> MetadataRecord:
    if isinstance(change, Pb.ScramCredentialDeletion):
        removal = metadata_pb2.RemoveUserScramCredentialRecord(name=change.name, mechanism=change.mechanism)
        return MetadataRecord(remove_user_scram_credential=removal)
    kept = scram.credential(change.mechanism, change.salted_password, change.salt, change.iterations)
    return MetadataRecord(user_scram_credential=scram_record(change.name, change.mechanism, kept))
