"""The Spark session a command starts: its JVM's room for compiled code, and a stdout the
JVM cannot write into."""

from __future__ import annotations

import subprocess
import sys
from typing import Any


def test_the_embedded_jvm_has_room_for_spark_generated_code(spark: Any) -> None:
    """With the quick compiler alone the JVM reserved 48 MB for compiled code: a 10M-record
    audit run twice in one session filled it, and the JVM ran on interpreted."""
    management = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    code = [p for p in management.getMemoryPoolMXBeans() if "Code" in p.getName()]
    reserved_mib = sum(p.getUsage().getMax() for p in code) / (1 << 20)
    assert code and reserved_mib >= 250, [(p.getName(), p.getUsage().getMax()) for p in code]


def test_what_a_started_process_writes_to_stdout_goes_to_stderr_meanwhile() -> None:
    """The JVM prints its warnings to the stdout it inherits; a command's ``--output json``
    must stay JSON."""
    script = (
        "import subprocess, sys\n"
        "from raftka.audit.spark import stdout_to_stderr\n"
        "print('before', flush=True)\n"
        "with stdout_to_stderr():\n"
        "    subprocess.run(['echo', 'from the child'], check=True)\n"
        "print('after', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "before\nafter\n"
    assert "from the child" in done.stderr
