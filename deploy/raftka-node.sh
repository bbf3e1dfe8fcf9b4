#!/bin/sh
# raftka-node: the container's entrypoint. It writes the node's config from environment
# variables, so one image and one manifest serve every node (a StatefulSet's pods differ
# only in their ordinal), then formats the data volume once or runs the server.
#
#   raftka-node start    format the volume if it is not yet formatted, then run the server
#   raftka-node format   only the formatting (a Kubernetes init container)
#   raftka-node server   only the server
#   raftka-node health   exit 0 when this node's gRPC health says SERVING (HEALTHCHECK)
#   raftka-node config   print the generated config
#   raftka-node ARGS...  anything else runs `raftka ARGS...` (produce, consume, topics...)
#
# Environment (the config keys they set are in README's configuration table):
#   RAFTKA_ROLE         controller or broker. Unset: RAFTKA_CONFIG is a mounted file, used as is.
#   RAFTKA_NODE_ID      this node's id; or RAFTKA_NODE_ID_BASE plus the ordinal that ends
#                       $HOSTNAME (a StatefulSet pod raftka-controller-2 with base 1 is node 3)
#   RAFTKA_HOST         the name this node listens on and advertises (its compose service,
#                       or POD.SERVICE in Kubernetes); every client must resolve it
#   RAFTKA_VOTERS       controller.quorum.voters: 1@HOST:PORT,2@HOST:PORT,3@HOST:PORT
#   RAFTKA_CLUSTER_ID   the cluster id storage is formatted with (`raftka storage random-uuid`)
#   RAFTKA_GRPC_PORT    gRPC listener (Raft, controller or broker API, health): 9093
#   RAFTKA_DATA_PORT    a broker's data listener (raftka's clients): 9094
#   RAFTKA_KAFKA_PORT   a broker's Kafka listener (Kafka's clients): 9092; "" for none
#   RAFTKA_EXTERNAL_KAFKA_ADDRESS  HOST:PORT Kafka clients outside the container network
#                       reach this broker at (a published port); its second Kafka listener
#                       then binds RAFTKA_EXTERNAL_KAFKA_PORT (19092) and advertises it
#   RAFTKA_EXTERNAL_KAFKA_HOST, RAFTKA_EXTERNAL_KAFKA_PORT_BASE  in a StatefulSet instead:
#                       advertise HOST:BASE+ORDINAL (the node's IP and the pod's NodePort)
#   RAFTKA_TLS_DIR      a folder holding ca.crt and this node's certificate and key as
#                       `raftka certs init` names them (controller-ID.crt/.key or
#                       broker-ID.crt/.key): every listener and connection of the node then
#                       speaks mutual TLS ([tls]), and `health` presents that certificate.
#                       Unset: plaintext
#   RAFTKA_SUPER_USERS  authorizer.super_users with TLS on: principals separated by ';'
#                       (User:CN=admin,OU=client,O=raftka)
#   RAFTKA_DATA_DIR     /var/lib/raftka (the volume)
#   RAFTKA_CONFIG       where the config is written: /etc/raftka/node.toml
#   RAFTKA_LOG_LEVEL    info;  RAFTKA_LOG_FORMAT: json
set -eu

CONFIG=${RAFTKA_CONFIG:-/etc/raftka/node.toml}
GRPC_PORT=${RAFTKA_GRPC_PORT:-9093}
RESOLVE_WAIT_S=60

die() {
    echo "raftka-node: error: $*" >&2
    exit 2
}

need() {
    eval "value=\${$1:-}"
    [ -n "$value" ] || die "$1 is not set ($2)"
}

node_id() {
    if [ -n "${RAFTKA_NODE_ID:-}" ]; then
        echo "$RAFTKA_NODE_ID"
        return
    fi
    need RAFTKA_NODE_ID_BASE "set RAFTKA_NODE_ID, or RAFTKA_NODE_ID_BASE for a StatefulSet"
    ordinal=${HOSTNAME##*-}
    case $ordinal in
    '' | *[!0-9]*) die "RAFTKA_NODE_ID_BASE: HOSTNAME '$HOSTNAME' does not end in -ORDINAL" ;;
    esac
    echo $((RAFTKA_NODE_ID_BASE + ordinal))
}

