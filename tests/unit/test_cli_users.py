"""``raftka users``: the password comes from a file or stdin (never argv), one trailing
newline dropped, an empty, over-long or non-UTF-8 one refused before any request; ``add``
sets both SCRAM mechanisms unless told, and a user's refusal is the command's error."""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import Any

import pytest

from raftka.cli import users
from raftka.cli.main import build_parser
from raftka.client.types import ScramUpsertion, UserResult
from raftka.command.errors import CliError


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["users", *argv])


class FakeAdmin:
    def __init__(self, results: list[UserResult]) -> None:
        self.results = results
        self.upsertions: list[ScramUpsertion] = []

    def __enter__(self) -> FakeAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def alter_user_scram_credentials(self, upsertions: Any = (), deletions: Any = ()) -> list[UserResult]:
        self.upsertions.extend(upsertions)
        return self.results


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    fake = FakeAdmin([UserResult("alice", None, "")])
    monkeypatch.setattr(users, "open_admin", lambda args: fake)
    return fake


def test_add_reads_the_password_file_and_sets_both_mechanisms(admin: FakeAdmin, tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret\n")
    args = parse("add", "alice", "--password-file", str(tmp_path / "pw"))
    assert args.func(args) == 0
    assert [(u.user, u.mechanism, u.password, u.iterations) for u in admin.upsertions] == [
        ("alice", "SCRAM-SHA-256", "s3cret", 8192),
        ("alice", "SCRAM-SHA-512", "s3cret", 8192),
    ]


def test_add_reads_stdin(admin: FakeAdmin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"from stdin\r\n")))
    args = parse("add", "alice", "--password-stdin", "--mechanism", "SCRAM-SHA-512")
    assert args.func(args) == 0
    assert [(u.mechanism, u.password) for u in admin.upsertions] == [("SCRAM-SHA-512", "from stdin")]


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"\n", "empty"), (b"x" * 1025, "longer than 1024 bytes"), (b"\xff\xfe", "not UTF-8")],
)
def test_bad_passwords_are_refused_before_any_request(
    admin: FakeAdmin, tmp_path: Path, content: bytes, problem: str
) -> None:
    (tmp_path / "pw").write_bytes(content)
    args = parse("add", "alice", "--password-file", str(tmp_path / "pw"))
    with pytest.raises(CliError, match=problem):
        args.func(args)
    assert admin.upsertions == []


def test_a_password_cannot_be_given_on_the_command_line() -> None:
    with pytest.raises(SystemExit):
        parse("add", "alice", "--password", "s3cret")


def test_a_refused_user_is_the_commands_error(admin: FakeAdmin, tmp_path: Path) -> None:
    admin.results = [
        UserResult("alice", "UNACCEPTABLE_CREDENTIAL", "upsertion.iterations: 100 is not in [4096, 16384]")
    ]
    (tmp_path / "pw").write_text("s3cret")
    args = parse("add", "alice", "--password-file", str(tmp_path / "pw"), "--iterations", "100")
    with pytest.raises(CliError, match="user 'alice': UNACCEPTABLE_CREDENTIAL: upsertion.iterations"):
        args.func(args)
