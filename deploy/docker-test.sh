#!/usr/bin/env bash
# make docker-test: build raftka's image and prove a compose cluster works end to end.
#
#  1. Docker, docker-compose and debootstrap: installed with apt-get when missing (as root,
#     or with sudo -n); dockerd started when its socket does not answer.
#  2. A local base image, since no image registry may be reachable: debootstrap's minbase
#     bookworm with python3 and python3-venv, imported as raftka-base:bookworm (built once
#     and kept: a later run finds it and skips this step; `docker image rm
#     raftka-base:bookworm` forces a rebuild).
#  3. raftka and its dependencies as wheels built on the host, then the image from
#     deploy/Dockerfile with BASE=raftka-base:bookworm (the build reaches no network).
#  4. deploy/compose.yaml: 3 controllers and 3 brokers, until every container is healthy;
#     a topic; records produced through raftka's data protocol and Kafka's wire protocol
#     (kafka-python, inside a container, and on the host through the brokers' published
#     external Kafka listeners) and consumed back; every record must return.
#  5. Teardown whatever happened: containers, network and volumes removed.
#
# Environment: PYTHON (the project's venv python, for the wheels), DEBIAN_MIRROR.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_IMAGE=raftka-base:bookworm
IMAGE=raftka:docker-test
PROJECT=raftka-dockertest
TOPIC=smoke
RAFTKA_RECORDS=100
KAFKA_RECORDS=10
HEALTHY_TIMEOUT_S=300
DOCKERD_TIMEOUT_S=60
STARTED=$(date +%s)

say() { echo "docker-test: $*"; }
fail() {
    echo "docker-test: FAILED: $*" >&2
    exit 1
}

# 1. tools ---------------------------------------------------------------------------------
as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi
}

