#!/usr/bin/env python3
"""End-to-end comparison of graphserve's serving modes on one model and one traffic.

For each model and mode it writes a model repository, starts graphserve on free ports, drives it with
graphserve-loadgen (closed loop, the default skewed length mix) at each concurrency, reads /metrics
before and after each run, and stops the server with SIGTERM. Then it measures the ceiling: the same
buckets run back to back in one process (graphserve-bucket-bench --traffic-requests). Writes
OUT/e2e.md (tables and headline ratios), OUT/e2e.json (everything measured) and OUT/e2e.png (needs
matplotlib; skipped with a warning without it).

Modes (all plain model configs, see proto/model_config.proto):
  a  graph buckets + size-binned batcher (the default config)
  b  eager, same grid and batcher         cuda_graphs { disable: true }
  c  one max-size graph, all padded to it  buckets { batch_sizes: [MAX] sequence_lengths: [MAXLEN] }
  d  eager, no batching                    cuda_graphs { disable: true } dynamic_batching { disable: true }
  e  graph buckets + FIFO batcher          dynamic_batching { max_queue_delay_microseconds: 500 policy: FIFO }
  g  graph buckets + size-binned batcher on another grid (--grid, e.g. graphserve-cli plan-grid's proposal)

  python3 deploy/bench/e2e_benchmark.py --build-dir build-cuda --out OUT [--device cuda]
      [--models encoder,bert_base_bf16,bert_base_bf16_pt2] [--modes a,b,c,d,e] [--concurrency 1,8,64,512]

Only the standard library is needed (matplotlib for the plot). Python 3.9+.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import time

from bench_support.common import REPO, csv, fail, log
from bench_support.loadgen import run_loadgen
from bench_support.metrics import metric_delta
from bench_support.report import fmt, num, pct, table
from bench_support.repository import base_model, config_limits, with_instances, write_repository
from bench_support.server import Server, resolve_paths

MODE_NAMES = {
    "a": "graphs + batcher",
    "b": "eager + batcher",
    "c": "one max-size graph",
    "d": "eager, no batching",
    "e": "graphs + FIFO batcher",
    "g": "graphs + batcher on the --grid given",
}

# Default seed of the ceiling's lengths (any fixed value: the mix, not the draw, is what matters).
CEILING_SEED = 1


# ---- model configs ------------------------------------------------------------------------------

def mode_config(base, mode, grid=""):
    """The base config plus the mode's blocks. The base must not set them itself: text format
    refuses a block given twice, and the comparison needs the defaults elsewhere."""
    for block in ("buckets", "dynamic_batching", "cuda_graphs"):
        if re.search(r"^\s*" + block + r"\b", base, re.M):
            fail(f"the model's config already sets '{block}'; the modes need it unset")
    max_batch, max_length = config_limits(base)
    extra = {
        "a": "",
        "b": "cuda_graphs { disable: true }\n",
        "c": f"buckets {{ batch_sizes: [ {max_batch} ] sequence_lengths: [ {max_length} ] }}\n",
        "d": "cuda_graphs { disable: true }\ndynamic_batching { disable: true }\n",
        # The same grid and delay as (a), batched in arrival order and padded to the longest: what
        # the size-binned planner is measured against.
        "e": "dynamic_batching { max_queue_delay_microseconds: 500 policy: FIFO }\n",
        "g": f"buckets {{ {grid} }}\n",
    }[mode]
    return base + extra


def mode_repository(args, model, mode, base, weights):
    """OUT/repositories/MODEL_MODE: `model` with the mode's config."""
    config = with_instances(args, mode_config(base, mode, getattr(args, "grid", "")))
    return write_repository(args, model, mode, config, weights)


# ---- load ---------------------------------------------------------------------------------------

def run_ceiling(args, model, repository):
    path = os.path.join(args.out, "raw", f"ceiling_{model}.json")
    command = [args.bucket_bench, "--model-repository", repository, "--model", model,
               "--device", args.device, "--traffic-requests", str(args.ceiling_requests),
               "--seed", str(CEILING_SEED), "--traffic-lengths", args.lengths,
               "--time-buckets", "1x64", "--time-lone-request", "64", "--json", path]
    if args.outputs:
        command += ["--traffic-outputs", args.outputs]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.start_timeout_s)
    except subprocess.TimeoutExpired:
        fail(f"graphserve-bucket-bench still running after {args.start_timeout_s:.0f} s")
    if done.returncode != 0:
        fail(f"graphserve-bucket-bench failed (status {done.returncode}):\n"
             + done.stdout[-3000:] + done.stderr[-3000:])
    with open(path) as f:
        return json.load(f)