# The address Kafka clients outside the cluster's network are told for this broker:
# RAFTKA_EXTERNAL_KAFKA_ADDRESS as given, or, in a StatefulSet, the node's address
# (RAFTKA_EXTERNAL_KAFKA_HOST) and RAFTKA_EXTERNAL_KAFKA_PORT_BASE + the pod's ordinal,
# the NodePort of its own external Service; none if neither is set.
external_kafka_address() {
    if [ -n "${RAFTKA_EXTERNAL_KAFKA_ADDRESS:-}" ]; then
        echo "$RAFTKA_EXTERNAL_KAFKA_ADDRESS"
        return
    fi
    [ -n "${RAFTKA_EXTERNAL_KAFKA_HOST:-}" ] || return 0
    need RAFTKA_EXTERNAL_KAFKA_PORT_BASE "the external port of ordinal 0 (each pod's is BASE + its ordinal)"
    case $RAFTKA_EXTERNAL_KAFKA_PORT_BASE in '' | *[!0-9]*) die "RAFTKA_EXTERNAL_KAFKA_PORT_BASE: expected a number" ;; esac
    ordinal=${HOSTNAME##*-}
    case $ordinal in
    '' | *[!0-9]*) die "RAFTKA_EXTERNAL_KAFKA_PORT_BASE: HOSTNAME '$HOSTNAME' does not end in -ORDINAL" ;;
    esac
    echo "$RAFTKA_EXTERNAL_KAFKA_HOST:$((RAFTKA_EXTERNAL_KAFKA_PORT_BASE + ordinal))"
}

# This node's certificate and key in RAFTKA_TLS_DIR, without the suffix: DIR/ROLE-ID.
own_certificate() {
    need RAFTKA_ROLE "controller or broker: it names the certificate in RAFTKA_TLS_DIR"
    echo "$RAFTKA_TLS_DIR/$RAFTKA_ROLE-$(node_id)"
}

# The [tls] table, when RAFTKA_TLS_DIR holds the CA and this node's certificate and key.
tls_table() {
    [ -n "${RAFTKA_TLS_DIR:-}" ] || return 0
    own=$(own_certificate)
    for file in "$RAFTKA_TLS_DIR/ca.crt" "$own.crt" "$own.key"; do
        [ -r "$file" ] || die "RAFTKA_TLS_DIR: $file is missing or unreadable (the Secrets hold 'raftka certs init' files: see docs/deploy.md)"
    done
    echo
    echo "[tls]"
    echo "ca = \"$RAFTKA_TLS_DIR/ca.crt\""
    echo "cert = \"$own.crt\""
    echo "key = \"$own.key\""
}

# The [authorizer] table: RAFTKA_SUPER_USERS, principals separated by ';'.
authorizer_table() {
    [ -n "${RAFTKA_SUPER_USERS:-}" ] || return 0
    case $RAFTKA_SUPER_USERS in *'"'* | *'\'*) die "RAFTKA_SUPER_USERS: quotes and backslashes are not allowed" ;; esac
    echo
    echo "[authorizer]"
    printf 'super_users = ['
    separator=""
    old_ifs=$IFS
    IFS=';'
    set -f # a principal may hold '*': split, never glob
    for user in $RAFTKA_SUPER_USERS; do
        [ -n "$user" ] || continue
        printf '%s"%s"' "$separator" "$user"
        separator=", "
    done
    set +f
    IFS=$old_ifs
    echo "]"
}

