#!/usr/bin/env bash
# Installs everything graphserve needs, from the distribution's packages. The README's commands,
# .ci/run and both Dockerfile variants call this one script, so a newcomer, CI and the images get the
# same set. The distribution is read from /etc/os-release:
#   Debian 12     build + run + test dependencies, with Debian's CPU-only libtorch (CI, the CPU image)
#   Ubuntu 24.04  build dependencies, plus a pinned CUDA PyTorch wheel in a virtual environment for
#                 its libtorch (the CUDA image; Ubuntu has no libtorch package with CUDA)
#
#   deploy/install-deps.sh                       the set above
#   deploy/install-deps.sh --list-runtime BIN... print the packages owning the shared libraries BIN
#                                                load (run where BIN was built)
#   deploy/install-deps.sh --runtime FILE        install the packages FILE lists (a slim image)
set -euo pipefail

# The CUDA image's libtorch. 2.6 is the oldest the CUDA-graph executor is tested against; 2.11 + CUDA
# 13.0 is what the project's H200 host runs (../shared/GPU.md).
TORCH_VERSION=${TORCH_VERSION:-2.11.0}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cu130}
TORCH_VENV=${TORCH_VENV:-/opt/graphserve-torch}

. /etc/os-release
case "$ID:$VERSION_ID" in
  debian:12)
    build_packages=(
      build-essential cmake ninja-build pkg-config git ca-certificates
      libtorch-dev
      # Debian's libtorch calls the generic libblas.so.3; OpenBLAS takes that alternative over and
      # makes CPU inference 10-20x faster than the reference BLAS.
      libopenblas0-pthread
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
      libspdlog-dev libfmt-dev
      prometheus-cpp-dev
      libgtest-dev libgmock-dev
      libcli11-dev nlohmann-json3-dev
      # Tests: TorchScript models made at test time, and a Python KServe v2 client.
      python3 python3-torch python3-grpcio python3-numpy python3-protobuf
      # Tests of the metrics endpoint against the real Prometheus tools; the deploy tests parse the
      # compose file and Kubernetes manifests.
      prometheus curl python3-yaml
    )
    ;;
  ubuntu:24.04)
    build_packages=(
      build-essential cmake ninja-build pkg-config git ca-certificates
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
      libspdlog-dev libfmt-dev prometheus-cpp-dev libcli11-dev nlohmann-json3-dev
      libgtest-dev libgmock-dev
      python3 python3-venv
    )
    ;;
  *)
    echo "install-deps: unsupported system '$PRETTY_NAME' (Debian 12 or Ubuntu 24.04)" >&2
    exit 2
    ;;
esac

sudo_cmd=()
[[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)

# Installs what is missing; skips the slow apt round trip when everything is there (a second run).
apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-deps: all $# packages present"
    return
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# The package that owns a shared library, or nothing (a library from the PyTorch wheel). dpkg knows
# files by the path their package ships, which on a merged-/usr system may lack or have /usr.
owning_package() {
  local path=$1 candidate
  for candidate in "$path" "${path#/usr}" "/usr$path"; do
    dpkg-query -S "$candidate" 2>/dev/null | head -n1 | cut -d: -f1 && return
  done
  return 0
}

case "${1:-}" in
  --list-runtime)
    shift
    # readlink -f: follows the alternatives links, e.g. libblas.so.3 to OpenBLAS.
    ldd "$@" | awk '/=> \// { print $3 }' | sort -u | while read -r library; do
      owning_package "$(readlink -f "$library")"
    done | sort -u
    ;;
  --runtime)
    mapfile -t runtime_packages < <(grep -v '^\s*$' "$2")
    apt_install "${runtime_packages[@]}"
    ;;
  "")
    apt_install "${build_packages[@]}"
    if [[ $ID == ubuntu ]]; then
      # Ubuntu 24.04's pip refuses the system interpreter (PEP 668): the wheel gets a venv of its own.
      [[ -x $TORCH_VENV/bin/python3 ]] || "${sudo_cmd[@]}" python3 -m venv "$TORCH_VENV"
      if ! "$TORCH_VENV/bin/python3" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
        "${sudo_cmd[@]}" "$TORCH_VENV/bin/pip" install --no-cache-dir "torch==$TORCH_VERSION" \
          --index-url "$TORCH_INDEX_URL"
      fi
      echo "install-deps: libtorch from $TORCH_VENV (build with TORCH_PYTHON=$TORCH_VENV/bin/python3)"
    fi
    ;;
  *)
    echo "usage: $0 [--list-runtime BINARY... | --runtime PACKAGE_LIST_FILE]" >&2
    exit 2
    ;;
esac
