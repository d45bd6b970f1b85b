#!/usr/bin/env bash
# Builds the CPU image (graphserve:cpu) on a Debian 12 machine with no Docker engine and no registry:
# buildah from Debian's packages, vfs storage, chroot isolation. The Dockerfile's CPU bases
# debian:bookworm and debian:bookworm-slim are made here with debootstrap and tagged with those names,
# so that its FROM lines resolve locally and nothing is pulled (deploy/bookworm-rootfs.sh). Where a
# Docker engine runs, deploy/docker-cpu-image.sh does the same with it and also starts the image.
#
#   deploy/build-image-daemonless.sh            bases if missing, then the image, then a smoke check
#   REBUILD_BASES=1 deploy/build-image-daemonless.sh   makes the two bases again
#
# Run as root (buildah's vfs storage in /var/lib/containers). Environment: MIRROR (see
# deploy/bookworm-rootfs.sh), IMAGE (tag, default graphserve:cpu), WORK (debootstrap folder, default
# /var/tmp/graphserve-bases).
set -euo pipefail

IMAGE=${IMAGE:-graphserve:cpu}
WORK=${WORK:-/var/tmp/graphserve-bases}
repo=$(cd "$(dirname "$0")/.." && pwd)
. "$repo/deploy/bookworm-rootfs.sh"

# vfs: no overlay mount needed (works inside containers and VMs without fuse); chroot: no runc/crun
# and no network namespace setup beyond what unshare gives root.
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
bh=(buildah --storage-driver vfs)

if [[ $(id -u) -ne 0 ]]; then
  echo "build-image-daemonless: run as root" >&2
  exit 2
fi

if ! command -v buildah >/dev/null; then
  echo "build-image-daemonless: installing buildah"
  DEBIAN_FRONTEND=noninteractive apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q buildah
fi

# A base image from the tree: a scratch container, the tree unpacked into its mount (tar keeps
# owners, modes and setuid bits, which `buildah copy` would reset), committed under NAME.
make_base() {
  local name=$1 ctr mnt
  if [[ -z ${REBUILD_BASES:-} ]] && "${bh[@]}" inspect --type image "$name" >/dev/null 2>&1; then
    echo "build-image-daemonless: base $name present"
    return
  fi
  make_rootfs "$WORK"
  echo "build-image-daemonless: making base $name"
  ctr=$("${bh[@]}" from --pull-never scratch)
  mnt=$("${bh[@]}" mount "$ctr")
  tar -C "$WORK/rootfs" -c . | tar -C "$mnt" -xp --numeric-owner
  "${bh[@]}" umount "$ctr" >/dev/null
  "${bh[@]}" config --os linux --arch amd64 \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd bash "$ctr"
  "${bh[@]}" commit --rm "$ctr" "$name"
}

make_base debian:bookworm
make_base debian:bookworm-slim

echo "build-image-daemonless: building $IMAGE"
SECONDS=0
before=$("${bh[@]}" containers -q --all)
# --pull-never: the FROM lines must resolve to the bases above. The cuda stages are never built;
# buildah skips stages the target does not depend on and does not look their bases up. --format
# docker: the default OCI format drops the Dockerfile's HEALTHCHECK (buildah warns and ignores it).
"${bh[@]}" bud --isolation chroot --pull-never --layers --format docker \
  --build-arg VARIANT=cpu -t "$IMAGE" -f "$repo/Dockerfile" "$repo"
echo "build-image-daemonless: built $IMAGE in ${SECONDS}s"
# buildah 1.28 leaves a working container behind for each stage that is only a FROM line
# (build-cpu, runtime-cpu); remove the ones this build made.
for id in $("${bh[@]}" containers -q --all); do
  grep -qx "$id" <<<"$before" || "${bh[@]}" rm "$id" >/dev/null
done

# Smoke check: the server binary runs in the image, with its shared libraries resolved there.
ctr=$("${bh[@]}" from --pull-never "$IMAGE")
trap '"${bh[@]}" rm "$ctr" >/dev/null' EXIT
"${bh[@]}" run --isolation chroot "$ctr" -- graphserve --version
"${bh[@]}" run --isolation chroot "$ctr" -- graphserve-cli --help >/dev/null
echo "build-image-daemonless: HEALTHCHECK $("${bh[@]}" inspect --type image \
  --format '{{.Docker.Config.Healthcheck.Test}}' "$IMAGE")"
echo "build-image-daemonless: $IMAGE ok"
