#!/usr/bin/env bash
# Run on a Debian 12 machine: downloads (does not install) the Debian packages a CUDA host needs that
# neither its image nor PyPI provides, into DIR (default .debs/): gRPC C++ (with Abseil, RE2 and
# c-ares, which gRPC's CMake config looks for), prometheus-cpp (with civetweb: its CMake config checks
# that the library and the civetweb program exist), CLI11, nlohmann-json and libmicrohttpd (the REST
# and /metrics ports; its GnuTLS library is the host's own, GnuTLS's headers are fetched for the
# HTTPS ports' certificate reload) and libcurl's headers (the load
# generator's REST transport; the library is the host's). deploy/cuda-build.sh
# unpacks them there into a private prefix.
# libtorch is the host's own PyTorch wheel, and protobuf, spdlog and GoogleTest are the host's
# packages (docs/development/gpu-host.md), so none of them is fetched.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-$repo/.debs}
packages=(
  libgrpc++-dev libgrpc++1.51 libgrpc29 libgrpc-dev protobuf-compiler-grpc
  libabsl20220623 libabsl-dev libre2-9 libre2-dev libc-ares2 libc-ares-dev
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
  libcivetweb1 libcivetweb-dev civetweb
  libcli11-dev nlohmann-json3-dev
  libmicrohttpd12 libmicrohttpd-dev libgnutls28-dev
  libcurl4-openssl-dev
)
mkdir -p "$dir"
cd "$dir"
rm -f ./*.deb
apt-get download "${packages[@]}"
echo "fetch-cuda-host-debs: $(ls -1 ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in $dir"
