#!/usr/bin/env python3
"""What FlashAttention's variable-length kernel costs one layer of a ragged BERT-base bucket, by the
longest-row bound it is given (max_seqlen_q and max_seqlen_k). The bound sizes the kernel's grid:
rows x heads x ceil(bound / block) query blocks, of which only the real rows' own are not empty.
deploy/models/ragged_bert.py bounds it by the bucket's tokens T (the filler row may be that long),
where the longest real row (max_sequence_length) would do if no row were longer.

  python3 deploy/bench/varlen_bound.py [--tokens 16384 4096 1024] [--max-length 512] [--rows 33 289]

Per bucket of T tokens and R rows (today's 32 + 1 spare; 256 + 33 spares for a tail cut into rows of
max_length), two packings: rows of max_length tokens each, and the skewed mix
(log-normal lengths, median 48, sigma 0.8, clipped to [8, max_length]) packed end to end, the
tail split into rows of at most max_length; both end with empty rows up to --rows. Prints the
kernel's time per call (CUDA events) at bound T and at bound max_length, and the largest
difference of their outputs (0: the tighter bound is exact when no row is longer). Needs CUDA.
"""
import argparse
import math

import torch

HEADS = 12
HEAD_SIZE = 64


def skewed_lengths(tokens, max_length, generator):
    lengths = []
    while sum(lengths) < tokens:
        drawn = torch.empty(1).log_normal_(mean=math.log(48.0), std=0.8,
                                           generator=generator).item()
        lengths.append(int(min(max(drawn, 8), max_length)))
    lengths[-1] -= sum(lengths) - tokens
    return [length for length in lengths if length > 0]


def offsets_of(lengths, rows):
    if len(lengths) > rows:
        return None
    padded = lengths + [0] * (rows - len(lengths))
    return torch.tensor([0] + padded, dtype=torch.int32).cumsum(0, dtype=torch.int32).cuda()


def attend(q, k, v, offsets, bound):
    return torch.ops.aten._flash_attention_forward(q, k, v, offsets, offsets, bound, bound, 0.0, False, False)[0]


def time_us(q, k, v, offsets, bound, iterations):
    for _ in range(3):
        attend(q, k, v, offsets, bound)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        attend(q, k, v, offsets, bound)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / iterations


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[16384, 4096, 1024])
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--rows", type=int, nargs="+", default=[33, 289],
                        help="rows of the bucket, empty ones included")
    parser.add_argument("--iterations", type=int, default=50)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    print(f"FlashAttention varlen, {HEADS} heads of {HEAD_SIZE}, bf16; µs per call (one layer)\n")
    print("| tokens | rows | packing | real rows | bound T (µs) | bound max_length (µs) | T ÷ max_length | "
          "max difference |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for tokens, rows in ((tokens, rows) for tokens in args.tokens for rows in args.rows):
        full = [args.max_length] * (tokens // args.max_length)
        full += [tokens - sum(full)] if sum(full) < tokens else []
        for packing, lengths in (("rows of max_length", full),
                                 ("skewed mix", skewed_lengths(tokens, args.max_length, generator))):
            offsets = offsets_of(lengths, rows)
            if offsets is None:
                print(f"| {tokens} | {rows} | {packing} | {len(lengths)} | more rows than the bucket's | | | |")
                continue
            q, k, v = (torch.randn(tokens, HEADS, HEAD_SIZE, dtype=torch.bfloat16, device="cuda") for _ in range(3))
            loose = time_us(q, k, v, offsets, tokens, args.iterations)
            tight = time_us(q, k, v, offsets, args.max_length, args.iterations)
            difference = (attend(q, k, v, offsets, tokens) - attend(q, k, v, offsets, args.max_length)).abs().max()
            print(f"| {tokens} | {rows} | {packing} | {len(lengths)} | {loose:.0f} | {tight:.0f} | "
                  f"{loose / tight:.2f} | {difference.item():.3g} |")


if __name__ == "__main__":
    main()
