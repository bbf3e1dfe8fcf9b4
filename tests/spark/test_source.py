"""The ``raftka-metadata`` data source: the same rows as the plain decoder, one Spark
partition per file, Arrow batches of exactly the declared schema, options checked."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql.pandas.types import to_arrow_schema

from raftka.audit.files import discover
from raftka.audit.plain import audit_paths
from raftka.audit.schema import ROW_SCHEMA
from raftka.audit.source import SPARK_SCHEMA
from tests.unit.audit_incident import Incident


def test_the_declared_schema_is_the_arrow_schema_read_yields() -> None:
    assert to_arrow_schema(SPARK_SCHEMA, timezone="UTC").equals(ROW_SCHEMA)


def test_rows_equal_the_plain_decoders_for_the_same_folders(spark: Any, incident: Incident) -> None:
    frame = spark.read.format("raftka-metadata").load(str(incident.root))
    assert frame.schema == SPARK_SCHEMA
    from_spark = sorted(tuple(r) for r in frame.collect())
    plain = sorted(tuple(r) for r in audit_paths([incident.root]).rows)
    assert from_spark == plain


def test_one_partition_per_file(spark: Any, incident: Incident) -> None:
    frame = spark.read.format("raftka-metadata").option("batchRows", "7").load(str(incident.root))
    files = discover([incident.root])
    assert frame.rdd.getNumPartitions() == len(files)
    per_partition = frame.rdd.mapPartitions(lambda rows: [sorted({r.file for r in rows})]).collect()
    assert sorted(f for fs in per_partition for f in fs) == sorted(f.path for f in files)
    assert all(len(fs) <= 1 for fs in per_partition)


def test_paths_node_archive_and_snapshot_options(spark: Any, incident: Incident) -> None:
    def read() -> Any:  # a reader keeps its options: a fresh one each time
        return spark.read.format("raftka-metadata")

    both = read().option("paths", f"{incident.node_dir(1)},{incident.node_dir(3)}").load()
    assert sorted(r.node for r in both.select("node").distinct().collect()) == ["1", "3"]
    listed = read().load([str(incident.node_dir(1)), str(incident.node_dir(2))])
    assert sorted(r.node for r in listed.select("node").distinct().collect()) == ["1", "2"]
    named = read().option("node", "controller-a").load(str(incident.node_dir(1)))
    assert {r.node for r in named.select("node").distinct().collect()} == {"controller-a"}
    live = (
        read()
        .option("includeArchive", "false")
        .option("includeSnapshots", "false")
        .load(str(incident.node_dir(1)))
    )
    assert live.filter("archived or source = 'snapshot'").count() == 0 and live.count() > 0
    no_json = read().option("recordJson", "false").load(str(incident.node_dir(3)))
    assert no_json.filter("json is not null and type not in ('LEADER_CHANGE')").count() == 0


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("batchRows", "0", "batchRows"),
        ("includeArchive", "yes", "includeArchive"),
        ("colour", "red", "colour"),
    ],
)
def test_bad_options_are_named(spark: Any, incident: Incident, option: str, value: str, named: str) -> None:
    with pytest.raises(PySparkException, match=named):
        spark.read.format("raftka-metadata").option(option, value).load(str(incident.root)).count()


def test_a_missing_path_is_named(spark: Any, tmp_path: Any) -> None:
    with pytest.raises(PySparkException, match="does not exist"):
        spark.read.format("raftka-metadata").load(str(tmp_path / "nowhere")).count()
