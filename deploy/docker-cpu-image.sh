#!/usr/bin/env bash
# Builds the CPU image (graphserve:cpu) with a Docker engine and no image registry, starts it, and
# calls it as a user would: graphserve-cli health, metadata, infer and a bad request, /metrics, then
# `docker stop` (the server drains and exits 0). Rerunnable: what exists is reused.
#
#   deploy/docker-cpu-image.sh            engine if none answers, bases if missing, image, smoke run
#   REBUILD_BASES=1 deploy/docker-cpu-image.sh    makes debian:bookworm(-slim) again
#
# The Dockerfile's CPU bases debian:bookworm and debian:bookworm-slim are imported from a local
# debootstrap tree (deploy/bookworm-rootfs.sh), so its FROM lines resolve without pulling. BuildKit
# builds only the stages the CPU target needs (the classic builder would also build the CUDA stages,
# whose bases cannot be pulled): a client with buildx, or Debian's docker.io client, which has
# BuildKit built in. Without an engine, deploy/build-image-daemonless.sh builds with buildah instead.
#
# Run as root. Environment: IMAGE (default graphserve:cpu), WORK (debootstrap folder, default
# /var/tmp/graphserve-bases), MIRROR (see deploy/bookworm-rootfs.sh), GRPC_PORT and METRICS_PORT
# (loopback ports of the smoke run, default 18001 and 18002).
set -euo pipefail

IMAGE=${IMAGE:-graphserve:cpu}
WORK=${WORK:-/var/tmp/graphserve-bases}
GRPC_PORT=${GRPC_PORT:-18001}
METRICS_PORT=${METRICS_PORT:-18002}
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/deploy/bookworm-rootfs.sh"
. "$repo/deploy/toolchain.env"  # GRAPHSERVE_VENV, for pip's configuration below
say() { echo "docker-cpu-image: $*"; }

if [[ $(id -u) -ne 0 ]]; then
  say "run as root" >&2
  exit 2
fi

# A client that can drive BuildKit: one with the buildx plugin, else a pre-23 client (Debian's
# docker.io), which has it built in.
buildkit_client() {
  local client version
  for client in docker /usr/bin/docker; do
    command -v "$client" >/dev/null && "$client" buildx version >/dev/null 2>&1 && { echo "$client"; return; }
  done
  for client in /usr/bin/docker docker; do
    command -v "$client" >/dev/null || continue
    version=$("$client" version --format '{{.Client.Version}}' 2>/dev/null || true)
    [[ -n $version && ${version%%.*} -lt 23 ]] && { echo "$client"; return; }
  done
  return 1
}

ensure_engine() {
  if docker info >/dev/null 2>&1; then
    return
  fi
  if ! command -v dockerd >/dev/null; then
    say "installing Debian's docker.io (engine and a BuildKit-capable client)"
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io
  fi
  say "starting dockerd (log: /var/log/graphserve-dockerd.log)"
  setsid dockerd > /var/log/graphserve-dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && return
    sleep 1
  done
  say "dockerd did not answer within 60 s; see /var/log/graphserve-dockerd.log" >&2
  exit 1
}

# A base image from the tree, imported under NAME with the PATH and CMD the official images have.
make_base() {
  local name=$1
  if [[ -z ${REBUILD_BASES:-} ]] && docker image inspect "$name" >/dev/null 2>&1; then
    say "base $name present"
    return
  fi
  make_rootfs "$WORK"
  say "importing base $name"
  tar -C "$WORK/rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' - "$name" >/dev/null
}

ensure_engine
if ! client=$(buildkit_client); then
  if ! command -v /usr/bin/docker >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io
  fi
  client=$(buildkit_client) || { say "no docker client with BuildKit found" >&2; exit 1; }
fi
make_base debian:bookworm
make_base debian:bookworm-slim

# pip in the build uses this machine's CA bundle where its pip configuration names one (a TLS proxy
# that re-signs certificates): copied into the build context, ignored by git.
build_args=(--build-arg VARIANT=cpu)
# Debian 12's python3 has no pip (deploy/install-deps.sh installs none): then the project's venv, which
# reads the same configuration files; with neither the cert stays empty. Without `|| true` the failing
# pipe would end the script silently (set -e, pipefail).
pip_config_list() {
  python3 -m pip config list 2>/dev/null \
    || "$GRAPHSERVE_VENV/bin/python3" -m pip config list 2>/dev/null || true
}
pip_cert=${PIP_CERT:-$(pip_config_list | sed -n "s/^global\.cert='\(.*\)'$/\1/p" | head -n1)}
if [[ -n $pip_cert && -f $pip_cert ]]; then
  cp "$pip_cert" "$repo/.pip-cert.pem"
  build_args+=(--build-arg PIP_CERT=/src/.pip-cert.pem)
fi

say "building $IMAGE with $client (BuildKit)"
SECONDS=0
DOCKER_BUILDKIT=1 "$client" build --progress plain "${build_args[@]}" -t "$IMAGE" "$repo"
say "built $IMAGE in ${SECONDS}s, $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.1f GB", $1/1e9}')"

# The smoke run: the image's own graphserve-cli, from a second container on the host's network, so
# the calls go through the published loopback ports as any client's would.
container=graphserve-cpu-smoke
docker rm -f "$container" >/dev/null 2>&1 || true
docker run -d --name "$container" -p "127.0.0.1:$GRPC_PORT:8001" -p "127.0.0.1:$METRICS_PORT:8002" \
  "$IMAGE" --drain-timeout-s 5 >/dev/null
trap 'docker rm -f "$container" >/dev/null 2>&1 || true' EXIT
cli() { docker run --rm --network host --entrypoint graphserve-cli "$IMAGE" "$@"; }

say "waiting for readiness on 127.0.0.1:$GRPC_PORT"
for _ in $(seq 120); do
  cli health --address "127.0.0.1:$GRPC_PORT" --timeout-ms 2000 >/dev/null 2>&1 && break
  [[ $(docker inspect -f '{{.State.Running}}' "$container") == true ]] || { docker logs "$container"; exit 1; }
  sleep 2
done
cli health --address "127.0.0.1:$GRPC_PORT"
cli metadata --address "127.0.0.1:$GRPC_PORT" --model encoder
cli infer --address "127.0.0.1:$GRPC_PORT" --model encoder --rows 2 --length 40 --output pooler_output
if cli infer --address "127.0.0.1:$GRPC_PORT" --model encoder --rows 40 --length 8; then
  say "a batch above max_batch_size was accepted" >&2
  exit 1
fi
curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" | grep -E '^graphserve_(requests_total|build_info)'
say "HEALTHCHECK status: $(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$container")"
docker stop -t 30 "$container" >/dev/null
exit_code=$(docker inspect -f '{{.State.ExitCode}}' "$container")
docker logs "$container" 2>&1 | tail -n 3
[[ $exit_code == 0 ]] || { say "the server exited with $exit_code after docker stop" >&2; exit 1; }
say "$IMAGE ok: served, answered errors, drained and exited 0 on docker stop"
