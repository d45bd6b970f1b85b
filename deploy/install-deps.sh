#!/usr/bin/env bash
# Installs everything graphserve needs to build, run and test on Debian 12 (bookworm), from Debian's
# packages only. The README's commands, .ci/run and the Dockerfile all call this one script, so a
# newcomer, CI and the CPU image get the same set.
#
#   deploy/install-deps.sh            build + run + test dependencies
#   deploy/install-deps.sh --runtime  only the shared libraries the graphserve binaries load
set -euo pipefail

runtime_only=0
[[ "${1:-}" == "--runtime" ]] && runtime_only=1

build_packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libtorch-dev
  # Debian's libtorch calls the generic libblas.so.3; OpenBLAS takes that alternative over and makes
  # CPU inference 10-20x faster than the reference BLAS.
  libopenblas0-pthread
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev
  prometheus-cpp-dev
  libgtest-dev libgmock-dev
  libcli11-dev nlohmann-json3-dev
  # Tests: TorchScript models made at test time, and a Python KServe v2 client.
  python3 python3-torch python3-grpcio python3-numpy python3-protobuf
  # Tests of the metrics endpoint against the real Prometheus tools.
  prometheus curl
)
runtime_packages=(
  libtorch1.13 libopenblas0-pthread libgrpc++1.51 libprotobuf32 libspdlog1.10 libfmt9
  libprometheus-cpp-core1.0 ca-certificates
)

if [[ $runtime_only == 1 ]]; then packages=("${runtime_packages[@]}"); else packages=("${build_packages[@]}"); fi

sudo_cmd=()
[[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)

# Skip the slow apt round trip when everything is already there (a developer's second run).
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
