"""``raftka-metadata``: a PySpark data source over metadata log files (Python Data Source API).

    spark.dataSource.register(MetadataDataSource)
    spark.read.format("raftka-metadata").load("/data/node-1")            # one node, or a folder of nodes
    spark.read.format("raftka-metadata").option("paths", "a,b").load()   # several

One input partition per file (segment or snapshot, archive included); ``read`` decodes it
with ``raftka.audit.decode`` (the controllers' own record code) and yields Arrow record batches
of the declared schema (``raftka.audit.schema``). Options, each checked with an error naming it:
``node`` (the node id, when one node folder is given), ``includeArchive`` and
``includeSnapshots`` (true/false, default true), ``batchRows`` (rows per Arrow batch,
default 65536), ``recordJson`` (true/false, default true: the whole record as JSON).
Files are listed by ``raftka.audit.files``, not by Spark, whose listing skips ``_``-names;
a relative path is the driver's (as for Spark's file sources), and each partition names its
file from the root, as executors run in folders of their own. A file a task cannot open is
one UNREADABLE row, not damage.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from raftka.audit.decode import decode_file
from raftka.audit.files import AuditInputError, LogFile, discover
from raftka.audit.schema import ROW_SCHEMA, record_batches

NAME = "raftka-metadata"
BATCH_ROWS_DEFAULT = 65_536
BATCH_ROWS_MAX = 1 << 20
SPARK_SCHEMA: StructType = from_arrow_schema(ROW_SCHEMA)


@dataclass(frozen=True)
class Options:
    paths: list[str]
    node: str | None
    include_archive: bool
    include_snapshots: bool
    batch_rows: int
    record_json: bool


def parse_options(options: Mapping[str, str]) -> Options:
    """The reader's options, checked; AuditInputError names the option that is wrong."""
    known = {"path", "paths", "node", "includearchive", "includesnapshots", "batchrows", "recordjson"}
    unknown = sorted(k for k in options if k.lower() not in known)
    if unknown:
        raise AuditInputError(f"{unknown[0]}: unknown option (known: node, paths, includeArchive, "
                              "includeSnapshots, batchRows, recordJson)")  # fmt: skip
    get = {k.lower(): v for k, v in options.items()}.get
    paths = _paths(get("path"), get("paths"))
    batch_rows = get("batchrows", str(BATCH_ROWS_DEFAULT))
    if not (batch_rows.isascii() and batch_rows.isdigit()) or not 1 <= int(batch_rows) <= BATCH_ROWS_MAX:
        raise AuditInputError(f"batchRows: expected 1 to {BATCH_ROWS_MAX}, got {batch_rows!r}")
    node = get("node")
    if node is not None and not node.strip():
        raise AuditInputError("node: empty")
    return Options(
        paths,
        node,
        _flag("includeArchive", get("includearchive")),
        _flag("includeSnapshots", get("includesnapshots")),
        int(batch_rows),
        _flag("recordJson", get("recordjson")),
    )


def _flag(name: str, value: str | None) -> bool:
    if value is None:
        return True
    if value.lower() not in ("true", "false"):
        raise AuditInputError(f"{name}: expected true or false, got {value!r}")
    return value.lower() == "true"


def _paths(path: str | None, paths: str | None) -> list[str]:
    """``load(p)`` sets ``path``; ``load([a, b])`` sets ``paths`` to a JSON list; users may
    also give ``paths`` as a comma-separated list."""
    found = [path] if path else []
    if paths:
        try:
            listed = json.loads(paths) if paths.lstrip().startswith("[") else paths.split(",")
        except ValueError as exc:
            raise AuditInputError(f"paths: not a JSON list or comma-separated paths: {exc}") from None
        if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
            raise AuditInputError("paths: expected a list of strings")
        found += [p.strip() for p in listed if p.strip()]
    if not found:
        raise AuditInputError("paths: give load(PATH) or option paths")
    return found


class _FilePartition(InputPartition):
    def __init__(self, file: LogFile) -> None:
        super().__init__(file)
        self.file = file


class MetadataDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return MetadataReader(parse_options(self.options))


class MetadataReader(DataSourceReader):
    def __init__(self, options: Options) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        o = self.options
        files = discover(
            o.paths, node=o.node, include_archive=o.include_archive, include_snapshots=o.include_snapshots
        )
        return [_FilePartition(f) for f in files]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _FilePartition)
        rows = decode_file(partition.file, with_json=self.options.record_json)
        yield from record_batches(rows, ROW_SCHEMA, self.options.batch_rows)
