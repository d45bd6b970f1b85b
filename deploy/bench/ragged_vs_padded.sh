#!/usr/bin/env bash
# Issue #45's benchmark on a CUDA host, in one run: BERT-base as ragged .pt2 buckets against the same
# weights as padded .pt2 and padded TorchScript buckets, the same client (graphserve-loadgen) and
# traffic (the default skewed mix, pooled output). Three parts, each optional:
#   export   deploy/models/export_bert.py into BUILD_DIR/bert_repo (once; reused afterwards)
#   buckets  graphserve-bucket-bench per model: bare replay, Execute and real tokens/s per bucket
#   profile  deploy/bench/profile_bucket.py on each model's largest bucket: GEMM, attention, the rest
#            (the ragged one as .pt2 and, as its kernels' split too, as TorchScript)
#   e2e      e2e_benchmark.py mode a (graphs + batcher) at each concurrency, with the ceiling and
#            the overhead at one client; then the ragged model again with other row sizes (mode g,
#            --ragged-rows; by default max batch + 1 alone, against the server's default staircase)
#
#   deploy/bench/ragged_vs_padded.sh BUILD_DIR OUT [--parts export,buckets,profile,e2e]
#       [--dtype bf16] [--concurrency 1,8,64,512,2048] [--ragged-max-batch 256] [--ragged-max-tokens 16384]
#       [--ragged-rows '257'|'9, 33'|none]
#
# Writes OUT/buckets_<model>.md, OUT/profile_<model>.md, OUT/e2e/ (e2e.md, e2e.json), OUT/e2e_rows/.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=$(cd "$1" && pwd)
out=$2
shift 2
parts=export,buckets,profile,e2e
dtype=bf16
concurrency=1,8,64,512,2048
# Rows of a ragged batch. A row costs a ragged model only its offset and pooled vector: at 32 rows
# (H100, 2026-12-07) the skewed mix filled a batch with about 2,100 of its 16,384 tokens.
ragged_max_batch=256
# Tokens of a ragged batch: the padded model's largest bucket (32 x 512), which is also the server's
# default budget (buckets.max_batch_tokens). The export's own default, max batch x max length, would
# be 131,072 at 256 rows: a bound no bucket of the server's grid reaches, and the profile's batch.
ragged_max_tokens=16384
# FlashAttention works for every row of a bucket, empty ones included (varlen_bound.py), so the
# server's default rows are a staircase (9, 33, 129, ... and max batch + 1). The second e2e run
# replays other row sizes: by default max batch + 1 alone (every batch in buckets of the most rows),
# to measure what the staircase gains; "none": that run is skipped.
ragged_rows=default
while [[ $# -gt 0 ]]; do
  case $1 in
    --parts) parts=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --ragged-max-batch) ragged_max_batch=$2; shift 2 ;;
    --ragged-max-tokens) ragged_max_tokens=$2; shift 2 ;;
    --ragged-rows) ragged_rows=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
wants() { [[ ,$parts, == *,$1,* ]]; }
[[ $ragged_rows == default ]] && ragged_rows=$((ragged_max_batch + 1))
[[ $ragged_rows == none ]] && ragged_rows=""
python=${GRAPHSERVE_PYTHON:-python3}
mkdir -p "$out"
bert_repo=$build_dir/bert_repo
torchscript=bert_base_${dtype}
pt2=bert_base_${dtype}_pt2
ragged=bert_base_${dtype}_ragged_pt2
# The same ragged weights as TorchScript: profiled beside the .pt2, whose profile crashed once
# (2026-12-07), since its GEMMs and FlashAttention are the same kernels; only the rest is fused differently.
ragged_torchscript=bert_base_${dtype}_ragged
models=("$ragged" "$pt2" "$torchscript")

max_batch_tokens() { sed -n 's/.*"max_batch_tokens" value: { string_value: "\([0-9]*\)".*/\1/p' "$bert_repo/$1/config.pbtxt"; }
max_batch() { sed -n 's/^max_batch_size: \([0-9]*\)/\1/p' "$bert_repo/$1/config.pbtxt"; }

