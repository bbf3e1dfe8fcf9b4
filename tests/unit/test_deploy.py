"""deploy/: the Kubernetes manifests against Kubernetes' schemas (offline, with
kubernetes-validate: kubectl's dry run needs a cluster), and the fields the schemas cannot
judge checked against each other and against the product: the config the entrypoint writes
loads with raftka's own parser; voters name the controllers' pods through their headless
Service at the port they listen on; node ids from pod ordinals are the voters' ids; the PDB
keeps a majority of the controller pods it selects; probes ask the gRPC port; every data
volume is claimed and mounted where the image keeps its data. TLS: every Secret key a pod
mounts is made by docs/deploy.md's commands (run as written), each pod's config names its
own certificate in its role's Secret, and the readiness probe presents it. Compose likewise.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from raftka.cli.main import main
from raftka.node.config import BROKER, CONTROLLER, NodeConfig, load_config, parse_voters

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ENTRYPOINT = DEPLOY / "raftka-node.sh"
K8S_VERSION = "1.30.0"  # the oldest Kubernetes the manifests are meant for (grpc probes: 1.27+)
DATA_DIR = "/var/lib/raftka"
GRPC_PORT = 9093
UID = 10001


POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"  # set by Kubernetes on each pod of a StatefulSet


def k8s_documents() -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted((DEPLOY / "k8s").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
    ]


def k8s(kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for d in k8s_documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def entrypoint(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "node.toml"
    return subprocess.run(
        ["sh", str(ENTRYPOINT), *args],
        env={"PATH": os.environ["PATH"], "RAFTKA_CONFIG": str(config), **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


# Kubernetes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", k8s_documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_manifest_is_valid_against_the_kubernetes_schema(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_voters_name_each_controller_pod_through_the_headless_service_with_its_node_id() -> None:
    statefulset = k8s("StatefulSet", "raftka-controller")
    service = k8s("Service", statefulset["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True, "the quorum forms before any pod is ready"
    assert statefulset["spec"]["podManagementPolicy"] == "Parallel", "pod 0 is ready only once the quorum is"
    env = env_of(statefulset["spec"]["template"]["spec"]["containers"][0])
    assert env["RAFTKA_VOTERS"] == {"configMapKeyRef": {"name": "raftka", "key": "voters"}}
    voters = parse_voters(k8s("ConfigMap", "raftka")["data"]["voters"])
    base, name = int(env["RAFTKA_NODE_ID_BASE"]), statefulset["metadata"]["name"]
    assert env["RAFTKA_HOST"] == f"$(POD_NAME).{service['metadata']['name']}"
    assert [(v.node_id, v.address) for v in voters] == [
        (base + ordinal, f"{name}-{ordinal}.{service['metadata']['name']}:{GRPC_PORT}")
        for ordinal in range(statefulset["spec"]["replicas"])
    ]


def test_broker_ids_from_their_ordinals_are_never_voter_ids() -> None:
    statefulset = k8s("StatefulSet", "raftka-broker")
    base = int(env_of(statefulset["spec"]["template"]["spec"]["containers"][0])["RAFTKA_NODE_ID_BASE"])
    broker_ids = {base + ordinal for ordinal in range(statefulset["spec"]["replicas"])}
    voter_ids = {v.node_id for v in parse_voters(k8s("ConfigMap", "raftka")["data"]["voters"])}
    assert not broker_ids & voter_ids


@pytest.mark.parametrize("name", ["raftka-controller", "raftka-broker"])
def test_each_statefulset_formats_claims_and_mounts_its_volume_and_probes_its_grpc_port(name: str) -> None:
    spec = k8s("StatefulSet", name)["spec"]
    pod = spec["template"]["spec"]
    [claim] = spec["volumeClaimTemplates"]
    [init] = pod["initContainers"]
    [main] = pod["containers"]
    assert init["args"] == ["format"] and main["args"] == ["server"]
    assert init["image"] == main["image"] and env_of(init) == env_of(main)
    for container in (init, main):
        assert {"name": claim["metadata"]["name"], "mountPath": DATA_DIR} in container["volumeMounts"]
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert ports["grpc"] == GRPC_PORT
    assert main["readinessProbe"]["exec"]["command"] == ["raftka-node", "health"], "TLS: a grpc probe cannot"
    assert main["readinessProbe"]["timeoutSeconds"] >= 3, "a Python process starts and asks within it"
    assert main["livenessProbe"]["tcpSocket"]["port"] == "grpc"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == UID
    assert pod["enableServiceLinks"] is False
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()


def test_every_service_selects_pods_that_exist_on_ports_they_name() -> None:
    pods = [  # each pod of each StatefulSet: its labels (Kubernetes adds its pod-name) and its ports
        (
            {
                **d["spec"]["template"]["metadata"]["labels"],
                POD_NAME_LABEL: f"{d['metadata']['name']}-{ordinal}",
            },
            {p["name"] for p in d["spec"]["template"]["spec"]["containers"][0]["ports"]},
        )
        for d in k8s_documents()
        if d["kind"] == "StatefulSet"
        for ordinal in range(d["spec"]["replicas"])
    ]
    for service in (d for d in k8s_documents() if d["kind"] == "Service"):
        selector = service["spec"]["selector"]
        selected = [names for labels, names in pods if selector.items() <= labels.items()]
        assert selected, f"{service['metadata']['name']} selects no pod"
        for ports in selected:
            assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports, service["metadata"]["name"]


def test_each_broker_has_an_external_service_on_the_node_port_it_advertises(tmp_path: Path) -> None:
    statefulset = k8s("StatefulSet", "raftka-broker")
    env = env_of(statefulset["spec"]["template"]["spec"]["containers"][0])
    base = int(env["RAFTKA_EXTERNAL_KAFKA_PORT_BASE"])
    assert env["RAFTKA_EXTERNAL_KAFKA_HOST"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    for ordinal in range(statefulset["spec"]["replicas"]):
        service = k8s("Service", f"raftka-broker-{ordinal}-external")["spec"]
        assert service["type"] == "NodePort"
        assert service["selector"][POD_NAME_LABEL] == f"raftka-broker-{ordinal}"
        [port] = service["ports"]
        assert port["nodePort"] == base + ordinal and port["targetPort"] == "kafka-external"
        kafka = written_config(
            tmp_path, RAFTKA_ROLE="broker", RAFTKA_NODE_ID_BASE="101", HOSTNAME=f"raftka-broker-{ordinal}",
            RAFTKA_HOST="b", RAFTKA_EXTERNAL_KAFKA_HOST="10.1.2.3", RAFTKA_EXTERNAL_KAFKA_PORT_BASE=str(base),
        ).kafka  # fmt: skip
        assert (kafka.external_listener, kafka.advertised_external_listener) == (
            f"0.0.0.0:{port['port']}",
            f"10.1.2.3:{base + ordinal}",
        )


@pytest.mark.parametrize("name", ["raftka-controller", "raftka-broker"])
def test_the_disruption_budget_selects_its_pods_and_keeps_a_majority(name: str) -> None:
    statefulset = k8s("StatefulSet", name)
    budget = k8s("PodDisruptionBudget", name)["spec"]
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert budget["selector"]["matchLabels"].items() <= labels.items()
    others = [d for d in k8s_documents() if d["kind"] == "StatefulSet" and d["metadata"]["name"] != name]
    assert not any(
        budget["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        for d in others
    )
    replicas = statefulset["spec"]["replicas"]
    assert replicas - budget["maxUnavailable"] > replicas // 2


# TLS ----------------------------------------------------------------------------------------

DEPLOY_DOC = DEPLOY.parent / "docs" / "deploy.md"
STATEFULSETS = {"raftka-controller": (CONTROLLER, "controller"), "raftka-broker": (BROKER, "broker")}


def documented_commands() -> list[list[str]]:
    """The shell commands of docs/deploy.md's Kubernetes section, continuation lines joined."""
    section = DEPLOY_DOC.read_text().split("## Kubernetes", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [shlex.split(line.split("#", 1)[0]) for line in lines if line.strip()]


def documented_secrets(certs_made: Path) -> dict[str, dict[str, Path]]:
    """Secret name -> key -> the file ``kubectl create secret generic ... --from-file`` reads,
    as the documented commands make them (relative paths from where ``raftka certs init`` ran)."""
    secrets: dict[str, dict[str, Path]] = {}
    for argv in documented_commands():
        if argv[:4] != ["kubectl", "create", "secret", "generic"]:
            continue
        keys = secrets.setdefault(argv[4], {})
        for arg in argv[5:]:
            assert arg.startswith("--from-file="), arg
            source = arg.removeprefix("--from-file=")
            key, _, path = source.rpartition("=") if "=" in source else (Path(source).name, "", source)
            keys[key] = certs_made / path
    return secrets


def make_documented_certs(tmp_path: Path) -> Path:
    """Run the documented ``raftka certs init DIR ...`` as written, DIR under ``tmp_path``
    (where the documented commands then run from)."""
    [argv] = [a for a in documented_commands() if a[:3] == ["raftka", "certs", "init"]]
    directory = argv[3]
    assert not Path(directory).is_absolute() and not directory.startswith("-"), argv
    assert main([*argv[1:3], str(tmp_path / directory), *argv[4:]]) == 0
    return tmp_path


def secret_volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v["secret"] for v in pod.get("volumes", []) if "secret" in v}