def bench_model(args, model):
    base, weights = base_model(args, model)
    result = {"modes": {}, "ceiling": None, "overhead": None}
    repositories = {mode: mode_repository(args, model, mode, base, weights) for mode in args.modes}

    # The ceiling first, on the default grid of mode a: its bucket replay times also price the
    # servers' replays (replay_busy_share). It runs alone, so the GPU is not shared.
    ceiling = run_ceiling(args, model, repositories.get("a") or mode_repository(args, model, "a", base, weights))
    result["ceiling"] = ceiling
    # None on a CPU (no graphs): no replay time to price, rather than a device idle 100 % of the time.
    replay_us = {b["bucket"]: b["time_us"] for b in ceiling.get("buckets", []) if b.get("graph")} or None
    log(f"{model} ceiling: {ceiling['tokens_per_s']:,.0f} tok/s, {ceiling['requests_per_s']:,.0f} req/s "
        f"(Launch/Complete back to back, {ceiling['batches']} batches, padding {ceiling['padding_ratio']:.3f})"
        + (f"; bare replays {ceiling['replay_tokens_per_s']:,.0f} tok/s" if ceiling.get("replay_tokens_per_s") else ""))

    for mode in args.modes:
        log_path = os.path.join(args.out, "logs", f"server_{model}_{mode}.log")
        started = time.time()
        server = Server(args, repositories[mode], model, log_path)
        server.wait_ready(args.start_timeout_s)
        log(f"{model} mode {mode} ({MODE_NAMES[mode]}): ready in {time.time() - started:.1f} s")
        runs = []
        try:
            for concurrency in args.concurrency:
                before = server.scrape(stats=True)
                report = run_loadgen(args, server, concurrency,
                                     os.path.join(args.out, "raw", f"loadgen_{model}_{mode}_c{concurrency}.json"))
                # Mode c's one bucket is also on mode a's grid, so the same replay times price it.
                delta = metric_delta(before, server.scrape(stats=True), replay_us)
                runs.append({"concurrency": concurrency, "loadgen": report, "metrics": delta})
                lat = report["latency_ms"]
                log(f"  {model} {mode} c={concurrency:<4} {report['requests_per_s']:>9,.0f} req/s "
                    f"{report['tokens_per_s']:>11,.0f} tok/s  p50 {fmt(lat['p50'])} p99 {fmt(lat['p99'])} ms  "
                    f"pad {fmt(delta['padding_ratio'], 2)}  replays {pct(delta['replay_share'])}  "
                    f"errors {report['error_count']}")
            if args.open_loop_fractions:
                # Mode e runs first (checked at the start): its saturation sets every mode's rates.
                fifo = saturation(result["modes"].get("e") or runs)
                capacity = fifo["loadgen"]["requests_per_s"]
                result["open_loop_capacity"] = capacity
                result.setdefault("open_loop", {})[mode] = [
                    open_loop_run(args, server, model, mode, fraction, capacity, replay_us)
                    for fraction in args.open_loop_fractions]
            if mode == "a":
                result["overhead"] = measure_overhead(args, server, model, ceiling)
        finally:
            server.stop()
        result["modes"][mode] = runs
    return result


def open_loop_run(args, server, model, mode, fraction, capacity, replay_us):
    """Poisson arrivals at `fraction` of `capacity` req/s; latency counts from each arrival's due time."""
    before = server.scrape(stats=True)
    path = os.path.join(args.out, "raw", f"loadgen_{model}_{mode}_open{fraction:g}.json")
    report = run_loadgen(args, server, None, path, rate=fraction * capacity)
    delta = metric_delta(before, server.scrape(stats=True), replay_us)
    lat = report["latency_ms"]
    log(f"  {model} {mode} Poisson {100 * fraction:.0f}% ({fraction * capacity:,.0f}/s) "
        f"{report['tokens_per_s']:>11,.0f} tok/s  p50 {fmt(lat['p50'])} p99 {fmt(lat['p99'])} ms  "
        f"pad {fmt(delta['padding_ratio'], 2)}  errors {report['error_count']}")
    return {"fraction": fraction, "rate": fraction * capacity, "loadgen": report, "metrics": delta}


