"""SCRAM credentials in the metadata log (``raftka.metadata.scram_ops``): the controller
writes the keys derived from a salted password and never the password or the salted
password; each user's changes are judged together, so one bad change keeps all of that
user's out and no one else's; a describe names mechanisms and iteration counts only."""

from __future__ import annotations

from raftka.metadata import scram_ops
from raftka.metadata.acls import Acl, Authorizer
from raftka.metadata.image import EMPTY, MetadataImage
from raftka.metadata.snapshot import decode_image, encode_image
from raftka.security import scram
from raftka.security.principal import CLIENT, Principal
from raftka.v1 import controller_pb2 as C
from raftka.v1 import metadata_pb2 as pb
from tests.unit import metadata_support as m
from tests.unit.controller_rules_support import controller_policy
from tests.unit.metadata_support import replay

SHA256, SHA512 = scram.SCRAM_SHA_256, scram.SCRAM_SHA_512
SALT = b"0123456789abcdef"

DECOY_KEY = bytes(range(scram.DECOY_KEY_BYTES))


def upsertion(
    name: str, mechanism: str = SHA512, password: str = "pw", iterations: int = 4096
) -> C.ScramCredentialUpsertion:
    salted = (
        scram.salted_password(mechanism, password, SALT, iterations)
        if mechanism in scram.MECHANISMS
        else b"x"
    )
    return C.ScramCredentialUpsertion(
        name=name, mechanism=mechanism, iterations=iterations, salt=SALT, salted_password=salted
    )


def alter(
    image: MetadataImage, *changes: C.ScramCredentialUpsertion | C.ScramCredentialDeletion
) -> tuple[MetadataImage, dict[str, str]]:
    """The image after the controller's plan commits; each user's error name ("" for none)."""
    request = C.AlterUserScramCredentialsRequest(
        upsertions=[c for c in changes if isinstance(c, C.ScramCredentialUpsertion)],
        deletions=[c for c in changes if isinstance(c, C.ScramCredentialDeletion)],
    )
    plan = scram_ops.alter(image, request, DECOY_KEY)
    assert not plan.failed, plan.response.status
    errors = {r.user: C.ErrorCode.Name(r.error) if r.error else "" for r in plan.response.results}
    return replay(image, *plan.records), errors


def test_the_log_holds_the_derived_keys_never_the_password() -> None:
    plan = scram_ops.alter(
        EMPTY,
        C.AlterUserScramCredentialsRequest(upsertions=[upsertion("alice", password="hunter2")]),
        DECOY_KEY,
    )
    record, decoy_key = plan.records
    assert decoy_key.scram_decoy_key.key == DECOY_KEY  # the first credential brings the cluster's
    salted = scram.salted_password(SHA512, "hunter2", SALT, 4096)
    written = record.SerializeToString()
    assert b"hunter2" not in written and salted not in written
    image = replay(EMPTY, record)
    kept = image.scram_credentials[("alice", SHA512)]
    assert kept == scram.credential(SHA512, salted, SALT, 4096)
    assert scram.password_matches(SHA512, kept, "hunter2") and not scram.password_matches(
        SHA512, kept, "hunter3"
    )


def test_a_new_password_replaces_the_old_and_a_delete_removes_it() -> None:
    image, errors = alter(EMPTY, upsertion("alice", password="one"), upsertion("alice", SHA256))
    assert errors == {"alice": ""}
    image, _ = alter(image, upsertion("alice", password="two"))
    assert scram.password_matches(SHA512, image.scram_credentials[("alice", SHA512)], "two")
    image, errors = alter(image, C.ScramCredentialDeletion(name="alice", mechanism=SHA256))
    assert errors == {"alice": ""} and list(image.scram_credentials) == [("alice", SHA512)]


