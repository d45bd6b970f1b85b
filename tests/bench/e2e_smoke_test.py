#!/usr/bin/env python3
"""A short CPU run of deploy/bench/e2e_benchmark.py against the real binaries: the built-in encoder
in all four modes at concurrency 1 and 4, its limits cut to 8 x 128 (and the length mix to
[8, 128]) so that mode (c)'s max-size batches cost a CPU little. Checks that the report files hold
every run, that no request failed, and that each mode did what its config says, as read back from
/metrics: (c) pads every batch to 8x128, (d) runs every request alone and unpadded. A second run
takes FIFO (e) and a given grid (g) through an open loop at half FIFO's throughput, with flags for
the server and the loadgen.

  e2e_smoke_test.py SOURCE_DIR BUILD_DIR OUT_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import time


def main():
    source, build, out = sys.argv[1:4]
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, os.path.join(source, "deploy", "bench", "e2e_benchmark.py"),
               "--build-dir", build, "--out", out, "--device", "cpu", "--models", "encoder",
               "--modes", "a,b,c,d", "--concurrency", "1,4", "--duration-s", "1", "--warmup-s", "0.3",
               "--ceiling-requests", "48", "--max-batch-size", "8", "--max-sequence-length", "128",
               "--lengths", "lognormal:48,0.8,8-128"]
    started = time.time()
    done = subprocess.run(command, capture_output=True, text=True)
    print(done.stdout[-6000:], done.stderr[-6000:], sep="\n")
    print(f"benchmark took {time.time() - started:.0f} s")
    failures = []

    def check(condition, what):
        if not condition:
            failures.append(what)

    check(done.returncode == 0, f"exit status {done.returncode}")
    report_path = os.path.join(out, "e2e.json")
    md_path = os.path.join(out, "e2e.md")
    if done.returncode != 0 or not os.path.exists(report_path) or not os.path.exists(md_path):
        sys.exit("FAILED: " + "; ".join(failures + ["no e2e.json / e2e.md"]))

    with open(report_path) as f:
        result = json.load(f)["results"]["encoder"]
    with open(md_path) as f:
        md = f.read()
    for mode, name in (("a", "graphs + batcher"), ("b", "eager + batcher"),
                       ("c", "one max-size graph"), ("d", "eager, no batching")):
        runs = result["modes"].get(mode, [])
        check([r["concurrency"] for r in runs] == [1, 4],
              f"mode {mode}: runs {runs and [r['concurrency'] for r in runs]}")
        for run in runs:
            where = f"mode {mode} c={run['concurrency']}"
            report, metrics = run["loadgen"], run["metrics"]
            check(report["ok"] > 0 and report["error_count"] == 0,
                  f"{where}: ok {report['ok']}, errors {report['error_count']}")
            check(f"| {mode} {name} | {run['concurrency']} |" in md, f"{where}: no row in e2e.md")
            # A CPU replays nothing; every batch is eager for that reason.
            check(metrics["graph_replays"] == 0 and set(metrics["eager_by_reason"]) == {"no_cuda"},
                  f"{where}: replays {metrics['graph_replays']}, eager {metrics['eager_by_reason']}")
            # The batches' own compute time, from the model's statistics: some, and (one executor)
            # about the window at most. A batch that started before the first scrape counts whole,
            # and on a loaded 2-core machine an eager batch is a good part of this 1 s window, so the
            # bound leaves room for one; counting each batch twice would still exceed it.
            share = metrics["infer_measured_share"]
            check(metrics["infer_measured_s"] and 0 < share <= 1.3, f"{where}: measured compute share {share}")
            batches, padded = metrics["batches"], metrics["padded_elements"]
            if mode == "c":
                check(padded == batches * 8 * 128, f"{where}: {padded} padded elements in {batches} batches")
            if mode == "d":
                check(metrics["padding_ratio"] == 1.0, f"{where}: padding {metrics['padding_ratio']}")
                check(metrics["rows_per_batch"] == 1.0, f"{where}: rows per batch {metrics['rows_per_batch']}")
                check(metrics["queue_ms"] is not None, f"{where}: no queue time")
            if mode in ("a", "b"):
                check(metrics["padding_ratio"] >= 1.0, f"{where}: padding {metrics['padding_ratio']}")

    ceiling = result["ceiling"]
    check(ceiling["requests"] == 48 and ceiling["tokens_per_s"] > 0, f"ceiling {ceiling}")
    check("Ceiling (" in md and "(a) ÷ ceiling" in md, "no ceiling in e2e.md")
    for other in ("b", "c", "d"):
        check(f"(a) ÷ ({other})" in md, f"no (a) ÷ ({other}) headline")
    over = result["overhead"]
    check(over is not None and over["loadgen"]["ok"] > 0 and over["p50_ms"] > 0, f"overhead {over}")
    # On a CPU the 1x64 bucket is no graph, so there is no replay time to subtract.
    check(over is not None and over["replay_ms"] is None and over["overhead_ms"] is None,
          f"overhead on a CPU: {over}")
    png = os.path.join(out, "e2e.png")
    try:
        import matplotlib  # noqa: F401
        check(os.path.getsize(png) > 0, "matplotlib present but no e2e.png")
    except ImportError:
        check(not os.path.exists(png) and "matplotlib is not installed" in done.stdout,
              "without matplotlib: no warning, or a stale e2e.png")
    check_open_loop_and_grid(source, build, out + "_open_loop", check)
    if failures:
        sys.exit("FAILED:\n  " + "\n  ".join(failures))
    print("ok")


def check_open_loop_and_grid(source, build, out, check):
    """FIFO (e) and a given grid (g), each closed loop at c=2 and then open loop at half of FIFO's
    throughput, with flags passed through to the server and the loadgen."""
    shutil.rmtree(out, ignore_errors=True)
    grid = "batch_sizes: [1, 8] sequence_lengths: [64, 128]"
    command = [sys.executable, os.path.join(source, "deploy", "bench", "e2e_benchmark.py"),
               "--build-dir", build, "--out", out, "--device", "cpu", "--models", "encoder",
               "--modes", "e,g", "--grid", grid, "--concurrency", "2", "--open-loop-fractions", "0.5",
               "--duration-s", "1", "--warmup-s", "0.3", "--ceiling-requests", "16", "--max-batch-size", "8",
               "--max-sequence-length", "128", "--lengths", "lognormal:48,0.8,8-128",
               "--server-arg=--busy-poll-us=100", "--loadgen-arg=--busy-poll"]
    done = subprocess.run(command, capture_output=True, text=True)
    print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
    check(done.returncode == 0, f"open loop run: exit status {done.returncode}")
    if done.returncode != 0:
        return
    with open(os.path.join(out, "e2e.json")) as f:
        result = json.load(f)["results"]["encoder"]
    with open(os.path.join(out, "e2e.md")) as f:
        md = f.read()
    fifo_rps = result["modes"]["e"][0]["loadgen"]["requests_per_s"]
    check(result.get("open_loop_capacity") == fifo_rps, f"open-loop capacity {result.get('open_loop_capacity')} "
          f"is not FIFO's {fifo_rps}")
    for mode in ("e", "g"):
        runs = result.get("open_loop", {}).get(mode, [])
        check(len(runs) == 1, f"mode {mode}: open-loop runs {len(runs)}")
        for run in runs:
            check(abs(run["rate"] - 0.5 * fifo_rps) < 1e-6, f"mode {mode}: rate {run['rate']}")
            check(run["loadgen"]["ok"] > 0 and run["loadgen"]["error_count"] == 0,
                  f"mode {mode} open loop: ok {run['loadgen']['ok']}, errors {run['loadgen']['error_count']}")
            label = "graphs + FIFO batcher" if mode == "e" else "graphs + batcher on the --grid given"
            check(f"| {mode} {label} | 50% |" in md, f"mode {mode}: no open-loop row in e2e.md")
    with open(os.path.join(out, "repositories", "encoder_g", "encoder", "config.pbtxt")) as f:
        check(f"buckets {{ {grid} }}" in f.read(), "mode g's config lacks the --grid block")
    with open(os.path.join(out, "logs", "server_encoder_g.log")) as f:
        check("busy-poll 100 us" in f.read(), "--server-arg did not reach the server")
    check("loadgen flags added: `--busy-poll`" in md, "the report does not name the loadgen flags")


if __name__ == "__main__":
    main()
