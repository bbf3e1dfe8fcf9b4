"""A node's configuration: one TOML file, every key documented in ``deploy/controller.toml``
and ``deploy/broker.toml``.

Everything is checked at load time, so a bad file stops the node at start with the key
named, instead of surfacing later as a quorum that never forms. Relative paths are
resolved against the config file's directory, so a config and its data can move together.

The broker's log cleaner is configured by ``[log.cleaner]`` (``CleanerConfig``, on
``NodeConfig.log_cleaner``); its per-topic settings are ``raftka.broker.log.config.LogConfig``'s.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raftka.raft.config import RaftConfig
from raftka.raft.snapshot_schedule import SnapshotPolicy
from raftka.security.sasl import mechanisms_problem, parse_mechanisms
from raftka.security.tls import KEYS as TLS_KEYS
from raftka.security.tls import TlsError, TlsFiles, tls_files

MIB = 1 << 20
CONTROLLER = "controller"
BROKER = "broker"
SUPPORTED_ROLES = (CONTROLLER, BROKER)
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "console")
VOTERS_KEY = "controller.quorum.voters"
CLEANER_TABLE = "log.cleaner"
CLEANER_BUFFER_PER_THREAD_MIN = MIB  # Kafka: each cleaner thread's key map needs at least 1 MiB


class ConfigError(Exception):
    """A config value is missing or wrong. The message starts with the key it is about."""


@dataclass(frozen=True, slots=True)
class Voter:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.node_id}@{self.address}"


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 8 * MIB
    archive_segments: bool = False  # move segments below a snapshot to archive/ instead of deleting
    archive_max_bytes: int = 1 << 30  # the oldest archived files go beyond this; 0: no bound


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """A broker's log cleaner (``[log.cleaner]``, Kafka's ``log.cleaner.*``): it compacts the
    partition logs whose topic's ``cleanup.policy`` has ``compact``. On ``NodeConfig.log_cleaner``;
    the per-topic settings are ``raftka.broker.log.config.LogConfig``'s."""

    enable: bool = True  # Kafka's log.cleaner.enable: false, compacted topics grow without bound
    threads: int = 1  # Kafka's log.cleaner.threads: logs cleaned at once
    dedupe_buffer_size: int = 128 * MIB  # Kafka's log.cleaner.dedupe.buffer.size: the key maps' memory, all threads
    io_max_bytes_per_second: int = 0  # Kafka's log.cleaner.io.max.bytes.per.second (read and written); 0: unbounded
    backoff_ms: int = 15_000  # Kafka's log.cleaner.backoff.ms: a cleaner with no log to clean sleeps this long


@dataclass(frozen=True, slots=True)
class JournalConfig(SnapshotPolicy):
    """The journal node's table: when its journal snapshots."""


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    session_timeout_ms: int = 9_000  # a broker without a heartbeat this long is fenced
    max_partitions_per_topic: int = 10_000
    offsets_retention_minutes: int = 10_080  # a group that commits nothing this long loses its offsets
    leader_rebalance_interval_ms: int = 300_000  # preferred leaders take their partitions back; 0: off
    # a broker whose connections to the active controller all closed is fenced this long after,
    # unless it reconnects or heartbeats first; 0: only the session timeout fences
    disconnect_fence_ms: int = 500
    transactional_id_expiration_ms: int = (
        604_800_000  # an id idle this long (no open transaction) is forgotten
    )