def test_every_secret_key_a_manifest_mounts_is_made_by_the_documented_commands(tmp_path: Path) -> None:
    secrets = documented_secrets(make_documented_certs(tmp_path))
    mounted = [
        (d["metadata"]["name"], secret)
        for d in k8s_documents()
        if d["kind"] == "StatefulSet"
        for secret in secret_volumes(d["spec"]["template"]["spec"]).values()
    ]
    assert {secret["secretName"] for _, secret in mounted} == set(secrets), "every Secret made is used"
    for statefulset, secret in mounted:
        made = secrets[secret["secretName"]]
        for item in secret["items"]:
            assert item["key"] in made, f"{statefulset}: {secret['secretName']} has no key {item['key']}"
            assert made[item["key"]].is_file(), f"raftka certs init wrote no {made[item['key']]}"
        assert secret["defaultMode"] == 0o440, "keys readable by the raftka group only"


@pytest.mark.parametrize("name", sorted(STATEFULSETS))
def test_each_pod_mounts_its_roles_secret_and_its_config_names_its_own_certificate(
    tmp_path: Path, name: str
) -> None:
    """For every ordinal: the entrypoint, given the pod's environment and the files of the
    mounted Secret where the pod has them, writes a [tls] naming the CA and the pod's own
    certificate and key, which raftka's parser loads; init and main container mount it."""
    role, prefix = STATEFULSETS[name]
    statefulset = k8s("StatefulSet", name)
    pod = statefulset["spec"]["template"]["spec"]
    [init], [main] = pod["initContainers"], pod["containers"]
    env = env_of(main)
    mount_path = env["RAFTKA_TLS_DIR"]
    assert env["RAFTKA_SUPER_USERS"] == {"configMapKeyRef": {"name": "raftka", "key": "super-users"}}
    [tls] = [v for v in secret_volumes(pod).values() if v["secretName"] == f"{name}-tls"]
    [volume] = [v["name"] for v in pod["volumes"] if v.get("secret") is tls]
    for container in (init, main):
        assert {"name": volume, "mountPath": mount_path, "readOnly": True} in container["volumeMounts"]
    secrets = documented_secrets(make_documented_certs(tmp_path / "made"))
    mounted = tmp_path / "mounted"  # the volume as the pod sees it: the items' paths
    mounted.mkdir()
    for item in tls["items"]:
        (mounted / item["path"]).write_bytes(secrets[tls["secretName"]][item["key"]].read_bytes())
    super_users = k8s("ConfigMap", "raftka")["data"]["super-users"]
    base = int(env["RAFTKA_NODE_ID_BASE"])
    for ordinal in range(statefulset["spec"]["replicas"]):
        config = written_config(
            tmp_path, RAFTKA_ROLE=role, RAFTKA_NODE_ID_BASE=str(base), HOSTNAME=f"{name}-{ordinal}",
            RAFTKA_HOST=f"{name}-{ordinal}.{name}", RAFTKA_TLS_DIR=str(mounted), RAFTKA_SUPER_USERS=super_users,
        )  # fmt: skip
        assert config.tls is not None, "every listener speaks TLS"
        own = f"{prefix}-{base + ordinal}"
        assert (config.tls.ca, config.tls.cert, config.tls.key) == (
            mounted / "ca.crt",
            mounted / f"{own}.crt",
            mounted / f"{own}.key",
        )
        assert config.authorizer.super_users == tuple(super_users.split(";"))


