#!/usr/bin/env bash
# make test-fresh: `make test` as on a machine that never ran it, in a chroot of Debian
# bookworm, as root, with CI=true (a test that cannot get its tool fails, it does not skip).
#
#  1. debootstrap (installed with apt-get if missing) a minbase bookworm, then apt-get what a
#     fresh machine of this kind has and nothing more: python3 (3.11) with venv, pip and
#     its headers, make, git, gcc, openjdk-17-jre-headless. Built once and kept in
#     $FRESH_CACHE/base (rm -rf it to rebuild); the machine's own CA certificates
#     (/usr/local/share/ca-certificates: a TLS-intercepting proxy's) are added, since pip
#     and the KafkaJS test must reach their registries.
#  2. Each run: a throwaway copy of that base (an overlay mount, or cp -a where overlays do
#     not work), a clean clone of this repository's HEAD in /root/raftka (uncommitted
#     changes are not in it), /proc, /sys, /dev, /dev/pts and /dev/shm mounted.
#  3. `CI=true make test` inside, its output here and in $FRESH_CACHE/last-run.log; the
#     time it took at the end. Exit status: make's.
#  4. Whatever happened: every process left in the chroot killed, the mounts and the copy
#     removed (the base stays).
#
# Environment: FRESH_CACHE (default /var/cache/raftka-fresh), DEBIAN_MIRROR.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
FRESH_CACHE=${FRESH_CACHE:-/var/cache/raftka-fresh}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE=$FRESH_CACHE/base
PACKAGES="python3 python3-venv python3-pip python3-dev make git gcc openjdk-17-jre-headless ca-certificates"
# The CA variables of this machine, so pip, node and curl inside trust what they trust here.
PASS_ENV="SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE PIP_CERT NODE_EXTRA_CA_CERTS PIP_DEFAULT_TIMEOUT"

say() { echo "fresh-machine: $*"; }
fail() {
    echo "fresh-machine: FAILED: $*" >&2
    exit 1
}
[ "$(id -u)" = 0 ] || fail "debootstrap, chroot and mounts need root: sudo make test-fresh"

mount_api() {  # /proc, /sys and /dev of the host in chroot $1
    mount -t proc proc "$1/proc"
    mount -t sysfs sysfs "$1/sys"
    mount --bind /dev "$1/dev"
    mount --bind /dev/pts "$1/dev/pts"
    mount -t tmpfs -o mode=1777 shm "$1/dev/shm"
}

unmount_all() {  # every mount under $1, deepest first
    local target
    for target in $(awk -v root="$1" '$2 == root || index($2, root "/") == 1 {print $2}' /proc/self/mounts | sort -r); do
        umount "$target" 2>/dev/null || umount -l "$target" 2>/dev/null || true
    done
}

kill_chrooted() {  # every process whose root is $1: only what this script started in there
    local proc pids=()
    for proc in /proc/[0-9]*; do
        [ "$(readlink "$proc/root" 2>/dev/null)" = "$1" ] && pids+=("${proc#/proc/}")
    done
    [ ${#pids[@]} -eq 0 ] || kill -9 "${pids[@]}" 2>/dev/null || true
}

# 1. the base ---------------------------------------------------------------------------------
build_base() {
    command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || {
        say "installing debootstrap with apt-get"
        apt-get install -y -qq debootstrap >/dev/null 2>&1 ||
            { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq debootstrap >/dev/null; } ||
            fail "could not install debootstrap"
    }
    local building=$BASE.building
    rm -rf "$building"
    mkdir -p "$building"
    say "debootstrap bookworm (minbase) from $DEBIAN_MIRROR into $building (log: $FRESH_CACHE/debootstrap.log)"
    debootstrap --variant=minbase bookworm "$building" "$DEBIAN_MIRROR" >"$FRESH_CACHE/debootstrap.log" 2>&1 ||
        fail "debootstrap failed; see $FRESH_CACHE/debootstrap.log"
    mkdir -p "$building/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$building/usr/local/share/ca-certificates/" 2>/dev/null || true
    cp /etc/resolv.conf "$building/etc/resolv.conf"
    mount_api "$building"
    trap 'unmount_all "$building"' EXIT
    say "apt-get install $PACKAGES (log: $FRESH_CACHE/apt.log)"
    chroot "$building" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
        sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends $PACKAGES && update-ca-certificates && apt-get clean" \
        >"$FRESH_CACHE/apt.log" 2>&1 || fail "apt-get in the chroot failed; see $FRESH_CACHE/apt.log"
    kill_chrooted "$building"
    unmount_all "$building"
    trap - EXIT
    echo "$PACKAGES" >"$building/.raftka-fresh-packages"
    mv "$building" "$BASE"
}

mkdir -p "$FRESH_CACHE"
if [ "$(cat "$BASE/.raftka-fresh-packages" 2>/dev/null)" != "$PACKAGES" ]; then
    rm -rf "$BASE"
    build_base
else
    say "reusing the base in $BASE"
fi

# 2. this run's machine ------------------------------------------------------------------------
RUN=$(mktemp -d "$FRESH_CACHE/run.XXXXXX")
MACHINE=$RUN/machine
cleanup() {
    kill_chrooted "$MACHINE"
    unmount_all "$MACHINE"
    unmount_all "$RUN"
    rm -rf "$RUN"
}
trap cleanup EXIT
mkdir -p "$MACHINE" "$RUN/upper" "$RUN/work"
if ! mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$RUN/upper,workdir=$RUN/work" "$MACHINE" 2>/dev/null; then
    say "no overlay mount here: copying the base"
    cp -a "$BASE/." "$MACHINE/"
fi
cp /etc/resolv.conf "$MACHINE/etc/resolv.conf"
HEAD=$(git -C "$ROOT" rev-parse HEAD)
[ -z "$(git -C "$ROOT" status --porcelain)" ] || say "uncommitted changes in $ROOT are not in the clone"
git clone -q --no-hardlinks "$ROOT" "$MACHINE/root/raftka"
git -C "$MACHINE/root/raftka" checkout -q --detach "$HEAD"
mount_api "$MACHINE"

# 3. make test ---------------------------------------------------------------------------------
env_args=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb CI=true)
for name in $PASS_ENV; do
    [ -n "${!name:-}" ] && env_args+=("$name=${!name}")
done
say "CI=true make test in a fresh bookworm at $HEAD (log: $FRESH_CACHE/last-run.log)"
started=$(date +%s)
trap 'say "stopped"; exit 143' TERM INT  # the EXIT trap then kills what runs in the chroot
chroot "$MACHINE" /usr/bin/env -i "${env_args[@]}" sh -c 'cd /root/raftka && make test; echo $? >/root/make-status' 2>&1 |
    tee "$FRESH_CACHE/last-run.log" &
wait $! || true
status=$(cat "$MACHINE/root/make-status" 2>/dev/null || echo 1)
say "make test exited $status after $(($(date +%s) - started)) s"
exit "$status"
