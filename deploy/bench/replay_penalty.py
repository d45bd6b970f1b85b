#!/usr/bin/env python3
"""What work outside the CUDA graphs costs the graphs already replaying on a device.

  replay_penalty.py MODEL.pt [--shapes 1x8,1x64,64x256] [--scenarios A,B] [--tiny]
                    [--no-texpr-fuser] [--out OUT.json]

MODEL.pt: a TorchScript encoder taking (input_ids, attention_mask), such as
deploy/models/export_bert.py writes. For each scenario, in a fresh process (what a scenario
changes lasts for the process), one "instance" loads the model, captures one graph per shape on its
own stream, the way graphserve's CUDA executor does (eager warm-up, thread-local capture, a shared
pool), and times each graph: one replay and a synchronisation at a time (median of 50, as one
client sees it) and 50 back to back (mean, as a saturated device runs them). Then the scenario does
its one thing and the same graphs are timed again. --tiny adds a graph of 200 one-element adds
(per kernel or per launch?); forked_graphs adds, per shape of two rows or more, a graph that runs
the two halves of the batch on forked streams.

On the H200 (driver 580, CUDA 13, PyTorch 2.11; BENCHMARKS.md, "Two instances on one GPU", and the
sixth and seventh passes of #17 in its history, git show 27e176d:BENCHMARKS.md):
after a kernel on another stream than the graphs' (a second stream or the default one, eager or in a
graph of its own, before the graphs exist or after), and after a second copy of the model loads,
even onto the first one's stream, every replay is slower for the rest of the process: +70-80 us for
BERT-base, small or large, and +35 us for 200 one-element adds (about 0.17 us a kernel: a cost per
kernel, not per launch). A copy on a second stream, an allocation, and a kernel never run before on
the graphs' own stream leave the replays alone; lazy module loading and TorchScript's fuser play no
part. Not everything that flips the device is pinned down: fills on the default stream between the
captures leave it alone, and a process that captured 1x64 before the large shapes started slow.
graphserve's one instance per GPU launches nothing but its graphs and copies on its own stream once
warm (unless a batch falls back to eager, on that same stream), and keeps the fast replays.

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
    # Whether graphserve could keep two instances fast by sharing one stream between them.
    "second_instance_same_stream": "a second instance whose graphs and warm-up run on the first's stream",
    "jiterator_other_stream": "a kernel compiled at run time (NVRTC, a new module) on a second stream",
    "known_kernel_default_stream": "a bf16 add on the default stream",
    "graph_other_stream": "a graph of one bf16 add (nothing eager) captured and replayed on a second stream",
    "copy_other_stream": "a 1 MiB copy from pinned host memory on a second stream",
    # Whether order matters: the same kernel on a second stream, but before the graphs exist.
    "kernel_other_stream_first":
        "a bf16 add on a second stream before the instance loads (both timings after it)",
    # One graph per shape that runs the batch as two halves on forked streams, so that the device can
    # overlap them as it overlaps two instances: what it gains, and whether it slows the other graphs.
    "forked_graphs": "forked graphs (two half batches on two streams, one graph) captured and replayed",
}
TINY_KERNELS = 200  # the --tiny graph's one-element adds: a cost per kernel, or per launch?
TIMED = 50


def parse_shapes(text):
    return [tuple(int(x) for x in shape.split("x")) for shape in text.split(",")]


class Instance:
    """One model, its stream and graph pool, and a graph per (batch, length) over static inputs."""

    def __init__(self, torch, path, device, shapes, stream=None, tiny=False):
        self.torch = torch
        self.model = torch.jit.load(path, map_location=device).eval()
        self.stream = stream or torch.cuda.Stream(device)
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
            self.graphs[f"{batch}x{length}"] = (graph, ids, mask, outputs)
        if not tiny:
            return
        # bf16 tensor + tensor: the kernel the model's residual adds already loaded.
        counter = torch.empty(1, dtype=torch.bfloat16, device=device)
        with torch.cuda.stream(self.stream):
            counter.add_(counter)
            self.stream.synchronize()
            graph = torch.cuda.CUDAGraph()
            graph.capture_begin(self.pool, capture_error_mode="thread_local")
            for _ in range(TINY_KERNELS):
                counter.add_(counter)
            graph.capture_end()
        self.graphs["tiny"] = (graph, counter)

    def capture_forked(self, shapes):
        """Per shape of two rows or more, a graph whose two halves run on forked streams."""
        torch = self.torch
        branch = torch.cuda.Stream(self.stream.device)
        for batch, length in shapes:
            if batch < 2:
                continue
            half = batch // 2
            ids = torch.ones(batch, length, dtype=torch.int64, device=self.stream.device)
            mask = torch.ones(batch, length, dtype=torch.int64, device=self.stream.device)
            with torch.inference_mode(), torch.cuda.stream(self.stream):
                for _ in range(3):  # warm up both streams (each stream gets its own cuBLAS workspace)
                    self.model(ids[:half], mask[:half])
                    with torch.cuda.stream(branch):
                        self.model(ids[half:], mask[half:])
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                graph.capture_begin(self.pool, capture_error_mode="thread_local")
                branch.wait_stream(self.stream)
                first = self.model(ids[:half], mask[:half])
                with torch.cuda.stream(branch):
                    second = self.model(ids[half:], mask[half:])
                self.stream.wait_stream(branch)
                graph.capture_end()
            self.graphs[f"{batch}x{length} forked"] = (graph, ids, mask, first, second)

    def time(self):
        """{"BxL" or "tiny": (one at a time: median us, back to back: mean us)}."""
        timings = {}
        for label, (graph, *_) in self.graphs.items():
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
            timings[label] = (statistics.median(single), back_to_back)
        return timings


def run_scenario(path, shapes, scenario, tiny, texpr_fuser):
    import torch
    torch._C._jit_set_texpr_fuser_enabled(texpr_fuser)
    device = torch.device("cuda", 0)
    other = torch.cuda.Stream(device)
    if scenario == "kernel_other_stream_first":
        values = torch.empty(4096, dtype=torch.bfloat16, device=device)
        with torch.cuda.stream(other):
            values.add_(values)
        torch.cuda.synchronize()
    instance = Instance(torch, path, device, shapes, tiny=tiny)
    before = instance.time()
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
    elif scenario == "second_instance_same_stream":
        second = Instance(torch, path, device, shapes, stream=instance.stream)  # noqa: F841
    elif scenario == "known_kernel_default_stream":
        values = torch.empty(4096, dtype=torch.bfloat16, device=device)
        values.add_(values)
    elif scenario == "graph_other_stream":
        values = torch.empty(4096, dtype=torch.bfloat16, device=device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(other):
            graph.capture_begin(capture_error_mode="thread_local")
            values.add_(values)
            graph.capture_end()
            graph.replay()
    elif scenario == "copy_other_stream":
        host = torch.empty(1 << 20, dtype=torch.uint8, pin_memory=True)
        with torch.cuda.stream(other):
            host.to(device, non_blocking=True)
    elif scenario == "forked_graphs":
        instance.capture_forked(shapes)
    elif scenario == "jiterator_other_stream":
        cube = torch.cuda.jiterator._create_jit_fn("template <typename T> T cube(T x) { return x * x * x; }")
        with torch.cuda.stream(other):
            cube(torch.empty(4096, device=device))
    torch.cuda.synchronize()
    return {"before": before, "after": instance.time()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--shapes", default="1x8,1x64,64x256")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--out", help="also write the figures here as JSON")
    parser.add_argument("--tiny", action="store_true",
                        help=f"also time a graph of {TINY_KERNELS} one-element bf16 adds")
    parser.add_argument("--no-texpr-fuser", action="store_true",
                        help="turn TorchScript's fuser off (it compiles kernels at run time, per model copy)")
    parser.add_argument("--scenario", help=argparse.SUPPRESS)  # one scenario, in this process
    args = parser.parse_args()
    shapes = parse_shapes(args.shapes)
    if args.scenario:
        json.dump(run_scenario(args.model, shapes, args.scenario, args.tiny, not args.no_texpr_fuser),
                  sys.stdout)
        return

    results = {}
    for scenario in args.scenarios.split(","):
        if scenario not in SCENARIOS:
            sys.exit(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
        command = [sys.executable, __file__, args.model, "--shapes", args.shapes, "--scenario", scenario]
        command += ["--tiny"] * args.tiny + ["--no-texpr-fuser"] * args.no_texpr_fuser
        answer = subprocess.run(command, check=True, capture_output=True, text=True)
        results[scenario] = json.loads(answer.stdout)

    labels = [f"{batch}x{length}" for batch, length in shapes] + ["tiny"] * args.tiny
    labels += [f"{batch}x{length} forked" for batch, length in shapes
               if batch >= 2 and any(f"{batch}x{length} forked" in r["after"] for r in results.values())]
    print("| after ... | " + " | ".join(f"{label} one at a time (us) | {label} back to back (us)"
                                        for label in labels) + " |")
    print("|---|" + "---:|" * (2 * len(labels)))
    for scenario, timing in results.items():
        cells = []
        for label in labels:
            for k in range(2):
                if label not in timing["after"]:
                    cells.append("–")
                elif label not in timing["before"]:
                    cells.append(f"{timing['after'][label][k]:.0f}")
                else:
                    before, after = timing["before"][label][k], timing["after"][label][k]
                    cells.append(f"{before:.0f} → {after:.0f} ({after - before:+.0f})")
        print(f"| {SCENARIOS[scenario]} | " + " | ".join(cells) + " |")
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"shapes": labels, "timed_replays": TIMED, "results": results}, out, indent=1)


if __name__ == "__main__":
    main()