@dataclass(frozen=True, slots=True)
class MetadataConfig(SnapshotPolicy):
    """The metadata table: when the image is snapshotted through raft."""


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    data_listener: str = ""  # host:port of the data protocol (wire/): required for a broker
    advertised_data_listener: str = ""  # host:port clients and followers are told; "": data_listener
    rack: str = ""  # "": no rack
    heartbeat_interval_ms: int = 2_000
    replica_lag_time_max_ms: int = 30_000  # a follower not caught up this long leaves the ISR
    replica_fetch_wait_max_ms: int = 500  # a follower's fetch long-polls the leader this long
    replica_fetch_max_bytes: int = MIB  # per partition in a follower's fetch
    replica_fetch_response_max_bytes: int = 10 * MIB  # a follower's whole fetch answer
    replica_high_watermark_checkpoint_interval_ms: int = 5_000
    log_retention_check_interval_ms: int = 300_000  # how often retention deletes old segments
    produce_waiting_bytes_max: int = 64 * MIB  # acks=all bytes waiting for the ISR; more is refused
    uncompressed_batch_bytes_max: int = 64 * MIB  # a compressed batch's records decompressed; more is refused
    fetch_parked_max: int = 1_000  # long-polling fetches parked at once; more are answered at once
    group_min_session_timeout_ms: int = 6_000  # Kafka's group.min.session.timeout.ms
    group_max_session_timeout_ms: int = 1_800_000  # Kafka's group.max.session.timeout.ms
    group_initial_rebalance_delay_ms: int = (
        3_000  # an empty group's first rebalance waits this long for others
    )
    group_max_size: int = 1_000  # members of one group (Kafka's group.max.size)
    producer_id_expiration_ms: int = (
        86_400_000  # an idempotent producer silent this long is forgotten per partition
    )
    producer_id_expiration_check_interval_ms: int = 600_000  # how often partitions forget expired producers
    transaction_max_timeout_ms: int = 900_000  # Kafka's transaction.max.timeout.ms: a longer one is refused
    # Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms: how often timed-out ones are aborted
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    quota_window_num: int = 11  # Kafka's quota.window.num: client quota rates span this many windows
    quota_window_size_seconds: int = 1  # Kafka's quota.window.size.seconds
    data_sasl_mechanisms: str = ""  # SASL on the data listener, as kafka.sasl_mechanisms; needs [tls]
    # each of the data and Kafka listeners (``raftka.wire.guard``):
    max_connections: int = 4_096  # Kafka's max.connections; at the bound the longest idle makes room
    max_connections_per_ip: int = 1_024  # Kafka's max.connections.per.ip (unbounded there)
    connections_max_idle_ms: int = 600_000  # Kafka's connections.max.idle.ms
    connections_partial_request_timeout_ms: int = 30_000  # a request begun and not whole this long closes it
    connections_buffered_bytes_max: int = 64 * MIB  # partial requests' bytes; beyond, the largest is closed
    connections_answer_bytes_max: int = 256 * MIB  # unsent answers over a listener's connections


@dataclass(frozen=True, slots=True)
class KafkaConfig:
    """A broker's Kafka wire-protocol listener (``raftka.broker.kafka``), for Kafka's own clients."""

    listener: str = ""  # host:port Kafka clients connect to; "": no Kafka listener
    advertised_listener: str = ""  # host:port Kafka clients are told (Metadata); "": listener
    # A second Kafka listener, for clients outside the network the first serves (a
    # container's or a cluster's: Kafka's EXTERNAL listener), told its own addresses.
    external_listener: str = ""  # host:port; "": none
    advertised_external_listener: str = ""  # "": external_listener
    auto_create_topics_enable: bool = (
        True  # Kafka's auto.create.topics.enable: Metadata for an unknown topic creates it
    )
    num_partitions: int = 1  # Kafka's num.partitions: for topics created without a partition count
    default_replication_factor: int = (
        3  # Kafka's default.replication.factor (Kafka: 1); raftka keeps three copies
    )
    sasl_mechanisms: str = ""  # "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN": clients must log in; "": no SASL


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    port: int = 0  # Prometheus endpoint (GET /metrics) on the listener's host; 0: off
    # with [tls], the principals whose certificates may scrape (besides super users): the
    # metrics name every client's principal and client id, as Kafka keeps them in JMX
    allowed_principals: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AuthorizerConfig:
    """Who may do what when TLS is on (``raftka.metadata.acls``): ACLs, and these."""

    super_users: tuple[
        str, ...
    ] = ()  # principals allowed everything (Kafka's super.users), e.g. "User:CN=admin,OU=client,O=raftka"
    allow_everyone_if_no_acl_found: bool = False  # Kafka's key: a resource no ACL names is open to all


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    level: str = "info"
    format: str = "json"


