"""CPU time of local processes, read from ``/proc/<pid>/stat`` (Linux).

``perf ... --cpu`` samples every node of the local cluster when measuring starts and
when it stops, and divides the difference by the operations done in between, so anyone
can see where a commit's cost goes: the leader, each follower, each broker.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from raftka.command.errors import CliError
from raftka.command.local import NodeRecord

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int, proc: Path = Path("/proc")) -> float:
    """User plus system CPU seconds the process has used so far."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError as e:
        raise CliError(f"cannot read CPU time of process {pid}: {e}") from e
    # The command name (field 2) may hold spaces and parens; the fields after its last
    # closing paren are fixed: state is field 3, utime 14 and stime 15.
    fields = stat[stat.rindex(")") + 2 :].split()
    user_ticks, system_ticks = int(fields[11]), int(fields[12])
    return (user_ticks + system_ticks) / CLOCK_TICKS_PER_S


def node_label(node: NodeRecord) -> str:
    return f"{node.role}-{node.id}"


def sample(nodes: Sequence[NodeRecord]) -> dict[str, float]:
    """CPU seconds per running node, keyed by ``node_label``."""
    missing = [node_label(n) for n in nodes if n.pid is None]
    if missing:
        raise CliError(
            f"--cpu: nodes {', '.join(missing)} are not running; start them with 'raftka cluster up'"
        )
    return {node_label(n): cpu_seconds(n.pid) for n in nodes if n.pid is not None}


def per_operation_ms(
    before: Mapping[str, float], after: Mapping[str, float], operations: int
) -> dict[str, float]:
    """CPU milliseconds each node spent per operation between two samples."""
    if operations <= 0:
        return {}
    return {label: round((after[label] - before[label]) * 1e3 / operations, 3) for label in before}
