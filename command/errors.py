"""The one exception type commands raise for failures the user can act on."""

from __future__ import annotations

EXIT_FAILURE = 1


class CliError(Exception):
    """Printed as ``raftka: error: <message>``, never as a traceback; exit status ``status``
    (1 unless the command gives its own meaning to its statuses, as ``raftka audit`` does)."""

    def __init__(self, message: str, *, status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status