@dataclass(frozen=True, slots=True)
class NodeConfig:
    node_id: int
    data_dir: Path
    voters: tuple[Voter, ...]
    listener: str  # host:port the node's gRPC server binds
    process_roles: tuple[str, ...] = (CONTROLLER,)
    advertised_listener: str = ""  # a broker's gRPC address as registered; "": listener
    raft: RaftConfig = field(default_factory=RaftConfig)
    log: LogConfig = field(default_factory=LogConfig)
    log_cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    journal: JournalConfig = field(default_factory=JournalConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    metadata: MetadataConfig = field(default_factory=MetadataConfig)
    broker: BrokerConfig = field(default_factory=BrokerConfig)
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    tls: TlsFiles | None = None  # [tls]: every listener and connection of the node; None: plaintext
    authorizer: AuthorizerConfig = field(default_factory=AuthorizerConfig)

    @property
    def voter_ids(self) -> frozenset[int]:
        return frozenset(v.node_id for v in self.voters)

    @property
    def voter_addresses(self) -> dict[int, str]:
        return {v.node_id: v.address for v in self.voters}


def _declare(table: str, config: type) -> dict[str, tuple[type, Any]]:
    """Schema entries for a table that is one dataclass: every field a key, with its default."""
    return {f"{table}.{f.name}": (type(f.default), f.default) for f in dataclasses.fields(config)}


def _table(values: Mapping[str, Any], table: str, config: type) -> dict[str, Any]:
    """The keys of ``[table]`` as keyword arguments of its dataclass ``config``."""
    return {f.name: values[f"{table}.{f.name}"] for f in dataclasses.fields(config)}


def _render(table: str, config: Any) -> dict[str, Any]:
    """The keys of ``[table]`` with the values its dataclass ``config`` holds."""
    return {f"{table}.{f.name}": getattr(config, f.name) for f in dataclasses.fields(config)}


_REQUIRED = object()
# A derived default: computed after the other keys are known.
_DERIVED = object()

# Every key a config file may hold, as a dotted path, with its type and default.
_SCHEMA: dict[str, tuple[type, Any]] = {
    "node_id": (int, _REQUIRED),
    "process_roles": (list, ["controller"]),
    "data_dir": (str, _REQUIRED),
    "listener": (str, _DERIVED),
    "advertised_listener": (str, ""),
    VOTERS_KEY: (str, _REQUIRED),
    **_declare("raft", RaftConfig),
    "log.segment_bytes": (int, LogConfig().segment_bytes),
    "log.archive_segments": (bool, LogConfig().archive_segments),
    "log.archive_max_bytes": (int, LogConfig().archive_max_bytes),
    **_declare(CLEANER_TABLE, CleanerConfig),
    **_declare("journal", JournalConfig),
    "controller.session_timeout_ms": (int, ControllerConfig().session_timeout_ms),
    "controller.max_partitions_per_topic": (int, ControllerConfig().max_partitions_per_topic),
    "controller.offsets_retention_minutes": (int, ControllerConfig().offsets_retention_minutes),
    "controller.leader_rebalance_interval_ms": (int, ControllerConfig().leader_rebalance_interval_ms),
    "controller.disconnect_fence_ms": (int, ControllerConfig().disconnect_fence_ms),
    "controller.transactional_id_expiration_ms": (int, ControllerConfig().transactional_id_expiration_ms),
    **_declare("metadata", MetadataConfig),
    **_declare("broker", BrokerConfig),
    **_declare("kafka", KafkaConfig),
    "logging.level": (str, LoggingConfig().level),
    "logging.format": (str, LoggingConfig().format),
    "metrics.port": (int, MetricsConfig().port),
    "metrics.allowed_principals": (list, []),
    **{f"tls.{name}": (str, "") for name in TLS_KEYS},
    "authorizer.super_users": (list, []),
    "authorizer.allow_everyone_if_no_acl_found": (bool, False),
}
_TABLES = frozenset(key.rpartition(".")[0] for key in _SCHEMA if "." in key) | {"controller"}
_POSITIVE = (
    "log.segment_bytes",
    f"{CLEANER_TABLE}.threads",
    f"{CLEANER_TABLE}.backoff_ms",
    "journal.snapshot_interval_records",
    "journal.snapshot_interval_bytes",
    "controller.session_timeout_ms",
    "controller.max_partitions_per_topic",
    "controller.offsets_retention_minutes",
    "controller.transactional_id_expiration_ms",
    "metadata.snapshot_interval_records",
    "metadata.snapshot_interval_bytes",
    *(
        f"broker.{f.name}"
        for f in dataclasses.fields(BrokerConfig)
        if f.type == "int" and f.name != "group_initial_rebalance_delay_ms"
    ),
    "kafka.num_partitions",
    "kafka.default_replication_factor",
)
_NOT_NEGATIVE = (  # 0: off
    "broker.group_initial_rebalance_delay_ms",
    "log.archive_max_bytes",
    f"{CLEANER_TABLE}.io_max_bytes_per_second",
    "journal.snapshot_interval_ms",
    "metadata.snapshot_interval_ms",
    "controller.leader_rebalance_interval_ms",
    "controller.disconnect_fence_ms",
)
RACK_CHARS_MAX = 255
PARTITIONS_PER_TOPIC_MAX = 100_000  # partition ids up to 99999: "<249-character topic>-99999" is 255 bytes
_TYPE_NAMES = {int: "an integer", bool: "true or false", str: "a string", list: "a list"}


def config_keys() -> list[str]:
    """Every key NodeConfig reads, dotted (``raft.election_timeout_ms``)."""
    return list(_SCHEMA)


def load_config(path: str | Path) -> NodeConfig:
    """Read and validate a TOML config file; ConfigError names the file and the key."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config: {e.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    try:
        return parse_config(data, base_dir=path.parent)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def parse_config(data: Mapping[str, Any], base_dir: Path) -> NodeConfig:
    """Validate parsed TOML; relative ``data_dir`` is taken relative to ``base_dir``."""
    values = _read_values(_flatten(data))
    node_id = values["node_id"]
    if node_id < 0:
        raise ConfigError(f"node_id: must be 0 or more, got {node_id}")
    roles = _parse_roles(values["process_roles"])
    if not values["data_dir"]:
        raise ConfigError("data_dir: must not be empty")
    voters = parse_voters(values[VOTERS_KEY])
    listener = _listener(values["listener"], node_id, roles, voters)
    raft = RaftConfig(**_table(values, "raft", RaftConfig))
    try:
        raft.validate()
    except ValueError as e:  # "raft.key must be ...": reworded to this module's "key: problem"
        key, _, problem = str(e).partition(" ")
        raise ConfigError(f"{key}: {problem}") from None
    for key in _POSITIVE:
        if values[key] <= 0:
            raise ConfigError(f"{key}: must be positive, got {values[key]}")
    for key in _NOT_NEGATIVE:
        if values[key] < 0:
            raise ConfigError(f"{key}: must be 0 (off) or more, got {values[key]}")
    _check_cleaner_buffer(values)
    if values["broker.quota_window_num"] < 2:
        raise ConfigError(f"broker.quota_window_num: at least 2, got {values['broker.quota_window_num']}")
    _check_data_listener(values["broker.data_listener"], listener, roles)
    _check_kafka_listener(values["kafka.listener"], (listener, values["broker.data_listener"]), roles)
    _check_kafka_listener(
        values["kafka.external_listener"],
        (listener, values["broker.data_listener"], values["kafka.listener"]),
        roles,
        "kafka.external_listener",
    )
    _advertise(values, listener, roles)
    _check_group_settings(values)
    _check_disconnect_fence(values)
    _check_metrics_port(
        values["metrics.port"], (listener, values["broker.data_listener"], values["kafka.listener"])
    )
    partitions_max = values["controller.max_partitions_per_topic"]
    if partitions_max > PARTITIONS_PER_TOPIC_MAX:
        raise ConfigError(
            f"controller.max_partitions_per_topic: at most {PARTITIONS_PER_TOPIC_MAX} (a partition's folder, "
            f"<topic>-<partition>, must fit a 255-byte file name for topics of 249 characters), got {partitions_max}"
        )
    if len(values["broker.rack"]) > RACK_CHARS_MAX:
        raise ConfigError(f"broker.rack: at most {RACK_CHARS_MAX} characters")
    level = values["logging.level"].lower()
    if level not in LOG_LEVELS:
        raise ConfigError(f"logging.level: expected one of {', '.join(LOG_LEVELS)}, got {level!r}")
    fmt = values["logging.format"]
    if fmt not in LOG_FORMATS:
        raise ConfigError(f"logging.format: expected one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    try:
        tls = tls_files({name: values[f"tls.{name}"] for name in TLS_KEYS}, base_dir.absolute())
    except TlsError as e:
        raise ConfigError(str(e)) from None
    problem = mechanisms_problem(parse_mechanisms(values["kafka.sasl_mechanisms"]), tls is not None)
    if problem is not None:
        raise ConfigError(f"kafka.sasl_mechanisms: {problem}")
    data_mechanisms = parse_mechanisms(values["broker.data_sasl_mechanisms"])
    if data_mechanisms and tls is None:
        raise ConfigError(
            "broker.data_sasl_mechanisms: needs [tls]: brokers fetch from each other over the data "
            "listener and log in there with their certificates"
        )
    problem = mechanisms_problem(data_mechanisms, tls is not None)
    if problem is not None:
        raise ConfigError(f"broker.data_sasl_mechanisms: {problem}")
    super_users = _principals(values, "authorizer.super_users")
    scrapers = _principals(values, "metrics.allowed_principals")
    return NodeConfig(
        node_id=node_id,
        data_dir=base_dir.absolute() / values["data_dir"],
        voters=voters,
        listener=listener,
        process_roles=roles,
        advertised_listener=values["advertised_listener"],
        raft=raft,
        log=LogConfig(
            values["log.segment_bytes"], values["log.archive_segments"], values["log.archive_max_bytes"]
        ),
        log_cleaner=CleanerConfig(**_table(values, CLEANER_TABLE, CleanerConfig)),
        journal=JournalConfig(**_table(values, "journal", JournalConfig)),
        controller=ControllerConfig(
            values["controller.session_timeout_ms"],
            values["controller.max_partitions_per_topic"],
            values["controller.offsets_retention_minutes"],
            values["controller.leader_rebalance_interval_ms"],
            values["controller.disconnect_fence_ms"],
            values["controller.transactional_id_expiration_ms"],
        ),
        metadata=MetadataConfig(**_table(values, "metadata", MetadataConfig)),
        broker=BrokerConfig(**_table(values, "broker", BrokerConfig)),
        kafka=KafkaConfig(**_table(values, "kafka", KafkaConfig)),
        logging=LoggingConfig(level, fmt),
        metrics=MetricsConfig(values["metrics.port"], scrapers),
        tls=tls,
        authorizer=AuthorizerConfig(super_users, values["authorizer.allow_everyone_if_no_acl_found"]),
    )


def _principals(values: Mapping[str, Any], key: str) -> tuple[str, ...]:
    for user in values[key]:
        if not isinstance(user, str) or not user.startswith("User:") or user == "User:":
            raise ConfigError(
                f'{key}: expected principals like "User:CN=admin,OU=client,O=raftka", got {user!r}'
            )
    return tuple(values[key])


def _listener(value: Any, node_id: int, roles: tuple[str, ...], voters: tuple[Voter, ...]) -> str:
    """A controller listed in the voters listens at its voter address by default; one not
    listed joins a dynamic quorum (KIP-853) as an observer until it is added, and names its
    own listener, as a broker (an observer of the quorum, never a voter) does."""
    mine = [v for v in voters if v.node_id == node_id]
    if CONTROLLER in roles and not mine and value is _DERIVED:
        ids = ", ".join(str(v.node_id) for v in voters)
        raise ConfigError(
            f"node_id: {node_id} is not one of {VOTERS_KEY} ({ids}); a controller that joins a "
            "dynamic quorum later (raftka quorum add-controller) names its own listener"
        )
    if CONTROLLER not in roles and mine:
        raise ConfigError(
            f"process_roles: a broker observes the quorum, so node_id {node_id} must not be a voter"
        )
    if value is not _DERIVED:
        parse_host_port(value, "listener")
        return value
    if not mine:
        raise ConfigError("listener: required for a broker (it has no voter address to default to)")
    return mine[0].address


def _check_data_listener(value: str, listener: str, roles: tuple[str, ...]) -> None:
    """A broker serves producers, consumers and its followers on a second port of its own."""
    key = "broker.data_listener"
    if BROKER not in roles:
        return
    if not value:
        raise ConfigError(
            f"{key}: required for a broker (HOST:PORT that producers, consumers and followers connect to)"
        )
    parse_host_port(value, key)
    if value == listener:
        raise ConfigError(f"{key}: must differ from listener ({listener}), which serves gRPC")


def _check_kafka_listener(
    value: str, taken: tuple[str, ...], roles: tuple[str, ...], key: str = "kafka.listener"
) -> None:
    """Optional: a broker without one serves only raftka's own clients."""
    if not value:
        return
    if BROKER not in roles:
        raise ConfigError(f"{key}: only a broker serves Kafka clients (process_roles has no broker)")
    parse_host_port(value, key)
    if value in taken:
        raise ConfigError(
            f"{key}: must differ from the node's other listeners ({', '.join(t for t in taken if t)})"
        )


WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]"})  # bind every address: nobody can connect to them


