#!/usr/bin/env bash
# Configures and builds graphserve (server, client, tests) into BUILD_DIR (default: build/).
# Incremental: a second run rebuilds only what changed.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
jobs=${JOBS:-$(nproc)}

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake -S "$repo" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@"
fi
cmake --build "$build_dir" --parallel "$jobs"
