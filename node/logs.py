"""structlog set-up for server processes: JSON lines (or console), quiet at INFO."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator

import structlog


def configure_logging(level: str = "info", fmt: str = "json", **bound: object) -> None:
    """Send every log line to stderr, bound with ``bound`` (node_id, role...)."""
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(**bound)


class RateLimitedLog:
    """At most one line per ``interval_s`` for what a client can trigger at will; each line
    counts the ones left out since the last."""

    def __init__(self, logger: structlog.typing.FilteringBoundLogger, interval_s: float) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._next_s = float("-inf")
        self._left_out = 0

    def log(self, level: int, event: str, **fields: object) -> None:
        """``level``: a ``logging`` level (``logging.WARNING``)."""
        now = time.monotonic()
        if now < self._next_s:
            self._left_out += 1
            return
        self._next_s = now + self._interval_s
        self._logger.log(level, event, left_out=self._left_out, **fields)
        self._left_out = 0


class _CurrentStderr:
    """Whatever ``sys.stderr`` is when a line is written (tests swap it)."""

    def write(self, text: str) -> None:
        sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


@contextlib.contextmanager
def command_logging() -> Iterator[None]:
    """For a command (not a server): library logs go to stderr, warnings and worse only,
    so stdout holds just the command's answer; the previous set-up comes back after."""
    saved = structlog.get_config()
    structlog.configure(
        processors=[structlog.processors.add_log_level, structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(_CurrentStderr()),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        structlog.configure(**saved)