def _advertise(values: dict[str, Any], listener: str, roles: tuple[str, ...]) -> None:
    """Each broker listener's advertised address (Kafka's ``advertised.listeners``): what
    registration tells clients and followers to connect to, for a broker behind NAT, in
    a container or a pod; by default the listener's own. Resolved here, so the rest of
    the broker reads one address; an address no client can dial (every address, 0.0.0.0)
    is refused, as Kafka refuses it."""
    pairs = (
        ("advertised_listener", "listener", listener),
        ("broker.advertised_data_listener", "broker.data_listener", values["broker.data_listener"]),
        ("kafka.advertised_listener", "kafka.listener", values["kafka.listener"]),
        ("kafka.advertised_external_listener", "kafka.external_listener", values["kafka.external_listener"]),
    )
    if BROKER not in roles:
        for key, _, _ in pairs:
            if values[key]:
                raise ConfigError(
                    f"{key}: only a broker advertises listeners (a controller is reached at its "
                    f"{VOTERS_KEY} address)"
                )
        return
    for key, bound_key, bound in pairs:
        if not bound:
            if values[key]:
                raise ConfigError(f"{key}: set, but {bound_key} is not")
            continue
        advertised = values[key] or bound
        host, _ = parse_host_port(advertised, key)
        if host in WILDCARD_HOSTS:
            why = (
                f"{bound_key} binds every address ({bound}): set {key}"
                if not values[key]
                else f"{host} is not an address"
            )
            raise ConfigError(
                f"{key}: clients cannot connect to {advertised}; {why} to the HOST:PORT they reach it at"
            )
        values[key] = advertised


