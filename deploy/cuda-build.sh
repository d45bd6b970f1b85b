#!/usr/bin/env bash
# One command that builds graphserve and runs every test on a CUDA host whose image already has the
# pinned PyTorch wheel (deploy/toolchain.env) for python3, the CUDA toolkit, protobuf, spdlog and
# GoogleTest (docs/development/gpu-host.md). The rest, which has no wheel (gRPC, prometheus-cpp,
# CLI11, nlohmann-json, libmicrohttpd, libcurl's headers), comes as Debian packages that
# deploy/fetch-cuda-host-debs.sh downloaded, unpacked into a private prefix: nothing is installed
# system-wide.
#
#   deploy/cuda-build.sh [--debs DIR] [--prefix DIR] [--build-dir DIR] [--no-test] [-- ctest args]
#
# Afterwards `source BUILD_DIR/env.sh` sets LD_LIBRARY_PATH for running the binaries by hand.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$repo/deploy/toolchain.env"
debs=$repo/.debs
wheels=$repo/.wheels
prefix=/tmp/graphserve-deps
build_dir=$repo/build-cuda
run_tests=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --debs) debs=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --no-test) run_tests=0; shift ;;
    --) shift; break ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

python=$(command -v "${PYTHON:-python3}")
echo "cuda-build: $("$python" -c 'import torch; print("libtorch", torch.__version__, "CUDA", torch.version.cuda)') from $python"

if [[ ! -f "$prefix/.unpacked" ]]; then
  shopt -s nullglob
  files=("$debs"/*.deb)
  [[ ${#files[@]} -gt 0 ]] || { echo "no .deb files in $debs (run deploy/fetch-cuda-host-debs.sh on Debian 12)" >&2; exit 1; }
  mkdir -p "$prefix"
  for f in "${files[@]}"; do dpkg -x "$f" "$prefix"; done
  touch "$prefix/.unpacked"
fi
# Wheels from deploy/fetch-cuda-host-wheels.sh (torchvision, tritonclient, ...) are unzipped, which
# is all a wheel's installation is without scripts, into a private folder put on PYTHONPATH: the
# host's Python stays as it is, and its pip is not needed.
python_dir=$prefix/python
if compgen -G "$wheels/*.whl" >/dev/null && [[ ! -f $python_dir/.unpacked ]]; then
  mkdir -p "$python_dir"
  for f in "$wheels"/*.whl; do "$python" -m zipfile -e "$f" "$python_dir"; done
  touch "$python_dir/.unpacked"
fi
[[ -d $python_dir ]] && export PYTHONPATH=$python_dir${PYTHONPATH:+:$PYTHONPATH}
libdir=$prefix/usr/lib/x86_64-linux-gnu
# libcurl's development package brings headers and a libcurl.so link to a library it does not
# bring: point that link at the host's own libcurl (the ABI is stable across curl releases).
if [[ -L $libdir/libcurl.so && ! -e $libdir/libcurl.so && -e /usr/lib/x86_64-linux-gnu/libcurl.so.4 ]]; then
  ln -sf /usr/lib/x86_64-linux-gnu/libcurl.so.4 "$libdir/libcurl.so"
fi
# RE2's pkg-config file names -L/usr/lib/...; the linker must search the prefix too.
export LIBRARY_PATH=$libdir${LIBRARY_PATH:+:$LIBRARY_PATH}
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$prefix/usr/bin:/usr/local/cuda/bin:$PATH

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  # The CMake check refuses a libtorch other than the pinned GRAPHSERVE_TORCH_VERSION.
  cmake -S "$repo" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix/usr" -DGRAPHSERVE_PYTHON="$python"
fi
cmake --build "$build_dir" --parallel "${JOBS:-$(nproc)}"
cat > "$build_dir/env.sh" <<ENV
export LD_LIBRARY_PATH=$libdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export PATH=$prefix/usr/bin:\$PATH
${PYTHONPATH:+export PYTHONPATH=$PYTHONPATH}
ENV

if [[ $run_tests == 1 ]]; then
  cd "$build_dir"
  ctest --output-on-failure --parallel "${CTEST_JOBS:-8}" "$@"
fi
