"""What the Spark commands (``raftka audit``, ``raftka perf audit``) share: the check of
``--driver-memory`` and the exit status of an audit that could not run."""

from __future__ import annotations

import re

from raftka.command.errors import CliError

EXIT_CANNOT_AUDIT = 2  # distinct from 1, a failed check: a gate must tell the two apart
MEMORY_RE = re.compile(r"[1-9][0-9]*[kmgt]", re.IGNORECASE)


def check_driver_memory(value: str) -> None:
    if not MEMORY_RE.fullmatch(value):
        raise CliError(
            f"--driver-memory: expected a size like 4g or 512m, got {value!r}", status=EXIT_CANNOT_AUDIT
        )