def _check_cleaner_buffer(values: Mapping[str, Any]) -> None:
    key = f"{CLEANER_TABLE}.dedupe_buffer_size"
    threads = values[f"{CLEANER_TABLE}.threads"]
    if values[key] < threads * CLEANER_BUFFER_PER_THREAD_MIN:
        raise ConfigError(
            f"{key}: at least {CLEANER_BUFFER_PER_THREAD_MIN} bytes per cleaner thread "
            f"({threads} threads), got {values[key]}"
        )


def _check_metrics_port(port: int, listeners: tuple[str, ...]) -> None:
    """Off (0), or a port of its own on the listener's host."""
    key = "metrics.port"
    if not 0 <= port < 65536:
        raise ConfigError(f"{key}: expected 0 (off) or a port in 1-65535, got {port}")
    for address in listeners:
        if port and address and address.rpartition(":")[2] == str(port):
            raise ConfigError(f"{key}: {port} is the port of {address} already")


def _check_disconnect_fence(values: Mapping[str, Any]) -> None:
    """A disconnected broker is fenced sooner than a silent one, or the key means nothing."""
    fence, session = values["controller.disconnect_fence_ms"], values["controller.session_timeout_ms"]
    if fence >= session:
        raise ConfigError(
            f"controller.disconnect_fence_ms: {fence} is not below controller.session_timeout_ms {session}"
        )