def test_the_health_probe_presents_the_nodes_own_certificate(tmp_path: Path) -> None:
    """``raftka-node health`` (the readiness probe) asks the node's gRPC health over mutual
    TLS with the node's files; without RAFTKA_TLS_DIR, plaintext as before."""
    stub = tmp_path / "bin" / "raftka"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\necho "$@"\n')
    stub.chmod(0o755)
    path = f"{stub.parent}:{os.environ['PATH']}"
    env = {"RAFTKA_ROLE": "broker", "RAFTKA_NODE_ID_BASE": "101", "HOSTNAME": "raftka-broker-2"}
    host = "raftka-broker-2.raftka-broker"
    done = entrypoint(
        tmp_path, "health", PATH=path, RAFTKA_HOST=host, RAFTKA_TLS_DIR="/etc/raftka/tls", **env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "health", f"{host}:{GRPC_PORT}", "--timeout", "3",
        "--tls-ca", "/etc/raftka/tls/ca.crt",
        "--tls-cert", "/etc/raftka/tls/broker-103.crt",
        "--tls-key", "/etc/raftka/tls/broker-103.key",
    ]  # fmt: skip
    plain = entrypoint(tmp_path, "health", PATH=path, RAFTKA_HOST=host, **env)
    assert plain.stdout.split() == ["health", f"{host}:{GRPC_PORT}", "--timeout", "3"]


