#!/usr/bin/env bash
# Fuzzes the code that reads bytes from clients and model authors (tests/fuzz: the REST and gRPC
# infer request decoders, the HTTP front door and the config.pbtxt loader) under ASan and UBSan. Builds the fuzz build
# (clang, GRAPHSERVE_FUZZ=ON) into FUZZ_BUILD_DIR (default build-fuzz/), runs each target for
# FUZZ_SECONDS (default 60) on a scratch copy of its checked-in seed corpus (tests/fuzz/corpus/), and
# fails on any crash, leak, sanitizer report or slow input, keeping the input that caused it under
# FUZZ_BUILD_DIR/fuzz-artifacts/. deploy/run-tests.sh runs it after the test suite.
#
#   deploy/run-fuzz.sh             every target
#   deploy/run-fuzz.sh TARGET...   some: rest_infer_request grpc_infer_request http_request model_config
#
# To reproduce a finding: FUZZ_BUILD_DIR/tests/fuzz/TARGET_fuzzer ARTIFACT
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${FUZZ_BUILD_DIR:-$repo/build-fuzz}
seconds=${FUZZ_SECONDS:-60}
jobs=${JOBS:-$(nproc)}
compiler=${FUZZ_CXX:-clang++}
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(rest_infer_request grpc_infer_request http_request model_config)

if ! command -v "$compiler" >/dev/null; then
  echo "run-fuzz: no $compiler; deploy/install-deps.sh installs clang and its fuzzer runtime" >&2
  exit 2
fi

start=$SECONDS
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  # -O1 and line tables: fast to compile, symbolized stacks, assertions on.
  cmake -S "$repo" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" -DCMAKE_CXX_COMPILER="$compiler" -DGRAPHSERVE_FUZZ=ON
fi
cmake --build "$build_dir" --parallel "$jobs" --target "${targets[@]/%/_fuzzer}"
echo "run-fuzz: fuzz build ready in $((SECONDS - start)) s"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
for target in "${targets[@]}"; do
  corpus=$scratch/$target
  artifacts=$build_dir/fuzz-artifacts/$target
  log=$build_dir/fuzz-logs/$target.log
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  # A copy: what the run adds to the corpus stays out of the repository.
  cp -r "$repo/tests/fuzz/corpus/$target/." "$corpus/"
  seeds=$(find "$corpus" -type f | wc -l)
  status=0
  # -timeout: an input slower than 10 s is a hang, a finding like a crash. -rss_limit_mb: a
  # request's decoding may not need gigabytes.
  "$build_dir/tests/fuzz/${target}_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1 || status=$?
  executions=$(awk '/stat::number_of_executed_units/ { print $2 }' "$log")
  echo "run-fuzz: $target: ${executions:-?} executions in $seconds s, corpus $seeds -> $(find "$corpus" -type f | wc -l) inputs"
  if [[ $status -ne 0 ]]; then
    failed+=("$target")
    tail -n 60 "$log" >&2
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n1)
    echo "run-fuzz: $target FAILED (exit $status); input: ${artifact:-none written}; log: $log" >&2
  fi
done
echo "run-fuzz: done in $((SECONDS - start)) s"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "run-fuzz: findings in ${failed[*]}" >&2
  exit 1
fi