def _check_group_settings(values: Mapping[str, Any]) -> None:
    """The broker checks group_max_size against the metadata's bound when it starts."""
    low, high = values["broker.group_min_session_timeout_ms"], values["broker.group_max_session_timeout_ms"]
    if low > high:
        raise ConfigError(
            f"broker.group_min_session_timeout_ms: {low} is above group_max_session_timeout_ms {high}"
        )


def parse_host_port(text: str, key: str) -> tuple[str, int]:
    """Split ``host:port`` (``[::1]:9093`` for IPv6), raising ConfigError naming ``key``."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{key}: expected HOST:PORT with a port in 1-65535, got {text!r}")
    return host, int(port)


def parse_voters(text: str) -> tuple[Voter, ...]:
    """Parse ``1@host:port,2@host:port``: Kafka's ``controller.quorum.voters`` syntax."""
    usage = f"{VOTERS_KEY}: expected ID@HOST:PORT,..."
    voters: list[Voter] = []
    for entry in text.split(","):
        node, sep, address = entry.strip().partition("@")
        if not sep or not node.isdigit():
            raise ConfigError(f"{usage} got {entry.strip()!r}")
        try:
            host, port = parse_host_port(address, VOTERS_KEY)
        except ConfigError:
            raise ConfigError(f"{usage} got {entry.strip()!r} (bad HOST:PORT)") from None
        voters.append(Voter(int(node), host, port))
    ids = [v.node_id for v in voters]
    addresses = [v.address for v in voters]
    for seen, what in ((ids, "node id"), (addresses, "address")):
        dupes = sorted({str(x) for x in seen if seen.count(x) > 1})
        if dupes:
            raise ConfigError(f"{VOTERS_KEY}: {what} {dupes[0]} appears more than once")
    return tuple(voters)