install_missing() {
    local missing=()
    command -v docker >/dev/null || missing+=(docker.io)
    command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 || missing+=(docker-compose)
    command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
    [ ${#missing[@]} -eq 0 ] && return
    say "installing ${missing[*]} with apt-get"
    command -v apt-get >/dev/null || fail "missing ${missing[*]}, and no apt-get to install them with"
    as_root apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
        { as_root apt-get update -qq >/dev/null 2>&1 && as_root apt-get install -y -qq "${missing[@]}" >/dev/null; } ||
        fail "could not install ${missing[*]} (apt-get needs root, or sudo without a password)"
}

ensure_dockerd() {
    docker info >/dev/null 2>&1 && return
    local dockerd
    dockerd=$(command -v dockerd || echo /usr/sbin/dockerd)
    [ -x "$dockerd" ] || fail "the Docker daemon does not answer and there is no dockerd to start"
    [ "$(id -u)" = 0 ] || fail "the Docker daemon does not answer; start it as root ($dockerd)"
    say "starting $dockerd (log: /tmp/raftka-dockerd.log)"
    nohup "$dockerd" >/tmp/raftka-dockerd.log 2>&1 &
    for _ in $(seq "$DOCKERD_TIMEOUT_S"); do
        docker info >/dev/null 2>&1 && return
        sleep 1
    done
    fail "dockerd did not answer within ${DOCKERD_TIMEOUT_S}s; see /tmp/raftka-dockerd.log"
}

compose() {
    if command -v docker-compose >/dev/null; then
        docker-compose -p "$PROJECT" -f "$ROOT/deploy/compose.yaml" "$@"
    else
        docker compose -p "$PROJECT" -f "$ROOT/deploy/compose.yaml" "$@"
    fi
}

# 2. base image ------------------------------------------------------------------------------
ensure_base() {
    if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        say "base image $BASE_IMAGE is there (kept from an earlier run)"
        return
    fi
    [ "$(id -u)" = 0 ] || command -v sudo >/dev/null || fail "debootstrap needs root"
    local rootfs
    rootfs=$(mktemp -d /tmp/raftka-rootfs.XXXXXX)
    say "debootstrap bookworm (minbase, python3, python3-venv) from $DEBIAN_MIRROR"
    as_root debootstrap --variant=minbase --include=python3,python3-venv bookworm "$rootfs" "$DEBIAN_MIRROR" \
        >/tmp/raftka-debootstrap.log 2>&1 ||
        { as_root rm -rf "$rootfs"; fail "debootstrap failed; see /tmp/raftka-debootstrap.log"; }
    as_root rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    as_root tar -C "$rootfs" -c . | docker import - "$BASE_IMAGE" >/dev/null
    as_root rm -rf "$rootfs"
    say "imported $BASE_IMAGE"
}

# 3. wheels and image -----------------------------------------------------------------------
build_image() {
    [ -x "$PYTHON" ] || fail "no python at $PYTHON (make docker-test creates the venv first)"
    CONTEXT=$(mktemp -d /tmp/raftka-image.XXXXXX)
    say "building wheels of raftka and its dependencies"
    "$PYTHON" -m pip wheel --quiet --disable-pip-version-check "$ROOT" -w "$CONTEXT/wheels" \
        2>"$CONTEXT/pip.log" || { cat "$CONTEXT/pip.log" >&2; fail "pip wheel failed"; }
    cp "$ROOT/deploy/Dockerfile" "$ROOT/deploy/raftka-node.sh" "$CONTEXT/"
    say "building $IMAGE on $BASE_IMAGE"
    docker build --build-arg BASE="$BASE_IMAGE" -t "$IMAGE" "$CONTEXT" >"$CONTEXT/build.log" 2>&1 ||
        { tail -30 "$CONTEXT/build.log" >&2; fail "docker build failed"; }
}

# 4. the cluster ----------------------------------------------------------------------------
container() { compose ps -q "$1"; }

in_node() { # in_node SERVICE COMMAND...: run in the service's container, stdin passed through
    local service=$1
    shift
    docker exec -i "$(container "$service")" "$@"
}

wait_healthy() {
    local deadline=$(($(date +%s) + HEALTHY_TIMEOUT_S)) report
    while true; do
        report=""
        local all=1
        for service in controller-1 controller-2 controller-3 broker-1 broker-2 broker-3; do
            local id status
            id=$(container "$service")
            status=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id")
            report+=" $service=$status"
            [ "$status" = healthy ] || all=0
        done
        if [ $all = 1 ]; then
            say "healthy:$report"
            return
        fi
        [ "$(date +%s)" -lt "$deadline" ] || fail "not healthy within ${HEALTHY_TIMEOUT_S}s:$report"
        sleep 2
    done
}

exercise() {
    local controllers=controller-1:9093,controller-2:9093,controller-3:9093
    in_node broker-1 raftka-node topics create "$TOPIC" --partitions 3 --replication-factor 3 \
        --bootstrap-controller "$controllers" >/dev/null
    say "topic $TOPIC created (3 partitions, 3 replicas)"

    seq 1 "$RAFTKA_RECORDS" | sed 's/^/raftka-/' |
        in_node broker-1 raftka-node produce "$TOPIC" --bootstrap-server broker-1:9094 >/dev/null
    say "produced $RAFTKA_RECORDS records through broker-1's data listener"

    in_node broker-3 python3 - "$TOPIC" "$KAFKA_RECORDS" <<'EOF'
import sys
from kafka import KafkaProducer

topic, count = sys.argv[1], int(sys.argv[2])
producer = KafkaProducer(bootstrap_servers="broker-3:9092", acks="all")
for i in range(1, count + 1):
    producer.send(topic, f"kafka-{i}".encode()).get(timeout=30)
producer.close()
EOF
    say "produced $KAFKA_RECORDS records through broker-3's Kafka listener"

    "$PYTHON" - "$TOPIC" "$KAFKA_RECORDS" <<'EOF'
import sys
from kafka import KafkaConsumer, KafkaProducer

topic, count = sys.argv[1], int(sys.argv[2])
bootstrap = ["localhost:19101", "localhost:19102", "localhost:19103"]  # the published ports
producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
for i in range(1, count + 1):
    producer.send(topic, f"host-{i}".encode()).get(timeout=30)
producer.close()
consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                         consumer_timeout_ms=10_000, enable_auto_commit=False)
got = {m.value.decode() for m in consumer}
consumer.close()
missing = {f"host-{i}" for i in range(1, count + 1)} - got
sys.exit(f"the host's consumer did not read {sorted(missing)}" if missing else 0)
EOF
    say "produced $KAFKA_RECORDS records from the host through the published ports and read them back"

    local expected got
    expected=$( (seq 1 "$RAFTKA_RECORDS" | sed 's/^/raftka-/'; seq 1 "$KAFKA_RECORDS" | sed 's/^/kafka-/'; seq 1 "$KAFKA_RECORDS" | sed 's/^/host-/') | sort)
    got=$(in_node broker-2 raftka-node consume "$TOPIC" --from-beginning --bootstrap-server broker-2:9094 \
        --max-messages $((RAFTKA_RECORDS + 2 * KAFKA_RECORDS)) --timeout-ms 30000 | sort)
    [ "$got" = "$expected" ] ||
        fail "consumed $(echo "$got" | grep -c .) records, not the $((RAFTKA_RECORDS + 2 * KAFKA_RECORDS)) produced: $(diff <(echo "$expected") <(echo "$got") | head -5 | tr '\n' ' ')"
    say "consumed all $((RAFTKA_RECORDS + 2 * KAFKA_RECORDS)) records back through broker-2"
}

# 5. teardown -------------------------------------------------------------------------------
teardown() {
    local status=$?
    set +e
    if [ $status != 0 ] && [ -n "${CLUSTER_UP:-}" ]; then
        echo "docker-test: last log lines of every node:" >&2
        compose logs --no-color --tail 15 >&2
    fi
    if [ -n "${CLUSTER_UP:-}" ]; then
        compose down --volumes --remove-orphans --timeout 30 >/dev/null 2>&1
        say "cluster removed (containers, network, volumes)"
    fi
    [ -n "${CONTEXT:-}" ] && rm -rf "$CONTEXT"
    docker image rm "$IMAGE" >/dev/null 2>&1
    if [ $status = 0 ]; then
        say "PASSED in $(($(date +%s) - STARTED))s"
    else
        echo "docker-test: failed after $(($(date +%s) - STARTED))s" >&2
    fi
}

install_missing
ensure_dockerd
ensure_base
trap teardown EXIT
build_image
CLUSTER_UP=1
compose down --volumes --remove-orphans >/dev/null 2>&1 || true # a run killed before its teardown
RAFTKA_CLUSTER_ID=$(docker run --rm "$IMAGE" storage random-uuid)
export RAFTKA_IMAGE=$IMAGE RAFTKA_CLUSTER_ID
say "starting 3 controllers and 3 brokers (cluster $RAFTKA_CLUSTER_ID)"
compose up -d >/dev/null 2>&1 || fail "compose up failed"
wait_healthy
exercise
