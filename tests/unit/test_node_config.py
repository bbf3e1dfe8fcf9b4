"""NodeConfig: every key has a default or is required, and every bad value names its key."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from raftka.node.config import (
    CleanerConfig,
    ConfigError,
    LogConfig,
    NodeConfig,
    Voter,
    config_keys,
    load_config,
    parse_config,
    parse_voters,
    render_toml,
)
from raftka.raft.config import RaftConfig

SAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "controller.toml"
VOTERS = "1@127.0.0.1:19091,2@127.0.0.1:19092,3@127.0.0.1:19093"


def minimal(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"node_id": 1, "data_dir": "data", "controller": {"quorum": {"voters": VOTERS}}}
    data.update(overrides)
    return data


def parse(data: dict[str, Any]) -> NodeConfig:
    return parse_config(data, base_dir=Path("/etc/raftka"))


def flat_keys(data: dict[str, Any], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for key, value in data.items():
        if isinstance(value, dict):
            keys |= flat_keys(value, f"{prefix}{key}.")
        else:
            keys.add(prefix + key)
    return keys


def test_minimal_config_takes_every_default() -> None:
    config = parse(minimal())
    assert config.node_id == 1
    assert config.data_dir == Path("/etc/raftka/data")  # relative to the config file's directory
    assert config.voters == (
        Voter(1, "127.0.0.1", 19091),
        Voter(2, "127.0.0.1", 19092),
        Voter(3, "127.0.0.1", 19093),
    )
    assert config.listener == "127.0.0.1:19091"  # derived from this node's voters entry
    assert config.process_roles == ("controller",)
    assert config.raft == RaftConfig()
    assert config.log == LogConfig(segment_bytes=8 << 20, archive_segments=False)
    assert config.journal.snapshot_interval_records == 10_000
    assert (config.logging.level, config.logging.format) == ("info", "json")
    assert config.voter_ids == frozenset({1, 2, 3})
    assert config.voter_addresses[2] == "127.0.0.1:19092"


def test_sample_config_loads_and_covers_every_key() -> None:
    config = load_config(SAMPLE)
    assert config.node_id == 1
    sample_keys = flat_keys(tomllib.loads(SAMPLE.read_text()))
    assert sample_keys == set(config_keys())


def test_sample_config_documents_every_key() -> None:
    lines = SAMPLE.read_text().splitlines()
    for i, line in enumerate(lines):
        if "=" in line and not line.startswith("#"):
            assert lines[i - 1].startswith("# "), f"no comment above: {line}"


def test_dotted_key_is_the_same_as_a_table() -> None:
    dotted = {"node_id": 1, "data_dir": "data", "controller.quorum.voters": VOTERS}
    config = parse_config(tomllib.loads("\n".join(f"{k} = {v!r}" for k, v in dotted.items())), Path("/x"))
    assert config.voters == parse(minimal()).voters


def test_render_round_trips(tmp_path: Path) -> None:
    config = parse(
        minimal(
            node_id=2,
            listener="0.0.0.0:9000",
            raft={"election_timeout_ms": 80},
            log={"archive_segments": True, "cleaner": {"threads": 2, "io_max_bytes_per_second": 1000}},
            logging={"level": "DEBUG", "format": "console"},
        )
    )
    path = tmp_path / "server.toml"
    path.write_text(render_toml(config))
    assert load_config(path) == config


def test_the_log_cleaner_table_has_kafkas_defaults() -> None:
    assert parse(minimal()).log_cleaner == CleanerConfig(
        enable=True, threads=1, dedupe_buffer_size=128 << 20, io_max_bytes_per_second=0, backoff_ms=15_000
    )
    config = parse(minimal(log={"cleaner": {"enable": False, "threads": 4, "dedupe_buffer_size": 4 << 20}}))
    assert (config.log_cleaner.enable, config.log_cleaner.threads) == (False, 4)
    assert config.log_cleaner.dedupe_buffer_size == 4 << 20


def test_absolute_data_dir_is_kept() -> None:
    assert parse(minimal(data_dir="/var/lib/raftka")).data_dir == Path("/var/lib/raftka")


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"data_dir": "d", "controller": {"quorum": {"voters": VOTERS}}}, "node_id"),
        (minimal(node_id="1"), "node_id"),
        (minimal(node_id=True), "node_id"),
        (minimal(node_id=-1), "node_id"),
        (minimal(node_id=4), "node_id"),
        ({"node_id": 1, "controller": {"quorum": {"voters": VOTERS}}}, "data_dir"),
        (minimal(data_dir=""), "data_dir"),
        (minimal(process_roles=["broker"]), "process_roles"),
        (minimal(process_roles=[]), "process_roles"),
        (minimal(process_roles="controller"), "process_roles"),
        (minimal(listener="localhost"), "listener"),
        (minimal(listener="localhost:99999"), "listener"),
        ({"node_id": 1, "data_dir": "d"}, "controller.quorum.voters"),
        (minimal(controller={"quorum": {"voters": "1@127.0.0.1"}}), "controller.quorum.voters"),
        (minimal(controller={"quorum": {"voters": "x@h:1"}}), "controller.quorum.voters"),
        (minimal(controller={"quorum": {"voters": 5}}), "controller.quorum.voters"),
        (minimal(controller={"quorum": "x"}), "controller.quorum"),
        (minimal(controller={"voters": VOTERS}), "controller.voters"),
        (minimal(raft={"election_timeout_ms": 0}), "raft.election_timeout_ms"),
        (minimal(raft={"election_timeout_ms": "50"}), "raft.election_timeout_ms"),
        (minimal(raft={"election_timeout": 50}), "raft.election_timeout"),
        (minimal(raft={"fetch_max_wait_ms": 2000}), "raft.fetch_max_wait_ms"),
        (minimal(raft=5), "raft"),
        (minimal(log={"segment_bytes": 0}), "log.segment_bytes"),
        (minimal(log={"archive_segments": "yes"}), "log.archive_segments"),
        (minimal(log={"cleaner": {"enable": 1}}), "log.cleaner.enable"),
        (minimal(log={"cleaner": {"threads": 0}}), "log.cleaner.threads"),
        (minimal(log={"cleaner": {"backoff_ms": 0}}), "log.cleaner.backoff_ms"),
        (minimal(log={"cleaner": {"io_max_bytes_per_second": -1}}), "log.cleaner.io_max_bytes_per_second"),
        (
            minimal(log={"cleaner": {"threads": 2, "dedupe_buffer_size": 2**21 - 1}}),
            "log.cleaner.dedupe_buffer_size",
        ),
        (minimal(log={"cleaner": {"dedupe.buffer.size": 1}}), "log.cleaner.dedupe.buffer.size"),
        (minimal(journal={"snapshot_interval_records": -5}), "journal.snapshot_interval_records"),
        (minimal(journal={"snapshot_interval_bytes": 0}), "journal.snapshot_interval_bytes"),
        (minimal(journal={"snapshot_interval_ms": -1}), "journal.snapshot_interval_ms"),
        (minimal(raft={"fetch_max_batches": 0}), "raft.fetch_max_batches"),
        (minimal(logging={"level": "loud"}), "logging.level"),
        (minimal(logging={"format": "xml"}), "logging.format"),
        (minimal(metrics={"port": -1}), "metrics.port"),
        (minimal(metrics={"port": 65536}), "metrics.port"),
        (minimal(metrics={"port": "9100"}), "metrics.port"),
        (minimal(metrics={"port": 19091}), "metrics.port"),  # the node's own listener
        (
            minimal(controller={"quorum": {"voters": VOTERS}, "max_partitions_per_topic": 100_001}),
            "controller.max_partitions_per_topic",
        ),
        (minimal(brokers=1), "brokers"),
        (minimal(extra={"x": 1}), "extra"),
    ],
)
def test_bad_value_names_its_key(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(data)
    assert str(err.value).startswith(f"{key}:"), str(err.value)
    assert "\n" not in str(err.value)


def test_metrics_endpoint_is_off_unless_given_a_port() -> None:
    assert parse(minimal()).metrics.port == 0
    assert parse(minimal(metrics={"port": 9100})).metrics.port == 9100


def test_unknown_key_suggests_the_close_one() -> None:
    with pytest.raises(ConfigError, match=r"did you mean raft\.election_timeout_ms\?"):
        parse(minimal(raft={"election_timeout": 50}))


@pytest.mark.parametrize(
    ("voters", "problem"),
    [
        ("1@a:1,1@b:2", "node id 1 appears more than once"),
        ("1@a:1,2@a:1", "address a:1 appears more than once"),
        ("", "expected ID@HOST:PORT"),
        ("1@a:0", "bad HOST:PORT"),
    ],
)
def test_voters_are_checked(voters: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as err:
        parse_voters(voters)
    assert str(err.value).startswith("controller.quorum.voters:")


def test_ipv6_voter() -> None:
    assert parse_voters("1@[::1]:9093")[0].address == "[::1]:9093"


def test_load_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(path)
    path.write_text("node_id = = 1")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(path)
    path.write_text('node_id = 1\ndata_dir = "d"\n')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: controller.quorum.voters: required key is missing"


BROKER_SAMPLE = SAMPLE.with_name("broker.toml")


def broker(**overrides: Any) -> dict[str, Any]:
    table = {"data_listener": "127.0.0.1:19201", **overrides.pop("broker", {})}
    return minimal(
        **{
            "node_id": 101,
            "process_roles": ["broker"],
            "listener": "127.0.0.1:19101",
            "broker": table,
            **overrides,
        }
    )


def test_controller_metadata_and_broker_keys_have_defaults() -> None:
    config = parse(minimal())
    assert (
        config.controller.session_timeout_ms,
        config.controller.max_partitions_per_topic,
        config.controller.offsets_retention_minutes,
    ) == (9000, 10_000, 7 * 24 * 60)
    assert config.metadata.snapshot_interval_records == 10_000
    assert (config.metadata.snapshot_interval_bytes, config.metadata.snapshot_interval_ms) == (
        20 << 20,
        3_600_000,
    )
    assert parse(minimal(metadata={"snapshot_interval_ms": 0})).metadata.snapshot_interval_ms == 0  # off
    assert (config.broker.rack, config.broker.heartbeat_interval_ms) == ("", 2000)


def test_a_controller_outside_the_voters_names_its_own_listener() -> None:
    """KIP-853: a controller to be added later starts as an observer of the quorum."""
    config = parse(minimal(node_id=4, listener="127.0.0.1:19094"))
    assert config.process_roles == ("controller",) and config.node_id not in config.voter_ids
    assert config.listener == "127.0.0.1:19094"
    with pytest.raises(
        ConfigError, match="node_id: 4 is not one of controller.quorum.voters .* own listener"
    ):
        parse(minimal(node_id=4))


def test_broker_is_an_observer_with_its_own_listener(tmp_path: Path) -> None:
    config = parse(broker(broker={"rack": "r1", "heartbeat_interval_ms": 500}))
    assert config.process_roles == ("broker",) and config.node_id not in config.voter_ids
    assert (config.listener, config.broker.rack, config.broker.heartbeat_interval_ms) == (
        "127.0.0.1:19101",
        "r1",
        500,
    )
    assert config.broker.data_listener == "127.0.0.1:19201"
    path = tmp_path / "broker.toml"
    path.write_text(render_toml(config))
    assert load_config(path) == config


def test_broker_sample_loads_and_documents_every_key() -> None:
    config = load_config(BROKER_SAMPLE)
    assert config.process_roles == ("broker",) and config.node_id == 101
    assert flat_keys(tomllib.loads(BROKER_SAMPLE.read_text())) == set(config_keys())
    lines = BROKER_SAMPLE.read_text().splitlines()
    for i, line in enumerate(lines):
        if "=" in line and not line.startswith("#"):
            assert lines[i - 1].startswith("# "), f"no comment above: {line}"


@pytest.mark.parametrize(
    ("data", "key"),
    [
        (minimal(process_roles=["controller", "broker"]), "process_roles"),
        (minimal(node_id=101, process_roles=["broker"]), "listener"),
        (broker(node_id=1), "process_roles"),
        (
            minimal(controller={"session_timeout_ms": 0, "quorum": {"voters": VOTERS}}),
            "controller.session_timeout_ms",
        ),
        (
            minimal(controller={"max_partitions_per_topic": 0, "quorum": {"voters": VOTERS}}),
            "controller.max_partitions_per_topic",
        ),
        (
            minimal(controller={"offsets_retention_minutes": 0, "quorum": {"voters": VOTERS}}),
            "controller.offsets_retention_minutes",
        ),
        (minimal(metadata={"snapshot_interval_records": 0}), "metadata.snapshot_interval_records"),
        (minimal(metadata={"snapshot_interval_bytes": -1}), "metadata.snapshot_interval_bytes"),
        (minimal(metadata={"snapshot_interval_ms": -1}), "metadata.snapshot_interval_ms"),
        (minimal(metadata={"snapshot_interval_ms": "1h"}), "metadata.snapshot_interval_ms"),
        (broker(broker={"heartbeat_interval_ms": -1}), "broker.heartbeat_interval_ms"),
        (broker(broker={"rack": "r" * 256}), "broker.rack"),
        (broker(broker={"rack": 5}), "broker.rack"),
        (broker(broker={"data_listener": ""}), "broker.data_listener"),
        (broker(broker={"data_listener": "localhost"}), "broker.data_listener"),
        (broker(broker={"data_listener": "127.0.0.1:19101"}), "broker.data_listener"),  # the gRPC listener's
    ],
)
def test_bad_role_or_new_key_names_its_key(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(data)
    assert str(err.value).startswith(f"{key}:"), str(err.value)


def test_a_brokers_listeners_advertise_themselves_unless_told_otherwise(tmp_path: Path) -> None:
    plain = parse(broker(kafka={"listener": "127.0.0.1:9092"}))
    assert (plain.advertised_listener, plain.broker.advertised_data_listener, plain.kafka.advertised_listener) == (
        "127.0.0.1:19101", "127.0.0.1:19201", "127.0.0.1:9092",
    )  # fmt: skip
    behind_nat = parse(
        broker(
            listener="0.0.0.0:19101",
            advertised_listener="b1.example:19101",
            broker={"data_listener": "0.0.0.0:19201", "advertised_data_listener": "b1.example:29201"},
            kafka={"listener": "0.0.0.0:9092", "advertised_listener": "b1.internal:9092",
                   "external_listener": "0.0.0.0:19092", "advertised_external_listener": "localhost:19092"},
        )
    )  # fmt: skip
    assert behind_nat.kafka.advertised_external_listener == "localhost:19092"
    path = tmp_path / "broker.toml"
    path.write_text(render_toml(behind_nat))
    assert load_config(path) == behind_nat


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (broker(listener="0.0.0.0:19101"), "advertised_listener: clients cannot connect to 0.0.0.0:19101"),
        (broker(broker={"data_listener": "[::]:19201"}), "broker.advertised_data_listener: clients cannot connect"),
        (broker(kafka={"listener": "0.0.0.0:9092"}), "kafka.advertised_listener: clients cannot connect"),
        (broker(kafka={"listener": "127.0.0.1:9092", "advertised_listener": "0.0.0.0:9092"}), "0.0.0.0 is not an address"),
        (broker(kafka={"advertised_listener": "b1:9092"}), "kafka.advertised_listener: set, but kafka.listener is not"),
        (broker(kafka={"listener": "127.0.0.1:9092", "external_listener": "127.0.0.1:9092"}), "kafka.external_listener: must differ"),
        (broker(kafka={"listener": "127.0.0.1:9092", "advertised_listener": "b1"}), "kafka.advertised_listener: expected HOST:PORT"),
        (minimal(advertised_listener="c1:9093"), "advertised_listener: only a broker advertises listeners"),
    ],
)  # fmt: skip
def test_an_address_no_client_can_dial_is_refused_naming_the_key(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        parse(data)


def test_sasl_without_tls_is_refused_at_start_naming_the_keys() -> None:
    """SASL_PLAINTEXT would authorize nothing: the authorizer is on only with TLS, since
    without it the gRPC and data listeners cannot authenticate the cluster's own nodes."""
    kafka = {"listener": "127.0.0.1:9092", "sasl_mechanisms": "SCRAM-SHA-512"}
    with pytest.raises(ConfigError, match=r"^kafka\.sasl_mechanisms: SASL needs \[tls\] \(tls\.ca, tls\.cert, tls\.key\)"):
        parse(broker(kafka=kafka))