def render_toml(config: NodeConfig) -> str:
    """Write ``config`` as TOML that ``load_config`` reads back to an equal NodeConfig."""
    values: dict[str, Any] = {
        "node_id": config.node_id,
        "process_roles": list(config.process_roles),
        "data_dir": str(config.data_dir),
        "listener": config.listener,
        "advertised_listener": config.advertised_listener,
        VOTERS_KEY: ",".join(str(v) for v in config.voters),
        **_render("raft", config.raft),
        "log.segment_bytes": config.log.segment_bytes,
        "log.archive_segments": config.log.archive_segments,
        "log.archive_max_bytes": config.log.archive_max_bytes,
        **_render(CLEANER_TABLE, config.log_cleaner),
        **_render("journal", config.journal),
        "controller.session_timeout_ms": config.controller.session_timeout_ms,
        "controller.max_partitions_per_topic": config.controller.max_partitions_per_topic,
        "controller.offsets_retention_minutes": config.controller.offsets_retention_minutes,
        "controller.leader_rebalance_interval_ms": config.controller.leader_rebalance_interval_ms,
        "controller.disconnect_fence_ms": config.controller.disconnect_fence_ms,
        "controller.transactional_id_expiration_ms": config.controller.transactional_id_expiration_ms,
        **_render("metadata", config.metadata),
        **_render("broker", config.broker),
        **_render("kafka", config.kafka),
        "logging.level": config.logging.level,
        "logging.format": config.logging.format,
        "metrics.port": config.metrics.port,
        "metrics.allowed_principals": list(config.metrics.allowed_principals),
        **{f"tls.{name}": str(getattr(config.tls, name)) if config.tls else "" for name in TLS_KEYS},
        "authorizer.super_users": list(config.authorizer.super_users),
        "authorizer.allow_everyone_if_no_acl_found": config.authorizer.allow_everyone_if_no_acl_found,
    }
    assert values.keys() == _SCHEMA.keys(), "render_toml must write every key"
    sections: dict[str, list[str]] = {}
    for key, value in values.items():
        table, _, name = key.rpartition(".")
        sections.setdefault(table, []).append(f"{name} = {_toml_value(value)}")
    parts = ["\n".join(sections.pop(""))]
    parts += [f"[{table}]\n" + "\n".join(lines) for table, lines in sections.items()]
    return "\n\n".join(parts) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    return str(value)


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Turn nested TOML tables into dotted keys; ``[controller.quorum] voters`` and
    ``controller.quorum.voters`` at top level are the same key."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = prefix + key
        if isinstance(value, dict):
            if name not in _TABLES:
                raise ConfigError(f"{name}: {_unknown(name)}")
            flat.update(_flatten(value, name + "."))
        elif name in _TABLES:
            raise ConfigError(f"{name}: expected a table, got {value!r}")
        else:
            flat[name] = value
    return flat


