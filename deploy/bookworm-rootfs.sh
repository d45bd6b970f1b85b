# shellcheck shell=bash
# Sourced by the image scripts (build-image-daemonless.sh, docker-cpu-image.sh): a minbase Debian 12
# tree made with debootstrap, the local stand-in for the Dockerfile's CPU bases, since no image
# registry may be reachable. Its apt uses this machine's own Debian sources.
#   make_rootfs DIR    the tree in DIR/rootfs (kept; made again only when incomplete)
# Environment: MIRROR (the archive debootstrap fetches from; default: the one this machine's apt
# sources name for bookworm).

# The first archive URI that this machine's apt sources (deb822 or one-line format) give for the
# bookworm suite itself.
apt_archive() {
  local file
  for file in /etc/apt/sources.list.d/*.sources; do
    [[ -f $file ]] || continue
    awk 'BEGIN { RS=""; FS="\n" }
         /(^|\n)Suites:[^\n]*[[:space:]]bookworm([[:space:]]|$)/ && /(^|\n)Types:[^\n]*deb([[:space:]]|$)/ {
           for (i = 1; i <= NF; i++) if ($i ~ /^URIs:/) { split($i, f, /[[:space:]]+/); print f[2]; exit }
         }' "$file"
  done
  { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
    awk '$1 == "deb" && $0 ~ /[[:space:]]bookworm[[:space:]]/ { for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) { print $i; break } }'
}

# This machine's deb822 stanzas for bookworm's own suites.
debian_sources() {
  { cat /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } |
    awk 'BEGIN { RS=""; ORS="\n\n" }
         /(^|\n)Suites:([[:space:]]+bookworm(-updates|-security)?)+[[:space:]]*(\n|$)/ { print }'
}

make_rootfs() {
  local work=$1 root=$1/rootfs mirror=${MIRROR:-}
  if [[ -x $root/usr/bin/apt-get && -f $work/.complete ]]; then
    return
  fi
  [[ -n $mirror ]] || mirror=$(apt_archive | head -n1)
  if [[ -z $mirror ]]; then
    echo "no bookworm archive in this machine's apt sources; set MIRROR" >&2
    return 2
  fi
  command -v debootstrap >/dev/null || {
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap
  }
  rm -rf "$root" "$work/.complete"
  mkdir -p "$work"
  echo "debootstrap bookworm from $mirror into $root"
  debootstrap --variant=minbase bookworm "$root" "$mirror"
  # The image's apt sees what this machine's apt sees of Debian (bookworm, bookworm-updates and the
  # security suite), so install-deps.sh gets the same package versions in both; other repositories
  # of this machine stay out (their keys are not in the image).
  rm -f "$root/etc/apt/sources.list" "$root"/etc/apt/sources.list.d/*
  debian_sources > "$root/etc/apt/sources.list.d/debian.sources"
  if [[ ! -s $root/etc/apt/sources.list.d/debian.sources ]]; then  # one-line format only
    rm "$root/etc/apt/sources.list.d/debian.sources"
    { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
      { grep -E '^deb[[:space:]].*[[:space:]]bookworm(-updates|-security)?[[:space:]]' || true; } > "$root/etc/apt/sources.list"
  fi
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  touch "$work/.complete"
}
