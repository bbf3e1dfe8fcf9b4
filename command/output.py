"""Human tables by default, ``--output json`` everywhere: one place for both shapes.

Commands build plain dicts and lists; this module only prints them, so tests can check
what a command reports without parsing text.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from typing import Any

FORMATS = ("table", "json")


def add_output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", choices=FORMATS, default="table", help="table for people (default), json for scripts"
    )


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces, like ``kafka-metadata-quorum.sh``."""
    cells = [list(headers)] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    """``Key:  value`` lines with the values aligned (``describe --status`` style)."""
    width = max(len(key) for key, _ in pairs) + 1
    return "\n".join(f"{key + ':':<{width}} {_cell(value)}" for key, value in pairs)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