def _read_values(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Type-check every key and fill in defaults; reject keys nobody reads."""
    for key in flat:
        if key not in _SCHEMA:
            raise ConfigError(f"{key}: {_unknown(key)}")
    values: dict[str, Any] = {}
    for key, (kind, default) in _SCHEMA.items():
        if key not in flat:
            if default is _REQUIRED:
                raise ConfigError(f"{key}: required key is missing")
            values[key] = default
            continue
        value = flat[key]
        # bool is an int in Python; a config that says `node_id = true` is still wrong.
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{key}: expected {_TYPE_NAMES[kind]}, got {value!r}")
        values[key] = value
    return values


def _parse_roles(roles: list[Any]) -> tuple[str, ...]:
    if not roles:
        raise ConfigError("process_roles: must name at least one role")
    for role in roles:
        if role not in SUPPORTED_ROLES:
            supported = ", ".join(SUPPORTED_ROLES)
            raise ConfigError(f"process_roles: {role!r} is not supported (supported: {supported})")
    if len(set(roles)) != len(roles):
        raise ConfigError(f"process_roles: a role is listed twice in {roles!r}")
    if len(roles) > 1:
        raise ConfigError(f"process_roles: one role per process for now, got {roles!r}")
    return tuple(roles)


def _unknown(key: str) -> str:
    close = difflib.get_close_matches(key, [*_SCHEMA, *_TABLES], n=1)
    return "unknown key" + (f" (did you mean {close[0]}?)" if close else "")