write_config() {
    if [ -z "${RAFTKA_ROLE:-}" ]; then
        [ -r "$CONFIG" ] || die "RAFTKA_ROLE is not set and RAFTKA_CONFIG ($CONFIG) is not a readable file"
        return
    fi
    need RAFTKA_HOST "the name other nodes and clients reach this node by"
    need RAFTKA_VOTERS "controller.quorum.voters, e.g. 1@controller-1:9093,2@controller-2:9093,3@controller-3:9093"
    id=$(node_id)
    case $id in '' | *[!0-9]*) die "RAFTKA_NODE_ID: expected a number, got '$id'" ;; esac
    mkdir -p "$(dirname "$CONFIG")"
    {
        echo "node_id = $id"
        echo "process_roles = [\"$RAFTKA_ROLE\"]"
        echo "data_dir = \"${RAFTKA_DATA_DIR:-/var/lib/raftka}\""
        echo "listener = \"$RAFTKA_HOST:$GRPC_PORT\""
        echo
        echo "[controller.quorum]"
        echo "voters = \"$RAFTKA_VOTERS\""
        echo
        echo "[logging]"
        echo "level = \"${RAFTKA_LOG_LEVEL:-info}\""
        echo "format = \"${RAFTKA_LOG_FORMAT:-json}\""
        tls_table
        authorizer_table
        case $RAFTKA_ROLE in
        controller) ;;
        broker)
            kafka_port=${RAFTKA_KAFKA_PORT-9092}
            echo
            echo "[broker]"
            echo "data_listener = \"$RAFTKA_HOST:${RAFTKA_DATA_PORT:-9094}\""
            echo
            echo "[kafka]"
            echo "listener = \"${kafka_port:+$RAFTKA_HOST:$kafka_port}\""
            external=$(external_kafka_address)
            if [ -n "$external" ]; then
                echo "external_listener = \"0.0.0.0:${RAFTKA_EXTERNAL_KAFKA_PORT:-19092}\""
                echo "advertised_external_listener = \"$external\""
            fi
            ;;
        *) die "RAFTKA_ROLE: expected controller or broker, got '$RAFTKA_ROLE'" ;;
        esac
    } >"$CONFIG.tmp"
    mv "$CONFIG.tmp" "$CONFIG"
}

# The server binds RAFTKA_HOST's address: in Kubernetes a pod's DNS name can lag its start.
wait_resolvable() {
    [ -n "${RAFTKA_HOST:-}" ] || return 0
    waited=0
    until getent hosts "$RAFTKA_HOST" >/dev/null; do
        [ $waited -lt $RESOLVE_WAIT_S ] || die "RAFTKA_HOST: '$RAFTKA_HOST' does not resolve after ${RESOLVE_WAIT_S}s"
        sleep 1
        waited=$((waited + 1))
    done
}

format() {
    need RAFTKA_CLUSTER_ID "the same on every node; make one with 'raftka storage random-uuid'"
    # Formats an empty volume; leaves one formatted for this cluster and node as it is;
    # refuses one formatted for another cluster or node (a mix-up the operator must see).
    raftka storage format --config "$CONFIG" --cluster-id "$RAFTKA_CLUSTER_ID"
}

command=${1:-start}
case $command in
start)
    write_config
    format
    wait_resolvable
    exec raftka server --config "$CONFIG"
    ;;
format)
    write_config
    format
    ;;
server)
    write_config
    wait_resolvable
    exec raftka server --config "$CONFIG"
    ;;
health)
    address="${RAFTKA_HOST:-127.0.0.1}:$GRPC_PORT"
    timeout=${RAFTKA_HEALTH_TIMEOUT_S:-3}
    if [ -n "${RAFTKA_TLS_DIR:-}" ]; then # over mutual TLS, with this node's own certificate
        own=$(own_certificate)
        exec raftka health "$address" --timeout "$timeout" \
            --tls-ca "$RAFTKA_TLS_DIR/ca.crt" --tls-cert "$own.crt" --tls-key "$own.key"
    fi
    exec raftka health "$address" --timeout "$timeout"
    ;;
config)
    write_config
    cat "$CONFIG"
    ;;
*)
    exec raftka "$@"
    ;;
esac