def measure_overhead(args, server, model, ceiling):
    """At concurrency 1, one-row requests of 64 tokens (in their bucket: 1x64 when padded) from one
    connection and one polling thread, as one caller sends them: what the server adds to the bucket's
    bare replay. The addition splits exactly into scheduling (mean queue time), the rest of the batch's execution (mean
    compute − replay: padding, copies in and out, the stream synchronisation) and the front end (p50 −
    mean queue − mean compute: gRPC, decoding, encoding, callbacks). At concurrency 1 the spread is
    small, so mixing the p50 with means is fair."""
    before = server.scrape(stats=True)
    report = run_loadgen(args, server, 1, os.path.join(args.out, "raw", f"loadgen_{model}_overhead.json"),
                         lengths="fixed:64", lone_client=True)
    delta = metric_delta(before, server.scrape(stats=True), None)
    # The bucket a lone 64-token row really runs in: 1x64 on a padded grid; on a ragged one, the
    # grid's row size by the smallest token size that holds it.
    timed = ceiling.get("lone_request") or ceiling.get("timed_buckets", {}).get("1x64", {})
    p50 = report["latency_ms"]["p50"]
    replay_ms = timed["replay_us"] / 1000 if timed.get("replay_us") is not None else None
    queue_ms, compute_ms = delta["queue_ms"], delta["compute_ms"]
    measured = None not in (p50, queue_ms, compute_ms)
    known = measured and replay_ms is not None  # a CPU has no replay to subtract
    # The server's own replays, between CUDA events around them: above the bare replay when
    # something beside them slows every replay on the device (a second instance does, by about
    # 70 us a replay on the H200: BENCHMARKS.md, "Two instances on one GPU").
    infer_s, batches = delta.get("infer_measured_s"), delta.get("batches")
    server_replay_ms = infer_s / batches * 1000 if infer_s is not None and batches else None
    out = {
        "loadgen": report,
        "metrics": delta,
        "p50_ms": p50,
        "replay_ms": replay_ms,
        "bench_execute_ms": timed["execute_us"] / 1000 if timed.get("execute_us") is not None else None,
        "bucket": timed.get("bucket", "1x64"),
        "overhead_ms": p50 - replay_ms if known else None,
        "queue_ms": queue_ms,
        "execution_beyond_replay_ms": compute_ms - replay_ms if known else None,
        "server_replay_ms": server_replay_ms,
        "front_end_ms": p50 - queue_ms - compute_ms if measured else None,
    }
    log(f"  {model} overhead at c=1, {out['bucket']}: p50 {fmt(p50, 3)} ms, replay {fmt(replay_ms, 3)} ms, added "
        f"{fmt(out['overhead_ms'], 3)} ms = queue {fmt(queue_ms, 3)} + execution beyond replay "
        f"{fmt(out['execution_beyond_replay_ms'], 3)} (the server's replays {fmt(server_replay_ms, 3)}) + "
        f"front end {fmt(out['front_end_ms'], 3)}")
    return out


# ---- the report ---------------------------------------------------------------------------------

MEASURED_COLUMNS = ["req/s", "real tok/s", "p50 (ms)", "p99 (ms)", "padding"]


def measured_cells(run):
    """MEASURED_COLUMNS of one loadgen run and the metrics around it."""
    r, m = run["loadgen"], run["metrics"]
    return [num(r["requests_per_s"]), num(r["tokens_per_s"]), fmt(r["latency_ms"]["p50"]),
            fmt(r["latency_ms"]["p99"]), fmt(m["padding_ratio"])]


def saturation(runs):
    return max(runs, key=lambda r: r["concurrency"]) if runs else None


def ratio(a, b):
    return a / b if a is not None and b else None


