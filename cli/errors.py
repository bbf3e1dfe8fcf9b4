"""The one exception type commands raise for failures the user can act on."""

from __future__ import annotations


class CliError(Exception):
    """Printed as ``raftka: error: <message>`` with exit status 1, never as a traceback."""
