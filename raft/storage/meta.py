"""``meta.properties``: ties a data directory to one cluster and one node, as in Kafka.

Formatting is the one explicit step that gives a directory its identity, so a node never
starts on an empty or foreign disk by accident: it refuses unformatted storage, and storage
formatted for another node or cluster. Formatting never overwrites an identity: the same
values again are a no-op; different values are refused, or left as they are with
``ignore_formatted`` (Kafka's ``--ignore-formatted``).

Formatting also gives the directory a random ``directory.id`` (KIP-858): the identity of
this storage, so a replaced disk is a new replica (KIP-853). A controller of a dynamic
quorum is formatted with its bootstrap voter set (``--standalone`` or
``--initial-controllers``), kept beside meta.properties in ``bootstrap-voters.json`` (a
VotersRecord); without one, the node uses the static ``controller.quorum.voters``.
"""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from raftka.raft.effects import QuorumStateData
from raftka.raft.storage import fsio, layout
from raftka.raft.storage.base import NotFormattedError, StorageError
from raftka.raft.storage.quorum_file import QuorumStateFile
from raftka.raft.voters import VoterSet

META_PROPERTIES = "meta.properties"
BOOTSTRAP_VOTERS = "bootstrap-voters.json"
VERSION = 1
_CLUSTER_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    version: int = VERSION
    # "" in a directory formatted before directory ids; random per format, so not part of
    # what a format compares (the same cluster and node again is a no-op)
    directory_id: str = field(default="", compare=False)


def new_cluster_id() -> str:
    """A random UUID as Kafka writes one: 22 characters of URL-safe base64, no padding.

    Like Kafka, never one starting with ``-``, which a command line would take for a flag.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def new_directory_id() -> str:
    """A random directory id: the same shape as a cluster id (Kafka's Uuid)."""
    return new_cluster_id()


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
    bootstrap_voters: VoterSet | None = None,
) -> bool:
    """Write ``meta.properties`` into ``data_dir``; True if it was written now.

    ``initial_cluster``: this node starts a brand-new cluster, so it has never voted and
    may vote at once. Without it, empty storage is treated as a disk that was lost: the
    node votes only after it has caught up (see raft/core.py), which is always safe but
    needs every voter up once when a cluster is first started.

    ``bootstrap_voters``: a dynamic quorum's initial voter set (KIP-853); if it names this
    node, its directory id becomes this directory's, and the node is one of the initial
    voters (``initial_cluster``).

    Raises ValueError for a bad cluster or node id, StorageError when the directory already
    belongs to another cluster or node (unless ``ignore_formatted``, which leaves it be).
    """
    validate_cluster_id(cluster_id)
    if node_id < 0:
        raise ValueError(f"invalid node id {node_id}: must be 0 or more")
    mine = bootstrap_voters.get(node_id) if bootstrap_voters is not None else None
    wanted = MetaProperties(
        cluster_id, node_id, directory_id=mine.directory_id if mine else new_directory_id()
    )
    try:
        current = read_meta(data_dir)
    except NotFormattedError:
        data_dir.mkdir(parents=True, exist_ok=True)
        if bootstrap_voters is not None:
            fsio.write_atomically(
                data_dir / BOOTSTRAP_VOTERS, bootstrap_voters.encode(), temp_suffix=layout.TMP_SUFFIX
            )
        if initial_cluster or mine is not None:
            log_dir = layout.log_dir(data_dir)
            log_dir.mkdir(exist_ok=True)
            state = QuorumStateFile(log_dir / layout.QUORUM_STATE_FILE)
            state.write(QuorumStateData(epoch=0, voted_id=-1, leader_id=-1, recovering=False))
            state.close()
        fsio.write_atomically(data_dir / META_PROPERTIES, _encode(wanted), temp_suffix=layout.TMP_SUFFIX)
        return True
    if (current.cluster_id, current.node_id) == (cluster_id, node_id) or ignore_formatted:
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
        directory_id = properties.get("directory.id", "")
        validate_cluster_id(cluster_id)
        if directory_id:
            validate_cluster_id(directory_id)
    except (KeyError, ValueError) as exc:
        raise StorageError(f"{path} is damaged ({exc}): it needs version, cluster.id and node.id") from exc
    if version != VERSION:
        raise StorageError(f"{path} has version {version}; this raftka reads version {VERSION}")
    return MetaProperties(cluster_id, node_id, version, directory_id)


def read_bootstrap_voters(data_dir: Path) -> VoterSet | None:
    """The voter set this directory was formatted with (None: the static configured set)."""
    path = data_dir / BOOTSTRAP_VOTERS
    try:
        return VoterSet.decode(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise StorageError(f"{path} is damaged: {exc}") from exc


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
        + (f"directory.id={meta.directory_id}\n" if meta.directory_id else "")
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