if wants export; then
  # The padded and the ragged exports seed their weights alike (export_bert.py), so every model
  # here answers with the same weights.
  if [[ ! -f $bert_repo/$pt2/model.pt2 || ! -f $bert_repo/$torchscript/model.pt ]]; then
    start=$(date +%s)
    "$python" "$repo/deploy/models/export_bert.py" "$bert_repo" --dtype "$dtype" --device cuda --format both
    echo "export, padded (both formats): $(( $(date +%s) - start )) s"
  fi
  if [[ ! -f $bert_repo/$ragged/model.pt2 || ! -f $bert_repo/$ragged_torchscript/model.pt ||
        $(max_batch "$ragged") != "$ragged_max_batch" || $(max_batch_tokens "$ragged") != "$ragged_max_tokens" ]]; then
    start=$(date +%s)
    "$python" "$repo/deploy/models/export_bert.py" "$bert_repo" --dtype "$dtype" --device cuda --format both \
      --ragged --max-batch "$ragged_max_batch" --max-batch-tokens "$ragged_max_tokens"
    echo "export, ragged .pt2 and TorchScript: $(( $(date +%s) - start )) s"
  fi
fi

if wants buckets; then
  # Ragged buckets of the token counts the padded ones compute (a padded 32x512 computes 16,384
  # tokens) at the model's row sizes, first, as the figure the issue asks for; then the padded
  # buckets pt2_vs_torchscript.sh compares.
  "$build_dir/tools/graphserve-bucket-bench" --model-repository "$bert_repo" --model "$ragged" \
    --lengths 16 64 512 1024 4096 16384 --iterations 50 | tee "$out/buckets_$ragged.md"
  for model in "$pt2" "$torchscript"; do
    "$build_dir/tools/graphserve-bucket-bench" --model-repository "$bert_repo" --model "$model" \
      --batches 1 2 4 8 32 --lengths 16 32 64 128 512 --iterations 50 | tee "$out/buckets_$model.md"
  done
fi

if wants profile; then
  # The largest bucket of each: the ragged one full of rows, the padded one every row 512 long.
  tokens=$(max_batch_tokens "$ragged")
  # One model's failure leaves the other's profile (the ragged one crashed under the profiler on
  # 2026-12-07, and the padded one then never ran).
  for model in "$ragged" "$ragged_torchscript"; do
    "$python" "$repo/deploy/bench/profile_bucket.py" --model-dir "$bert_repo/$model" \
      --rows "$(max_batch "$model")" --tokens "${tokens:-16384}" | tee "$out/profile_$model.md" ||
      echo "profile_bucket.py failed on $model (exit $?)" | tee -a "$out/profile_$model.md"
  done
  "$python" "$repo/deploy/bench/profile_bucket.py" --model-dir "$bert_repo/$pt2" \
    --rows "$(max_batch "$pt2")" --length 512 | tee "$out/profile_$pt2.md" ||
    echo "profile_bucket.py failed on $pt2 (exit $?)" | tee -a "$out/profile_$pt2.md"
fi

if wants e2e; then
  "$python" "$repo/deploy/bench/e2e_benchmark.py" --build-dir "$build_dir" --out "$out/e2e" \
    --bert-repo "$bert_repo" --models "$(IFS=,; echo "${models[*]}")" --modes a \
    --concurrency "$concurrency" --outputs pooler_output
  if [[ -n $ragged_rows ]]; then
    "$python" "$repo/deploy/bench/e2e_benchmark.py" --build-dir "$build_dir" --out "$out/e2e_rows" \
      --bert-repo "$bert_repo" --models "$ragged" --modes g --grid "batch_sizes: [ $ragged_rows ]" \
      --concurrency "$concurrency" --outputs pooler_output
  fi
fi
