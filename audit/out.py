"""The audit's output folder: new, empty, or one an earlier audit made.

The job replaces what it writes there (``tables/<name>``, ``scratch``, ``summary.json``,
``report.html``), so it must never take a folder that holds anything else: ``--out ~``
would otherwise remove ``~/scratch``. A marker file, written before anything else,
says an audit owns the folder, so a rerun after a crash reuses it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from raftka.audit.files import AuditInputError

MARKER = ".raftka-audit"


def claim(out: Path) -> None:
    """Make ``out`` the audit's, or raise AuditInputError naming ``--out`` and why not."""
    if out.exists() and not out.is_dir():
        raise AuditInputError(f"--out: {out} exists and is not a folder")
    if out.is_dir() and not (out / MARKER).is_file():
        entries = sorted(p.name for p in out.iterdir())
        if entries:
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise AuditInputError(
                f"--out: {out} holds {shown} and no earlier audit made it; give a new or empty folder"
            )
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("raftka audit output: the audit replaces what it wrote here\n")


def write_whole(table: pa.Table, folder: Path, name: str, row_group_size: int | None = None) -> None:
    """Whole or not at all: a retried task replaces its file, readers never see half of one."""
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{name}.partial"  # a dot-name: Spark's reader skips it
    pq.write_table(table, partial, row_group_size=row_group_size)
    os.replace(partial, folder / name)