def test_the_entrypoint_refuses_a_tls_dir_without_the_nodes_certificate(tmp_path: Path) -> None:
    done = entrypoint(
        tmp_path, "config", RAFTKA_ROLE="broker", RAFTKA_NODE_ID="104", RAFTKA_HOST="b", RAFTKA_VOTERS=VOTERS,
        RAFTKA_TLS_DIR=str(make_documented_certs(tmp_path) / "certs"),
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith(f"raftka-node: error: RAFTKA_TLS_DIR: {tmp_path}/certs/broker-104.crt"), (
        done.stderr
    )


# Compose ------------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_compose_runs_three_controllers_and_three_brokers_each_on_its_named_volume() -> None:
    doc = compose()
    services = doc["services"]
    roles = {name: s["environment"]["RAFTKA_ROLE"] for name, s in services.items()}
    assert sorted(roles.values()) == [BROKER] * 3 + [CONTROLLER] * 3
    for name, service in services.items():
        env = service["environment"]
        assert env["RAFTKA_HOST"] == service["hostname"] == name, "nodes advertise their service names"
        [volume] = service["volumes"]
        assert volume == f"{name}:{DATA_DIR}" and name in doc["volumes"]
    ids = [int(s["environment"]["RAFTKA_NODE_ID"]) for s in services.values()]
    assert len(set(ids)) == len(ids)
    [voters_text] = {s["environment"]["RAFTKA_VOTERS"] for s in services.values()}
    voters = {(v.node_id, v.address) for v in parse_voters(voters_text)}
    assert voters == {
        (int(s["environment"]["RAFTKA_NODE_ID"]), f"{name}:{GRPC_PORT}")
        for name, s in services.items()
        if roles[name] == CONTROLLER
    }


def test_the_dockerfile_takes_its_base_as_an_argument_runs_as_its_user_and_checks_health() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE=python:3\.11-slim$", text, re.M)
    assert re.search(r"^FROM \$\{BASE\}$", text, re.M)
    assert re.search(rf"useradd .*--uid {UID} .*raftka", text)
    assert re.search(r"^USER raftka$", text, re.M)
    assert re.search(rf"^VOLUME {DATA_DIR}$", text, re.M)
    assert re.search(r'^HEALTHCHECK .*CMD \["raftka-node", "health"\]$', text, re.M)
    assert "--no-index" in text, "the build must not need a package index"


# the entrypoint -----------------------------------------------------------------------------

VOTERS = "1@controller-1:9093,2@controller-2:9093,3@controller-3:9093"


def written_config(tmp_path: Path, **env: str) -> NodeConfig:
    """The config ``raftka-node config`` writes for ``env``, read by raftka's own parser."""
    done = entrypoint(tmp_path, "config", RAFTKA_VOTERS=VOTERS, **env)
    assert done.returncode == 0, done.stderr
    return load_config(tmp_path / "node.toml")


def test_the_entrypoint_writes_a_broker_config_that_raftka_loads(tmp_path: Path) -> None:
    config = written_config(tmp_path, RAFTKA_ROLE="broker", RAFTKA_NODE_ID="101", RAFTKA_HOST="broker-1")
    assert (config.node_id, config.process_roles, str(config.data_dir)) == (101, (BROKER,), DATA_DIR)
    assert config.listener == "broker-1:9093"
    assert config.broker.data_listener == "broker-1:9094"
    assert config.kafka.listener == "broker-1:9092"
    assert config.kafka.external_listener == ""  # none unless an external address is given
    assert config.voter_addresses == {1: "controller-1:9093", 2: "controller-2:9093", 3: "controller-3:9093"}


def test_the_entrypoint_takes_a_controller_id_from_its_statefulset_ordinal(tmp_path: Path) -> None:
    config = written_config(
        tmp_path,
        RAFTKA_ROLE="controller",
        RAFTKA_NODE_ID_BASE="1",
        HOSTNAME="raftka-controller-2",
        RAFTKA_HOST="controller-3",
    )
    assert (config.node_id, config.process_roles, config.listener) == (3, (CONTROLLER,), "controller-3:9093")


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"RAFTKA_ROLE": "broker", "RAFTKA_NODE_ID": "101", "RAFTKA_HOST": "b"}, "RAFTKA_VOTERS"),
        (
            {"RAFTKA_ROLE": "broker", "RAFTKA_NODE_ID": "x", "RAFTKA_HOST": "b", "RAFTKA_VOTERS": VOTERS},
            "RAFTKA_NODE_ID",
        ),
        (
            {"RAFTKA_ROLE": "router", "RAFTKA_NODE_ID": "1", "RAFTKA_HOST": "b", "RAFTKA_VOTERS": VOTERS},
            "RAFTKA_ROLE",
        ),
        (
            {
                "RAFTKA_ROLE": "broker",
                "RAFTKA_NODE_ID_BASE": "101",
                "HOSTNAME": "box",
                "RAFTKA_HOST": "b",
                "RAFTKA_VOTERS": VOTERS,
            },
            "RAFTKA_NODE_ID_BASE",
        ),
        ({}, "RAFTKA_ROLE"),
        (
            {"RAFTKA_ROLE": "broker", "RAFTKA_NODE_ID": "101", "RAFTKA_HOST": "b", "RAFTKA_VOTERS": VOTERS,
             "RAFTKA_EXTERNAL_KAFKA_HOST": "10.1.2.3"},
            "RAFTKA_EXTERNAL_KAFKA_PORT_BASE",
        ),
        (
            {"RAFTKA_ROLE": "broker", "RAFTKA_NODE_ID": "101", "RAFTKA_HOST": "b", "RAFTKA_VOTERS": VOTERS,
             "RAFTKA_EXTERNAL_KAFKA_HOST": "10.1.2.3", "RAFTKA_EXTERNAL_KAFKA_PORT_BASE": "x"},
            "RAFTKA_EXTERNAL_KAFKA_PORT_BASE",
        ),
    ],
)  # fmt: skip
def test_the_entrypoint_refuses_a_bad_environment_naming_the_variable(
    tmp_path: Path, env: dict[str, str], named: str
) -> None:
    done = entrypoint(tmp_path, "config", **env)
    assert done.returncode == 2
    assert done.stderr.startswith(f"raftka-node: error: {named}"), done.stderr
