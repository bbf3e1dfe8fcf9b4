"""The Spark session the audit runs in: embedded by default, any master when asked.

Java is checked before pyspark starts a JVM, so a machine without it gets one line
saying what to install instead of a py4j stack trace. The embedded session has no web UI
(it lives for one command); on a cluster the driver keeps Spark's, which the master's
page links to and where its users watch the job (``spark.ui.port``, 4040 by default).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from raftka.audit.source import MetadataDataSource

JAVA_HELP = (
    "the audit runs on Spark, which needs Java 17 or later: install it (Debian/Ubuntu: "
    "apt-get install openjdk-17-jre-headless; macOS: brew install openjdk@17) or set JAVA_HOME"
)
JAVA_FEATURE_MIN = 17
JAVA_VERSION_RE = re.compile(r'version "(\d+)(?:\.(\d+))?')
SHUFFLE_PARTITIONS = 4  # the audit's shuffles are small: a few partitions, not Spark's 200
# The embedded JVM lives for one audit: the optimizing compiler's work does not pay back
# in it (the tables of the 10M-record history took 38 CPU s with the quick compiler
# alone, 50 with both). With the quick compiler alone the JVM reserves only 48 MB for
# compiled code, which Spark's generated code fills within minutes (a 10M-record audit
# run twice in one session did): the JVM then stops compiling and runs the rest of the
# audit interpreted. 256 MB is Spark's own recommendation for code-heavy jobs.
LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"


class JavaMissing(RuntimeError):
    """No usable Java: the message says what to install."""


def java_version() -> str:
    """The ``java -version`` line of the Java Spark would use; JavaMissing without one, or
    with one older than Spark 4 runs on (it would fail later, inside the JVM)."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if java is None or not Path(java).exists():
        raise JavaMissing(JAVA_HELP)
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaMissing(f"{java} does not run ({exc}); {JAVA_HELP}") from None
    first = (done.stderr or done.stdout).strip().splitlines()
    if done.returncode != 0 or not first:
        raise JavaMissing(f"{java} -version failed; {JAVA_HELP}")
    feature = java_feature_version(first[0])
    if feature is not None and feature < JAVA_FEATURE_MIN:
        raise JavaMissing(f"{java} is Java {feature} ({first[0]}); {JAVA_HELP}")
    return first[0]


def java_feature_version(line: str) -> int | None:
    """17 from 'openjdk version "17.0.9" 2023-10-17', 8 from 'java version "1.8.0_392"'."""
    found = JAVA_VERSION_RE.search(line)
    if found is None:
        return None
    major, minor = int(found[1]), int(found[2] or 0)
    return minor if major == 1 else major


def session(master: str | None = "local[2]", *, driver_memory: str = "4g") -> SparkSession:
    """A session with the data source registered; ``master`` None keeps spark-submit's."""
    java_version()
    builder = (
        SparkSession.builder.appName("raftka-audit")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", driver_memory)
        .config("spark.python.worker.reuse", "true")
    )
    if master is not None:
        builder = builder.master(master)
        if master.startswith("local"):  # workers run this Python, where audit/ is installed
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            builder = builder.config("spark.driver.extraJavaOptions", LOCAL_JVM_OPTIONS)
            builder = builder.config("spark.ui.enabled", "false")
    with stdout_to_stderr():  # the JVM starts here, and inherits the descriptors it sees
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(MetadataDataSource)
    return spark


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Processes started inside get this process's stderr as their stdout: the JVM writes
    its own warnings to stdout ("CodeCache is full"), where they would land in the middle
    of a command's ``--output json``. This process's stdout is its own again after."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@contextmanager
def owned_session(master: str | None, *, driver_memory: str = "4g") -> Iterator[SparkSession]:
    """``session``, stopped afterwards unless it was already running in this process
    (a notebook's, or a test's shared one): a command never stops a session it did not start."""
    running = SparkSession.getActiveSession()
    spark = session(master, driver_memory=driver_memory)
    try:
        yield spark
    finally:
        if running is None:
            spark.stop()
