#!/usr/bin/env python3
"""Where one bucket's forward spends the GPU's time: the CUDA kernels of one full batch of a model
exported by deploy/models/export_bert.py, under torch.profiler, summed into GEMM, attention and the
rest. Issue #45 asks it of the largest bucket, to say which stage holds a target back.

  python3 deploy/bench/profile_bucket.py --model-dir REPO/bert_base_bf16_ragged_pt2 --rows 31 --tokens 16384
  python3 deploy/bench/profile_bucket.py --model-dir REPO/bert_base_bf16_pt2 --rows 32 --length 512

A ragged model gets `rows` rows of `tokens` in all end to end (input_ids [T], cu_seqlens [R + 1]);
a padded one `rows` rows of `length` (input_ids and attention_mask [rows, length], all ones).
Prints a markdown table; --json writes the figures. Needs a CUDA device.
"""
import argparse
import faulthandler
import json
import os
import re
import sys

import torch

# Kernel names by stage. cuBLAS / CUTLASS GEMMs (sm90 xmma, cutlass, gemm, gemv); FlashAttention and
# the SDPA kernels (flash, fmha, attention, softmax of the masked path).
STAGES = (
    ("GEMM", re.compile(r"gemm|gemv|xmma|cutlass|cublas|matmul", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa|softmax", re.I)),
)


def stage_of(kernel_name):
    for stage, pattern in STAGES:
        if pattern.search(kernel_name):
            return stage
    return "rest"


def load(model_dir):
    pt2 = os.path.join(model_dir, "model.pt2")
    if os.path.exists(pt2):
        return torch._inductor.aoti_load_package(pt2)
    return torch.jit.load(os.path.join(model_dir, "model.pt"), map_location="cuda")


def batch(args, ragged):
    generator = torch.Generator().manual_seed(0)
    if ragged:
        lengths = [args.tokens // args.rows + (1 if r < args.tokens % args.rows else 0) for r in range(args.rows)]
        offsets = torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0, dtype=torch.int32)
        ids = torch.randint(1000, 30000, (args.tokens,), generator=generator, dtype=torch.int64)
        return ids.cuda(), offsets.cuda()
    ids = torch.randint(1000, 30000, (args.rows, args.length), generator=generator, dtype=torch.int64)
    return ids.cuda(), torch.ones_like(ids).cuda()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--tokens", type=int, help="a ragged model's tokens in all")
    parser.add_argument("--length", type=int, help="a padded model's row length")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    with open(os.path.join(args.model_dir, "config.pbtxt")) as f:
        config = f.read()
    ragged = "allow_ragged_batch: true" in config
    if ragged != (args.tokens is not None) or ragged == (args.length is not None):
        parser.error("a ragged model takes --tokens, a padded one --length")
    longest = re.search(r"max_sequence_length:\s*(\d+)", config)
    if ragged and longest and -(-args.tokens // args.rows) > int(longest.group(1)):
        # The export attends rows of at most that length (docs/models.md): a longer one is no batch
        # the server would form, and its attention would be cut.
        parser.error(f"{args.tokens} tokens in {args.rows} rows make rows longer than the model's "
                     f"max_sequence_length {longest.group(1)}: give more rows")
    # The ragged .pt2 died of SIGSEGV here once (2026-12-07) with no word of where: say each step, and
    # let a crash print the Python stack.
    faulthandler.enable()
    print("profile_bucket: loading", args.model_dir, file=sys.stderr, flush=True)
    model = load(args.model_dir)
    inputs = batch(args, ragged)
    with torch.no_grad():
        print("profile_bucket: warming up", file=sys.stderr, flush=True)
        for _ in range(3):
            model(*inputs)
        torch.cuda.synchronize()
        print("profile_bucket: profiling", file=sys.stderr, flush=True)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
            for _ in range(args.iterations):
                model(*inputs)
            torch.cuda.synchronize()
    per_stage = {"GEMM": 0.0, "attention": 0.0, "rest": 0.0}
    kernels = {}
    for event in profile.key_averages():
        device_us = getattr(event, "device_time_total", None)
        if device_us is None:
            device_us = event.cuda_time_total
        if device_us <= 0:
            continue
        per_stage[stage_of(event.key)] += device_us / args.iterations
        kernels[event.key] = device_us / args.iterations
    total = sum(per_stage.values())
    tokens = args.tokens if ragged else args.rows * args.length
    shape = f"{args.rows} rows, {tokens} tokens" + ("" if ragged else f" ({args.length} each)")
    print(f"{os.path.basename(args.model_dir.rstrip('/'))}, {shape}: {total:.0f} µs of kernels per forward, "
          f"{tokens / total * 1e6:,.0f} tokens/s of kernel time")
    print("| stage | µs per forward | share |")
    print("|---|---:|---:|")
    for stage, us in per_stage.items():
        print(f"| {stage} | {us:.0f} | {100 * us / total:.1f}% |")
    print("\nlongest kernels:")
    # Enough of them to name where "rest" goes, not only the GEMMs.
    for name, us in sorted(kernels.items(), key=lambda item: -item[1])[:20]:
        print(f"  {us:8.0f} µs  [{stage_of(name)}] {name[:110]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model_dir": args.model_dir, "rows": args.rows, "tokens": tokens, "ragged": ragged,
                       "per_stage_us": per_stage, "kernels_us": kernels}, f, indent=1)


if __name__ == "__main__":
    main()
