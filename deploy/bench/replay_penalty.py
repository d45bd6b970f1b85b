#!/usr/bin/env python3
"""What work outside the CUDA graphs costs the graphs already replaying on a device.

  replay_penalty.py MODEL.pt [--shapes 1x8,1x64,64x256] [--out OUT.json]

MODEL.pt: a TorchScript encoder taking (input_ids, attention_mask), such as
deploy/models/export_bert.py writes. For each scenario, in a fresh process (what a scenario
changes lasts for the process), one "instance" loads the model, captures one graph per shape on its
own stream, the way graphserve's CUDA executor does (eager warm-up, thread-local capture, a shared
pool), and times each graph: one replay and a synchronisation at a time (median of 50, as one
client sees it) and 50 back to back (mean, as a saturated device runs them). Then the scenario does
its one thing and the same graphs are timed again.

On the H200 (driver 580, CUDA 13, PyTorch 2.11), in three runs of the first seven scenarios, every
scenario that ran a kernel outside the graphs made every later replay about 70-80 us slower, small
or large, for the rest of the process, while an allocation did not; a second instance always did.
Other one-off runs saw an elementwise kernel on a second stream, a GEMM on the graphs' own stream
and, once, a GEMM on a second stream leave the replays alone, so what exactly flips the device is
not pinned down (BENCHMARKS.md, Issue #17, sixth pass). The last three, which tell a kernel run for
the first time from a second stream, have not run on the H200 yet. graphserve's one instance
launches nothing but its graphs and copies once it is warm (unless a batch falls back to eager), and
keeps the fast replays.

Needs PyTorch with CUDA (the CUDA host's interpreter).
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

SCENARIOS = {
    "nothing": "nothing (the timing's own noise)",
    "kernel_other_stream": "a float32 fill and add on a second stream",
    "alloc_other_stream": "a 64 MiB allocation on a second stream",
    "gemm_same_stream": "a bf16 768x768 GEMM on the graphs' own stream (its operand drawn on the default)",
    "gemm_other_stream": "a bf16 768x768 GEMM on a second stream",
    "capture_other_stream": "a one-kernel graph captured and replayed on a second stream",
    "second_instance": "a second instance: the model loaded again, its graphs captured on its own stream",
    # Whether it is a kernel the process has not run before (lazily loaded) rather than a stream:
    # operands from torch.empty, so that nothing else runs.
    "known_kernel_other_stream": "a bf16 add, as the model's residuals run, on a second stream",
    "new_kernel_same_stream": "a float64 cumsum, never run before, on the graphs' own stream",
    "new_kernel_other_stream": "a float64 cumsum, never run before, on a second stream",
}
TIMED = 50


def parse_shapes(text):
    return [tuple(int(x) for x in shape.split("x")) for shape in text.split(",")]


class Instance:
    """One model, its stream and graph pool, and a graph per (batch, length) over static inputs."""

    def __init__(self, torch, path, device, shapes):
        self.torch = torch
        self.model = torch.jit.load(path, map_location=device).eval()
        self.stream = torch.cuda.Stream(device)
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs = {}
        for batch, length in shapes:
            ids = torch.ones(batch, length, dtype=torch.int64, device=device)
            mask = torch.ones(batch, length, dtype=torch.int64, device=device)
            with torch.inference_mode(), torch.cuda.stream(self.stream):
                for _ in range(3):
                    self.model(ids, mask)
                self.stream.synchronize()
                graph = torch.cuda.CUDAGraph()
                graph.capture_begin(self.pool, capture_error_mode="thread_local")
                outputs = self.model(ids, mask)
                graph.capture_end()
            self.graphs[(batch, length)] = (graph, ids, mask, outputs)

    def time(self):
        """{"BxL": (one at a time: median us, back to back: mean us)}."""
        timings = {}
        for (batch, length), (graph, *_) in self.graphs.items():
            with self.torch.cuda.stream(self.stream):
                graph.replay()
                self.stream.synchronize()
                single = []
                for _ in range(TIMED):
                    start = time.perf_counter()
                    graph.replay()
                    self.stream.synchronize()
                    single.append((time.perf_counter() - start) * 1e6)
                start = time.perf_counter()
                for _ in range(TIMED):
                    graph.replay()
                self.stream.synchronize()
                back_to_back = (time.perf_counter() - start) * 1e6 / TIMED
            timings[f"{batch}x{length}"] = (statistics.median(single), back_to_back)
        return timings


def run_scenario(path, shapes, scenario):
    import torch
    device = torch.device("cuda", 0)
    instance = Instance(torch, path, device, shapes)
    before = instance.time()
    other = torch.cuda.Stream(device)
    if scenario == "kernel_other_stream":
        with torch.cuda.stream(other):
            torch.zeros(1 << 20, device=device).add_(1)
    elif scenario == "alloc_other_stream":
        with torch.cuda.stream(other):
            torch.empty(64 << 20, dtype=torch.uint8, device=device)
    elif scenario in ("gemm_same_stream", "gemm_other_stream"):
        weight = torch.randn(768, 768, device=device, dtype=torch.bfloat16)
        with torch.cuda.stream(instance.stream if scenario == "gemm_same_stream" else other):
            weight @ weight
    elif scenario == "capture_other_stream":
        counter = torch.zeros(16, device=device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(other):
            graph.capture_begin(capture_error_mode="thread_local")
            counter.add_(1)
            graph.capture_end()
            graph.replay()
    elif scenario == "known_kernel_other_stream":
        values = torch.empty(4096, dtype=torch.bfloat16, device=device)
        with torch.cuda.stream(other):
            values.add_(values)
    elif scenario in ("new_kernel_same_stream", "new_kernel_other_stream"):
        values = torch.empty(4096, dtype=torch.float64, device=device)
        with torch.cuda.stream(instance.stream if scenario == "new_kernel_same_stream" else other):
            values.cumsum(0)
    elif scenario == "second_instance":
        second = Instance(torch, path, device, shapes)  # noqa: F841 (kept alive while timing)
    torch.cuda.synchronize()
    return {"before": before, "after": instance.time()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--shapes", default="1x8,1x64,64x256")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--out", help="also write the figures here as JSON")
    parser.add_argument("--scenario", help=argparse.SUPPRESS)  # one scenario, in this process
    args = parser.parse_args()
    shapes = parse_shapes(args.shapes)
    if args.scenario:
        json.dump(run_scenario(args.model, shapes, args.scenario), sys.stdout)
        return

    results = {}
    for scenario in args.scenarios.split(","):
        if scenario not in SCENARIOS:
            sys.exit(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
        answer = subprocess.run([sys.executable, __file__, args.model, "--shapes", args.shapes,
                                 "--scenario", scenario], check=True, capture_output=True, text=True)
        results[scenario] = json.loads(answer.stdout)

    labels = [f"{batch}x{length}" for batch, length in shapes]
    print("| after ... | " + " | ".join(f"{label} one at a time (us) | {label} back to back (us)"
                                        for label in labels) + " |")
    print("|---|" + "---:|" * (2 * len(labels)))
    for scenario, timing in results.items():
        cells = []
        for label in labels:
            for k in range(2):
                before, after = timing["before"][label][k], timing["after"][label][k]
                cells.append(f"{before:.0f} → {after:.0f} ({after - before:+.0f})")
        print(f"| {SCENARIOS[scenario]} | " + " | ".join(cells) + " |")
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"shapes": labels, "timed_replays": TIMED, "results": results}, out, indent=1)


if __name__ == "__main__":
    main()
