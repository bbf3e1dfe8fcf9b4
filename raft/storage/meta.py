"""``meta.properties``: ties a data directory to one cluster and one node, as in Kafka.

Formatting is the one explicit step that gives a directory its identity, so a node never
starts on an empty or foreign disk by accident: it refuses unformatted storage, and storage
formatted for another node or cluster. Formatting never overwrites an identity: the same
values again are a no-op; different values are refused, or left as they are with
``ignore_formatted`` (Kafka's ``--ignore-formatted``).
"""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from raftka.raft.effects import QuorumStateData
from raftka.raft.storage import fsio, layout
from raftka.raft.storage.base import NotFormattedError, StorageError
from raftka.raft.storage.quorum_file import QuorumStateFile

META_PROPERTIES = "meta.properties"
VERSION = 1
_CLUSTER_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    version: int = VERSION


def new_cluster_id() -> str:
    """A random UUID as Kafka writes one: 22 characters of URL-safe base64, no padding.

    Like Kafka, never one starting with ``-``, which a command line would take for a flag.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def validate_cluster_id(cluster_id: str) -> None:
    if not _CLUSTER_ID_RE.fullmatch(cluster_id):
        raise ValueError(
            f"invalid cluster id {cluster_id!r}: use 1 to 64 characters of A-Z a-z 0-9 _ - "
            "(`raftka storage random-uuid` makes one)"
        )


def format_storage(
    data_dir: Path,
    cluster_id: str,
    node_id: int,
    *,
    ignore_formatted: bool = False,
    initial_cluster: bool = False,
) -> bool:
    """Write ``meta.properties`` into ``data_dir``; True if it was written now.

    ``initial_cluster``: this node starts a brand-new cluster, so it has never voted and
    may vote at once. Without it, empty storage is treated as a disk that was lost: the
    node votes only after it has caught up (see raft/core.py), which is always safe but
    needs every voter up once when a cluster is first started.

    Raises ValueError for a bad cluster or node id, StorageError when the directory already
    belongs to another cluster or node (unless ``ignore_formatted``, which leaves it be).
    """
    validate_cluster_id(cluster_id)
    if node_id < 0:
        raise ValueError(f"invalid node id {node_id}: must be 0 or more")
    wanted = MetaProperties(cluster_id, node_id)
    try:
        current = read_meta(data_dir)
    except NotFormattedError:
        data_dir.mkdir(parents=True, exist_ok=True)
        if initial_cluster:
            log_dir = layout.log_dir(data_dir)
            log_dir.mkdir(exist_ok=True)
            state = QuorumStateFile(log_dir / layout.QUORUM_STATE_FILE)
            state.write(QuorumStateData(epoch=0, voted_id=-1, leader_id=-1, recovering=False))
            state.close()
        fsio.write_atomically(data_dir / META_PROPERTIES, _encode(wanted), temp_suffix=layout.TMP_SUFFIX)
        return True
    if current == wanted or ignore_formatted:
        return False
    raise StorageError(
        f"storage at {data_dir} is already formatted for cluster.id={current.cluster_id} "
        f"node.id={current.node_id}; refusing to reformat it for cluster.id={cluster_id} node.id={node_id}. "
        "Use this node's own data dir, or move this one away if its data is no longer wanted"
    )


def read_meta(data_dir: Path) -> MetaProperties:
    path = data_dir / META_PROPERTIES
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFormattedError(
            f"storage at {data_dir} is not formatted: run `raftka storage format --config FILE --cluster-id ID`"
        ) from None
    except UnicodeDecodeError as exc:
        raise StorageError(f"{path} is not a properties file: {exc}") from exc
    properties = _parse_properties(text)
    try:
        version = int(properties["version"])
        cluster_id = properties["cluster.id"]
        node_id = int(properties["node.id"])
        validate_cluster_id(cluster_id)
    except (KeyError, ValueError) as exc:
        raise StorageError(f"{path} is damaged ({exc}): it needs version, cluster.id and node.id") from exc
    if version != VERSION:
        raise StorageError(f"{path} has version {version}; this raftka reads version {VERSION}")
    return MetaProperties(cluster_id, node_id, version)


def check_meta(data_dir: Path, node_id: int, cluster_id: str | None = None) -> MetaProperties:
    """What a node checks before it starts: its storage is formatted, for it, in its cluster."""
    meta = read_meta(data_dir)
    if meta.node_id != node_id:
        raise StorageError(
            f"storage at {data_dir} was formatted for node.id={meta.node_id} but this node is "
            f"node.id={node_id}: point data_dir at this node's own directory"
        )
    if cluster_id is not None and meta.cluster_id != cluster_id:
        raise StorageError(
            f"storage at {data_dir} belongs to cluster {meta.cluster_id}, not {cluster_id}: "
            "point data_dir at this node's own directory, or format a new one for this cluster"
        )
    return meta


def _encode(meta: MetaProperties) -> bytes:
    return (
        "#Written by `raftka storage format`. Do not edit: it binds this directory to its cluster.\n"
        f"version={meta.version}\ncluster.id={meta.cluster_id}\nnode.id={meta.node_id}\n"
    ).encode()


def _parse_properties(text: str) -> dict[str, str]:
    """The subset of Java properties Kafka writes: ``key=value`` lines and ``#``/``!`` comments."""
    properties = {}
    for line in text.splitlines():
        line = line.strip()
        if line and line[0] not in "#!":
            key, _, value = line.partition("=")
            properties[key.strip()] = value.strip()
    return properties
