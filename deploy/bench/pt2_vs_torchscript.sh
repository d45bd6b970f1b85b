#!/usr/bin/env bash
# BERT-base as an AOTInductor package (.pt2) against the same weights as TorchScript, on a CUDA
# host, in one run: per-bucket replay and eager times and the grid's capture time
# (graphserve-bucket-bench), then end-to-end mode (a) through the server (e2e_benchmark.py).
#
#   deploy/bench/pt2_vs_torchscript.sh BUILD_DIR OUT [--dtype bf16] [--concurrency 1,64,512]
#
# Writes OUT/buckets_<model>.md, OUT/e2e/ (e2e.md, e2e.json) and OUT/pt2_vs_torchscript.md. Exports
# into BUILD_DIR/bert_repo once (both formats from one set of weights) and reuses it afterwards.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$(cd "$1" && pwd)
out=$2
shift 2
dtype=bf16
concurrency=1,64,512
while [[ $# -gt 0 ]]; do
  case $1 in
    --dtype) dtype=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
python=${GRAPHSERVE_PYTHON:-python3}
mkdir -p "$out"
bert_repo=$build_dir/bert_repo
models=("bert_base_${dtype}" "bert_base_${dtype}_pt2")
if [[ ! -f $bert_repo/${models[1]}/model.pt2 || ! -f $bert_repo/${models[0]}/model.pt ]]; then
  start=$(date +%s)
  "$python" "$repo/deploy/models/export_bert.py" "$bert_repo" --dtype "$dtype" --device cuda --format both
  echo "export (both formats): $(( $(date +%s) - start )) s"
fi

# The buckets the issue compares, and the largest.
for model in "${models[@]}"; do
  "$build_dir/tools/graphserve-bucket-bench" --model-repository "$bert_repo" --model "$model" \
    --batches 1 2 4 8 32 --lengths 16 32 64 128 512 --iterations 50 | tee "$out/buckets_$model.md"
done

"$python" "$repo/deploy/bench/e2e_benchmark.py" --build-dir "$build_dir" --out "$out/e2e" \
  --bert-repo "$bert_repo" --models "$(IFS=,; echo "${models[*]}")" --modes a \
  --concurrency "$concurrency" --outputs pooler_output

# One table: replay per bucket, TorchScript against .pt2.
"$python" - "$out" "${models[@]}" <<'PY' | tee "$out/pt2_vs_torchscript.md"
import re, sys
out, torchscript, pt2 = sys.argv[1:4]
def replays(model):
    """bucket -> (bare replay µs, graph Execute µs: copies in and out included)."""
    table = {}
    for line in open(f"{out}/buckets_{model}.md"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and re.fullmatch(r"\d+x\d+", cells[0]) and cells[1].isdigit():
            table[cells[0]] = (float(cells[1]), float(cells[2]))
    return table
a, b = replays(torchscript), replays(pt2)
print(f"| bucket | TorchScript replay (µs) | .pt2 replay (µs) | .pt2 faster | TorchScript Execute (µs) | .pt2 Execute (µs) |")
print("|---|---:|---:|---:|---:|---:|")
for bucket in a:
    if bucket in b:
        (ra, ea), (rb, eb) = a[bucket], b[bucket]
        print(f"| {bucket} | {ra:.0f} | {rb:.0f} | {100 * (1 - rb / ra):.1f}% | {ea:.0f} | {eb:.0f} |")
PY