def test_one_bad_change_keeps_all_of_that_users_changes_out_and_no_one_elses() -> None:
    image, errors = alter(
        EMPTY,
        upsertion("alice"),
        upsertion("alice", SHA256, iterations=1000),
        upsertion("bob", "SCRAM-SHA-1"),
        upsertion("carol", SHA256),
        upsertion("carol", SHA256),
        C.ScramCredentialDeletion(name="dave", mechanism=SHA512),
        upsertion("", SHA256),
        upsertion("erin"),
    )
    assert errors == {
        "alice": "UNACCEPTABLE_CREDENTIAL",
        "bob": "UNSUPPORTED_SASL_MECHANISM",
        "carol": "DUPLICATE_RESOURCE",
        "dave": "RESOURCE_NOT_FOUND",
        "": "UNACCEPTABLE_CREDENTIAL",
        "erin": "",
    }
    assert list(image.scram_credentials) == [("erin", SHA512)]


def test_bad_salted_passwords_and_salts_are_refused_by_name() -> None:
    short = upsertion("alice")
    short.salted_password = b"x" * 32
    no_salt = upsertion("bob")
    no_salt.salt = b""
    plan = scram_ops.alter(EMPTY, C.AlterUserScramCredentialsRequest(upsertions=[short, no_salt]), DECOY_KEY)
    messages = {r.user: r.message for r in plan.response.results}
    assert messages == {
        "alice": "upsertion.salted_password: 32 bytes, SCRAM-SHA-512 makes 64",
        "bob": "upsertion.salt: empty",
    }
    assert plan.records == []


def test_describe_names_mechanisms_and_iterations_and_unknown_users() -> None:
    image = replay(
        EMPTY, m.scram_credential("alice", SHA512), m.scram_credential("alice", SHA256, iterations=8192)
    )
    every = scram_ops.describe(image, C.DescribeUserScramCredentialsRequest())
    [alice] = every.users
    assert alice.user == "alice" and alice.error == C.NONE
    assert [(c.mechanism, c.iterations) for c in alice.credentials] == [(SHA256, 8192), (SHA512, 4096)]
    asked = scram_ops.describe(image, C.DescribeUserScramCredentialsRequest(users=["bob", "alice", "alice"]))
    assert [(u.user, C.ErrorCode.Name(u.error)) for u in asked.users] == [
        ("bob", "RESOURCE_NOT_FOUND"),
        ("alice", "DUPLICATE_RESOURCE"),
        ("alice", "DUPLICATE_RESOURCE"),
    ]


def test_changing_credentials_needs_alter_and_listing_them_describe_on_the_cluster() -> None:
    alice = Principal("User:alice", CLIENT)
    admin = Principal("User:CN=admin,OU=client,O=raftka", CLIENT)
    describe_acl = Acl("CLUSTER", "kafka-cluster", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW")
    policy = controller_policy(Authorizer([admin.name], lambda: {describe_acl.id: describe_acl}))
    alter_request = C.AlterUserScramCredentialsRequest(upsertions=[upsertion("bob")])
    refused = policy("AlterUserScramCredentials", alice, None, alter_request)
    assert refused is not None and refused.code == C.CLUSTER_AUTHORIZATION_FAILED
    assert "User:alice may not ALTER the cluster" in refused.message
    assert policy("AlterUserScramCredentials", admin, None, alter_request) is None
    assert (
        policy("DescribeUserScramCredentials", alice, None, C.DescribeUserScramCredentialsRequest()) is None
    )
    nobody = Principal("User:mallory", CLIENT)
    assert (
        policy("DescribeUserScramCredentials", nobody, None, C.DescribeUserScramCredentialsRequest())
        is not None
    )


def test_the_first_credential_brings_the_clusters_decoy_key_and_it_never_changes() -> None:
    image, _ = alter(EMPTY, upsertion("alice"))
    assert image.scram_decoy_key == DECOY_KEY
    again = scram_ops.alter(
        image, C.AlterUserScramCredentialsRequest(upsertions=[upsertion("bob")]), bytes(scram.DECOY_KEY_BYTES)
    )
    assert [r.WhichOneof("record") for r in again.records] == ["user_scram_credential"]
    other = pb.MetadataRecord(scram_decoy_key=pb.ScramDecoyKeyRecord(key=bytes(scram.DECOY_KEY_BYTES)))
    assert replay(image, other).scram_decoy_key == DECOY_KEY  # the first one stays
    assert decode_image(encode_image(image)).scram_decoy_key == DECOY_KEY  # snapshots carry it
