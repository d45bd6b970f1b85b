#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to every test passing: installs the dependencies,
# builds, runs the whole suite under ctest, then fuzzes the request decoders and the config loader
# for a bounded time (deploy/run-fuzz.sh, about 3 minutes after its build). .ci/run calls exactly
# this. Arguments go to ctest and select tests, and then the fuzzing is left out; FUZZ_SECONDS=0
# leaves it out too.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
"$repo/deploy/install-deps.sh"
"$repo/deploy/build.sh"
(cd "$build_dir" && ctest --output-on-failure --parallel "${JOBS:-$(nproc)}" "$@")
if [[ $# -gt 0 || ${FUZZ_SECONDS:-} == 0 ]]; then
  echo "run-tests: fuzzing left out (deploy/run-fuzz.sh runs it alone)"
else
  "$repo/deploy/run-fuzz.sh"
fi
