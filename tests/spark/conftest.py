"""One Spark session for every Spark test: ``local[2]``, UI off, few shuffle partitions.

Without Java (or pyspark) the tests skip with what to install; under ``CI=true`` they
fail instead, so the Spark suite can never silently vanish from CI.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.missing_tool import missing
from tests.unit.audit_incident import Incident, build_incident


def require_spark() -> None:
    """Skip (fail under CI=true) when pyspark or Java is missing, saying what to install."""
    try:
        from raftka.audit.spark import JavaMissing, java_version
    except ImportError as exc:
        problem = f"pyspark is not installed ({exc}): pip install -e '.[dev,audit]' (make test does)"
    else:
        try:
            java_version()
            return
        except JavaMissing as exc:
            problem = str(exc)
    missing(f"the Spark tests need pyspark and Java: {problem}")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    require_spark()
    from raftka.audit.spark import session

    spark = session("local[2]", driver_memory="2g")
    yield spark
    spark.stop()


@pytest.fixture(scope="session")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Incident:
    return build_incident(tmp_path_factory.mktemp("incident"))


@pytest.fixture(scope="session")
def audited(
    spark: Any, incident: Incident, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], Path]:
    """The job run once on the incident: its summary and its output folder."""
    from raftka.audit.job import run

    out = tmp_path_factory.mktemp("incident-audit")
    return run(spark, [str(incident.root)], out), out
