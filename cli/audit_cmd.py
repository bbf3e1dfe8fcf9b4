"""``raftka audit [DIR...] --out OUT``: the Spark audit of the cluster's metadata history.

Without DIR it audits every node of the local cluster (``raftka cluster up``). Spark runs
embedded (``--master local[2]``) unless told otherwise; pyspark is imported only when this
command runs, so no other command needs it or Java. Exit status: 0 when every check
passed, 1 when an error-level check failed (so the command can gate CI or a cron job),
2 when the audit could not run (a bad path, option or ``--out``, a file that could not be
read, no Java, no audit extra). Paths may be relative or ``file:`` URIs: each is made
absolute here, before a Spark executor (which runs in a folder of its own) is given it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from raftka.command import local, output
from raftka.command.errors import CliError
from raftka.command.spark_args import EXIT_CANNOT_AUDIT, check_driver_memory

INSTALL_HELP = (
    "the audit needs raftka's audit extra: pip install 'raftka[audit]' (pyspark, pyarrow, matplotlib, pandas)"
)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = commands.add_parser(
        "audit", help="audit the metadata log history on Spark: tables, checks, report"
    )
    audit.add_argument(
        "paths", nargs="*", metavar="DIR",
        help="node data dirs, log dirs or folders of them, paths or file: URIs (default: every node of the local cluster)",
    )  # fmt: skip
    audit.add_argument(
        "--out", required=True, help="folder for tables/, summary.json and report.html (a path or file: URI)"
    )
    audit.add_argument(
        "--master", default="local[2]", help="Spark master (default local[2]: embedded, 2 cores)"
    )
    audit.add_argument("--driver-memory", default="4g", help="Spark driver memory, e.g. 4g (default)")
    audit.add_argument("--no-archive", action="store_true", help="leave the nodes' archive/ folders out")
    audit.add_argument("--no-snapshots", action="store_true", help="leave snapshot files out")
    audit.add_argument("--dir", type=Path, help="local cluster directory, when no DIR is given")
    output.add_output_option(audit)
    audit.set_defaults(func=run_audit)


def run_audit(args: argparse.Namespace) -> int:
    check_driver_memory(args.driver_memory)
    if not args.master.strip():
        raise CliError("--master: empty", status=EXIT_CANNOT_AUDIT)
    given = args.paths or [n.data_dir for n in local.load(local.resolve_dir(args.dir)).nodes]
    try:
        from raftka.audit.files import AuditInputError, local_path
        from raftka.audit.job import run
        from raftka.audit.out import claim
        from raftka.audit.spark import JavaMissing, owned_session
    except ImportError as exc:
        raise CliError(f"{INSTALL_HELP} ({exc})", status=EXIT_CANNOT_AUDIT) from None
    try:
        paths = [str(local_path(p, "paths")) for p in given]
        out = local_path(args.out, "--out")
        claim(out)  # before a JVM starts: a folder the audit may not take is refused at once
        with owned_session(args.master, driver_memory=args.driver_memory) as spark:
            summary = run(spark, paths, out, include_archive=not args.no_archive,
                          include_snapshots=not args.no_snapshots)  # fmt: skip
    except (JavaMissing, AuditInputError) as exc:
        raise CliError(str(exc), status=EXIT_CANNOT_AUDIT) from None
    print(output.to_json(summary) if args.output == "json" else format_summary(summary, out))
    return int(summary["exit_status"])


def format_summary(summary: dict[str, Any], out: Path) -> str:
    history = summary["history"]
    checks = [
        (c["check"], "pass" if c["passed"] else "FAIL", c["error"], c["warning"], c["info"])
        for c in summary["checks"]
    ]
    return "\n".join(
        [
            f"Audit {summary['status']}: nodes {', '.join(summary['inputs']['nodes'])}, offsets "
            f"{history['start_offset']}-{history['end_offset']} ({history['records']} records)",
            output.table(("CHECK", "RESULT", "ERRORS", "WARNINGS", "NOTES"), checks),
            output.fields(list(summary["headline"].items())),
            f"Tables:  {out / 'tables'}",
            f"Summary: {out / 'summary.json'}",
            f"Report:  {out / 'report.html'}",
        ]
    )