def stage_sentence(run):
    """Where a mode-a request's time goes at that load, from the client's mean latency and the
    server's means."""
    m, lat = run["metrics"], run["loadgen"]["latency_ms"]
    if None in (lat.get("mean"), m["queue_ms"], m["compute_ms"]):
        return "not enough data to split the latency"
    front = lat["mean"] - m["queue_ms"] - m["compute_ms"]
    parts = (f"mean latency {lat['mean']:.2f} ms = queue {m['queue_ms']:.2f} (scheduling: waiting for "
             f"a batch and an executor) + compute {m['compute_ms']:.2f} (padding, copies, replay) + "
             f"front end {front:.2f} (gRPC, decoding, encoding)")
    if m.get("replay_busy_share") is not None:
        parts += (f"; the device replayed graphs {100 * m['replay_busy_share']:.0f}% of the wall time "
                  f"(near 100%: replay-bound; well below: the server's CPU stages limit)")
        if m.get("infer_measured_share") is not None:
            parts += (f", by the replays' capture-time durations; by their own durations (CUDA events) "
                      f"{100 * m['infer_measured_share']:.0f}%")
    elif m.get("infer_measured_share") is not None:
        parts += (f"; the executors computed {100 * m['infer_measured_share']:.0f}% of the wall time "
                  f"(each batch's own compute time, summed over instances)")
    return parts


def markdown(args, results):
    lines = ["# graphserve end to end: serving modes on one traffic", ""]
    mix = ("log-normal (median 48, σ 0.8, clipped to [8, 512])" if args.lengths == "skewed"
           else f"`{args.lengths}`")
    lines += [f"Device `{args.device}`; closed-loop `graphserve-loadgen`, one row per request, lengths "
              f"{mix}; {args.duration_s} s measured after "
              f"{args.warmup_s} s warm-up per run; loadgen threads {args.loadgen_threads}, connections "
              f"{args.connections}; outputs asked for: "
              f"{', '.join(csv(args.outputs)) if args.outputs else 'all'}.", ""]
    if args.max_batch_size is not None or args.max_sequence_length is not None:
        lines += [f"The models' limits are overridden: max_batch_size {args.max_batch_size or 'as configured'}, "
                  f"max_sequence_length {args.max_sequence_length or 'as configured'}.", ""]
    if args.server_binary:
        lines += [f"Server binary: `{args.graphserve}` (client and ceiling tool from `{args.build_dir}`).", ""]
    if args.grid:
        lines += [f"Mode g's grid: `buckets {{ {args.grid} }}`.", ""]
    if args.server_args or args.loadgen_args:
        lines += [f"Server flags added: `{' '.join(args.server_args) or 'none'}`; loadgen flags added: "
                  f"`{' '.join(args.loadgen_args) or 'none'}`.", ""]
    lines += ["Modes: " + "; ".join(f"**{m}** {MODE_NAMES[m]}" for m in args.modes) + ".", ""]
    for model, result in results.items():
        lines += [f"## {model}", ""]
        lines += table(["mode", "concurrency", *MEASURED_COLUMNS, "graph replays", "rows/batch", "queue (ms)",
                        "compute (ms)", "errors"],
                       [[f"{mode} {MODE_NAMES[mode]}", run["concurrency"], *measured_cells(run),
                         pct(run["metrics"]["replay_share"]), fmt(run["metrics"]["rows_per_batch"], 1),
                         fmt(run["metrics"]["queue_ms"]), fmt(run["metrics"]["compute_ms"]),
                         run["loadgen"]["error_count"]]
                        for mode, runs in result["modes"].items() for run in runs])
        if result.get("open_loop"):
            lines += [f"Open loop (Poisson arrivals, latency from each arrival's due time) at fractions of FIFO's "
                      f"(mode e) throughput at concurrency {max(args.concurrency)}, "
                      f"{num(result['open_loop_capacity'])} req/s:", ""]
            lines += table(["mode", "load", "offered req/s", *MEASURED_COLUMNS, "errors"],
                           [[f"{mode} {MODE_NAMES[mode]}", f"{100 * run['fraction']:.0f}%", num(run["rate"]),
                             *measured_cells(run), run["loadgen"]["error_count"]]
                            for mode, runs in result["open_loop"].items() for run in runs])
        ceiling = result["ceiling"]
        lines += [f"Ceiling (`graphserve-bucket-bench --traffic-requests {ceiling['requests']}`, mode a's grid, "
                  f"full batches, Launch/Complete back to back in one process): "
                  f"{num(ceiling['tokens_per_s'])} real tok/s, "
                  f"{num(ceiling['requests_per_s'])} req/s, padding {ceiling['padding_ratio']:.3f}"
                  + (f"; bare replays alone {num(ceiling['replay_tokens_per_s'])} tok/s"
                     if ceiling.get("replay_tokens_per_s") else "") + ".", ""]
        modes = result["modes"]
        a = saturation(modes.get("a", []))
        if a:
            a_tok = a["loadgen"]["tokens_per_s"]
            lines += [f"Headline, at saturation (concurrency {a['concurrency']}):", ""]
            for other in ("b", "c", "d", "e"):
                o = saturation(modes.get(other, []))
                if o:
                    lines.append(f"- (a) ÷ ({other}) {MODE_NAMES[other]}: "
                                 f"{fmt(ratio(a_tok, o['loadgen']['tokens_per_s']))}× real tokens/s")
            lines.append(f"- (a) ÷ ceiling: {pct(ratio(a_tok, ceiling['tokens_per_s']))} "
                         f"({num(a_tok)} of {num(ceiling['tokens_per_s'])} tok/s)")
            lines.append(f"- where (a)'s time goes: {stage_sentence(a)}")
            if args.instance_devices:
                replays = a["metrics"]["graph_replays_by_device"]
                spread = ", ".join(f"{device} {count:.0f} ({replays.get(device, 0):.0f} replayed)"
                                   for device, count in sorted(a["metrics"]["batches_by_device"].items()))
                lines.append(f"- (a)'s batches by device: {spread}")
        over = result.get("overhead")
        if over:
            lines.append(f"- concurrency 1, 64-token requests: p50 {fmt(over['p50_ms'], 3)} ms against "
                         f"the {over.get('bucket', '1x64')} bucket's bare replay {fmt(over['replay_ms'], 3)} ms: "
                         f"the server adds "
                         f"{fmt(over['overhead_ms'], 3)} ms = scheduling {fmt(over['queue_ms'], 3)} (mean queue) + "
                         f"execution beyond the replay {fmt(over['execution_beyond_replay_ms'], 3)} (mean compute "
                         f"− replay: padding, copies, synchronisation; the server's own replays (on a CPU, "
                         f"forwards) took {fmt(over.get('server_replay_ms'), 3)} each, timed in the server; "
                         f"one Execute in-process takes "
                         f"{fmt(over['bench_execute_ms'], 3)}) + front end {fmt(over['front_end_ms'], 3)} "
                         f"(p50 − mean queue − mean compute: gRPC, decoding, encoding)")
        lines.append("")
    return "\n".join(lines)


