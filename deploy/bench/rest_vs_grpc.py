#!/usr/bin/env python3
"""The REST endpoint's throughput beside gRPC's: one graphserve (the default config: graph buckets
and the size-binned batcher), the same graphserve-loadgen traffic (closed loop, one row per request,
the skewed length mix, the same seed) sent over each binding in turn at each concurrency, both
bindings measured in one run. Writes OUT/rest_vs_grpc.md and OUT/rest_vs_grpc.json.

  python3 deploy/bench/rest_vs_grpc.py --build-dir build-cuda --out OUT [--model bert_base_bf16]
      [--concurrency 1,8,64,256] [--outputs pooler_output]

Built on deploy/bench/bench_support (model export, repository, server, loadgen, /metrics).
"""
import argparse
import json
import os
import time

from bench_support.common import csv, log
from bench_support.loadgen import run_loadgen
from bench_support.metrics import metric_delta
from bench_support.report import fmt
from bench_support.server import add_load_arguments, add_server_arguments, one_model_server

PROTOCOLS = ("grpc", "http")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_arguments(parser)
    parser.add_argument("--concurrency", default="1,8,64,256")
    parser.add_argument("--duration-s", type=float, default=4)
    parser.add_argument("--warmup-s", type=float, default=1)
    parser.add_argument("--outputs", default="pooler_output",
                        help="outputs asked for (default: the pooled vector, an embedding service's answer)")
    parser.add_argument("--lengths", default="skewed")
    add_load_arguments(parser)
    args = parser.parse_args()
    args.concurrency = sorted({int(c) for c in csv(args.concurrency)})
    server = one_model_server(args)
    runs = []
    try:
        server.wait_ready(args.start_timeout_s)
        for concurrency in args.concurrency:
            for protocol in PROTOCOLS:
                before = server.scrape()
                report = run_loadgen(args, server, concurrency,
                                         os.path.join(args.out, "raw", f"{protocol}_c{concurrency}.json"),
                                         protocol=protocol)
                delta = metric_delta(before, server.scrape(), None)
                runs.append({"protocol": protocol, "concurrency": concurrency, "loadgen": report, "metrics": delta})
                lat = report["latency_ms"]
                log(f"{protocol:<4} c={concurrency:<4} {report['requests_per_s']:>9,.0f} req/s "
                        f"{report['tokens_per_s']:>11,.0f} tok/s  "
                        f"p50 {fmt(lat['p50'])} p99 {fmt(lat['p99'])} ms  "
                        f"rows/batch {fmt(delta['rows_per_batch'], 1)}  errors {report['error_count']}")
    finally:
        server.stop()

    with open(os.path.join(args.out, "rest_vs_grpc.json"), "w") as f:
        json.dump({"settings": vars(args), "runs": runs}, f, indent=1)
    lines = [f"# REST against gRPC: {args.model} on `{args.device}`, {time.strftime('%Y-%m-%d')}", "",
             f"One server, default config; `graphserve-loadgen` closed loop, lengths `{args.lengths}`, one row "
             f"per request, outputs `{args.outputs or 'all'}`, {args.duration_s} s per run after {args.warmup_s} s "
             f"warm-up, loadgen threads {args.loadgen_threads} (gRPC connections {args.connections}; REST: one "
             "keep-alive connection per caller).", "",
             "| concurrency | binding | requests/s | real tokens/s | p50 ms | p99 ms | rows/batch | errors |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for run in runs:
        r, m = run["loadgen"], run["metrics"]
        lines.append(f"| {run['concurrency']} | {run['protocol']} | {r['requests_per_s']:,.0f} | "
                     f"{r['tokens_per_s']:,.0f} | "
                     f"{fmt(r['latency_ms']['p50'])} | {fmt(r['latency_ms']['p99'])} | "
                     f"{fmt(m['rows_per_batch'], 1)} | {r['error_count']} |")
    lines.append("")
    for concurrency in args.concurrency:
        by = {run["protocol"]: run["loadgen"] for run in runs if run["concurrency"] == concurrency}
        if by["grpc"]["requests_per_s"] > 0:
            ratio = by["http"]["requests_per_s"] / by["grpc"]["requests_per_s"]
            lines.append(f"- c = {concurrency}: REST at {ratio:.2f}× gRPC's requests/s")
    with open(os.path.join(args.out, "rest_vs_grpc.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    log("\n".join(lines))


if __name__ == "__main__":
    main()
