#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to every test passing: installs the dependencies,
# builds, and runs the whole suite under ctest. .ci/run calls exactly this.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
"$repo/deploy/install-deps.sh"
"$repo/deploy/build.sh"
cd "$build_dir"
ctest --output-on-failure --parallel "${JOBS:-$(nproc)}" "$@"