def plot(args, results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("warning: matplotlib is not installed; no plot written")
        return False
    fig, axes = plt.subplots(len(results), 2, figsize=(12, 4.2 * len(results)), squeeze=False)
    for row, (model, result) in enumerate(results.items()):
        throughput, latency = axes[row]
        for mode, runs in result["modes"].items():
            xs = [r["concurrency"] for r in runs]
            label = f"({mode}) {MODE_NAMES[mode]}"
            throughput.plot(xs, [r["loadgen"]["tokens_per_s"] for r in runs], marker="o", label=label)
            latency.plot(xs, [r["loadgen"]["latency_ms"]["p99"] or math.nan for r in runs], marker="o",
                         label=label)
        throughput.axhline(result["ceiling"]["tokens_per_s"], color="grey", linestyle="--",
                           label="ceiling (in-process Execute, no server)")
        throughput.set(xscale="log", xlabel="concurrency", ylabel="real tokens/s", title=f"{model}: throughput")
        latency.set(xscale="log", yscale="log", xlabel="concurrency", ylabel="p99 latency (ms)",
                    title=f"{model}: p99 latency")
        for axis in (throughput, latency):
            # The measured concurrencies as plain ticks, not powers of ten.
            axis.set_xticks(args.concurrency)
            axis.set_xticklabels([str(c) for c in args.concurrency])
            axis.xaxis.set_minor_locator(plt.NullLocator())
            axis.grid(True, which="both", alpha=0.3)
            axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--models", default="encoder,bert_base_bf16")
    parser.add_argument("--bert-repo", help="where export_bert.py wrote (or is to write) the BERT "
                        "model folders (default OUT/bert_repository)")
    parser.add_argument("--modes", default="a,b,c,d,e")
    parser.add_argument("--concurrency", default="1,8,64,512",
                        help="closed-loop callers per run; the largest is read as saturation")
    parser.add_argument("--duration-s", type=float, default=4)
    parser.add_argument("--warmup-s", type=float, default=1)
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    parser.add_argument("--instance-devices", default="",
                        help="one model instance on each of these devices, e.g. cuda:0,cuda:1 "
                        "(default: the model's own instance_group on --device)")
    parser.add_argument("--outputs", default="",
                        help="outputs each request asks for, comma-separated (default: all; e.g. "
                        "pooler_output for an embedding service); the ceiling copies the same")
    parser.add_argument("--lengths", default="skewed",
                        help="length mix, as graphserve-loadgen's --lengths (default: its skewed mix)")
    parser.add_argument("--max-batch-size", type=int,
                        help="replaces the models' max_batch_size (a smaller grid for quick runs)")
    parser.add_argument("--max-sequence-length", type=int,
                        help="replaces the models' max_sequence_length (the lengths must fit it)")
    cpus = os.cpu_count() or 2
    parser.add_argument("--loadgen-threads", type=int, default=max(1, min(4, cpus // 4)),
                        help="completion-queue threads of graphserve-loadgen (default: a quarter of the "
                        "cores, at most 4, leaving the rest to the server)")
    parser.add_argument("--connections", type=int, default=max(1, min(8, cpus // 4)))
    parser.add_argument("--ceiling-requests", type=int,
                        help="requests of the in-process ceiling (default 20000 on CUDA, 200 on a CPU)")
    parser.add_argument("--start-timeout-s", type=float, default=240,
                        help="longest wait for a server to be ready, or for the ceiling run")
    parser.add_argument("--server-binary",
                        help="another build's graphserve (e.g. an older commit's, for a before/after in one "
                        "run); the client and the ceiling tool stay --build-dir's")
    parser.add_argument("--open-loop-fractions", default="",
                        help="after the closed loops, Poisson arrivals at these fractions of FIFO's throughput at "
                        "the highest concurrency (e.g. 0.25,0.5,0.75,0.95); needs mode e first in --modes")
    parser.add_argument("--grid", default="",
                        help="mode g's buckets block, e.g. 'batch_sizes: [1, 8, 64] sequence_lengths: [32, 128] "
                        "max_batch_tokens: 16384' (graphserve-cli plan-grid prints one)")
    parser.add_argument("--server-arg", dest="server_args", action="append", default=[],
                        help="a flag for every server started, e.g. --server-arg=--busy-poll-us=200 (repeatable)")
    parser.add_argument("--loadgen-arg", dest="loadgen_args", action="append", default=[],
                        help="a flag for every graphserve-loadgen run, e.g. --loadgen-arg=--busy-poll (repeatable)")
    args = parser.parse_args()

    args.models = csv(args.models)
    args.modes = csv(args.modes)
    for mode in args.modes:
        if mode not in MODE_NAMES:
            fail(f"unknown mode '{mode}' ({', '.join(MODE_NAMES)})")
    if ("g" in args.modes) != bool(args.grid):
        fail("mode g and --grid go together")
    args.concurrency = sorted({int(c) for c in csv(args.concurrency)})
    args.open_loop_fractions = [float(f) for f in csv(args.open_loop_fractions)]
    if args.open_loop_fractions and args.modes[0] != "e":
        fail("--open-loop-fractions: mode e must come first in --modes (its throughput sets the rates)")
    if args.ceiling_requests is None:
        args.ceiling_requests = 200 if args.device == "cpu" else 20000
    build = resolve_paths(args)
    args.bucket_bench = os.path.join(build, "tools", "graphserve-bucket-bench")
    for binary in (args.graphserve, args.loadgen, args.bucket_bench):
        if not os.access(binary, os.X_OK):
            fail(f"{binary} is missing; build first (--build-dir)")
    shutil.rmtree(os.path.join(args.out, "repositories"), ignore_errors=True)
    for sub in ("raw", "logs", "repositories"):
        os.makedirs(os.path.join(args.out, sub), exist_ok=True)

    started = time.time()
    results = {}
    for model in args.models:
        results[model] = bench_model(args, model)
        # Written after every model, so that a later model's failure keeps the earlier figures.
        with open(os.path.join(args.out, "e2e.json"), "w") as f:
            json.dump({"settings": vars(args), "results": results}, f, indent=1)
        report = markdown(args, results)
        with open(os.path.join(args.out, "e2e.md"), "w") as f:
            f.write(report)
    plotted = plot(args, results, os.path.join(args.out, "e2e.png"))
    # The headlines again at the end of stdout, where a caller that keeps only the tail sees them.
    log("\n".join(line for line in report.splitlines() if line.startswith(("## ", "- "))))
    log(f"wrote {args.out}/e2e.md, e2e.json" + (", e2e.png" if plotted else "")
        + f" in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
