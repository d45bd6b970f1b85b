#!/usr/bin/env bash
# Configures and builds graphserve (server, client, tests) into BUILD_DIR (default: build/).
# Incremental: a second run rebuilds only what changed. With TORCH_PYTHON set (the CUDA image: the
# interpreter of install-deps.sh's PyTorch venv), libtorch is that wheel's rather than Debian's.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build}
jobs=${JOBS:-$(nproc)}

torch_prefix=()
if [[ -n ${TORCH_PYTHON:-} ]]; then
  torch_prefix=(-DCMAKE_PREFIX_PATH="$("$TORCH_PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')")
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake -S "$repo" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
    "${torch_prefix[@]}" "$@"
fi
cmake --build "$build_dir" --parallel "$jobs"
