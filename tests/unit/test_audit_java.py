"""The audit says what to install when the Java it would start is missing or too old,
instead of a stack trace from inside the JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftka.audit.spark import JavaMissing, java_feature_version, java_version


@pytest.mark.parametrize(
    ("line", "feature"),
    [
        ('openjdk version "17.0.9" 2023-10-17', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "11.0.21" 2023-10-17 LTS', 11),
        ("something else entirely", None),
    ],
)
def test_the_feature_version_is_read_off_the_version_line(line: str, feature: int | None) -> None:
    assert java_feature_version(line) == feature


def _fake_java(home: Path, line: str) -> None:
    java = home / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{line}' >&2\n")
    java.chmod(0o755)


def test_a_java_older_than_17_is_refused_with_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_java(tmp_path, 'openjdk version "11.0.21" 2023-10-17')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaMissing, match=r"is Java 11 .*needs Java 17 or later: install it"):
        java_version()


def test_java_17_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_java(tmp_path, 'openjdk version "17.0.9" 2023-10-17')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert java_version() == 'openjdk version "17.0.9" 2023-10-17'
