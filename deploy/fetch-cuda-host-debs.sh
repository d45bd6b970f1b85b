#!/usr/bin/env bash
# Run on a Debian 12 machine: downloads (does not install) the Debian packages that a CUDA host
# without gRPC, prometheus-cpp, CLI11 and nlohmann-json needs, into DIR (default .debs/).
# deploy/cuda-build.sh unpacks them there into a private prefix. The set is the one proven on
# Ubuntu 24.04 (../shared/GPU.md), plus the project's header-only libraries.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-$repo/.debs}
packages=(
  libgrpc++-dev libgrpc++1.51 libgrpc29 libgrpc-dev protobuf-compiler-grpc
  libabsl20220623 libabsl-dev libre2-9 libre2-dev libc-ares2 libc-ares-dev
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
  libcivetweb1 libcivetweb-dev civetweb
  libprotobuf32 libprotoc32 libprotobuf-dev protobuf-compiler
  libcli11-dev nlohmann-json3-dev
)
mkdir -p "$dir"
cd "$dir"
apt-get download "${packages[@]}"
ls -1 "$dir" | wc -l
