#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a serving graphserve: installs the dependencies,
# builds, and starts the server on the built-in `encoder` (or on whatever flags you pass).
#   deploy/run-server.sh                       # built-in encoder on 0.0.0.0:8001
#   deploy/run-server.sh --model-repository /models --device cuda
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/deploy/install-deps.sh"
"$repo/deploy/build.sh"
exec "${BUILD_DIR:-$repo/build}/server/graphserve" "$@"
