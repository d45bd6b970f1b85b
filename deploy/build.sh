#!/usr/bin/env bash
# Configures and builds graphserve (server, client, tests) into BUILD_DIR (default: build/), against
# the libtorch of the project's venv (deploy/toolchain.env, made by deploy/install-deps.sh), CUDA-graph
# executor included. Incremental: a second run rebuilds only what changed. Extra arguments go to the
# first CMake configure.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$repo/deploy/toolchain.env"
build_dir=${BUILD_DIR:-$repo/build}
jobs=${JOBS:-$(nproc)}

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake -S "$repo" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
    -DGRAPHSERVE_PYTHON="${GRAPHSERVE_PYTHON:-$GRAPHSERVE_VENV/bin/python3}" "$@"
fi
cmake --build "$build_dir" --parallel "$jobs"
