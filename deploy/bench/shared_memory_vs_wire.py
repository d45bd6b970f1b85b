#!/usr/bin/env python3
"""What system shared memory saves against the wire for large tensors, over gRPC on one host.

Writes a repository with one model whose compute is next to nothing (y = x + 1 on an FP32 vector of
variable length), starts graphserve on the CPU, and for each tensor size times inferences with
Triton's Python client (tritonclient.grpc) two ways, alternating, on the same server:
  wire    x in raw_input_contents, y back in raw_output_contents;
  shm     x and y in one registered system shared-memory region (tritonclient.utils.shared_memory):
          each inference writes x into the region and copies y out of it, as a client must.
Each answer is checked (y == x + 1) before timing. Prints a table (median and p90 ms per inference,
MB/s of tensor bytes in plus out) and, with --json, writes the numbers.

The server runs with its default flags unless --server-flags says otherwise. With
--server-flags=--grpc-executor-offload=false, wire requests of 6 to 16 MiB stall for multiples of
10 s on a 2-core host (gRPC's transport work for a large message waits for a timer): why the
executor is on by default (docs/running.md).

  /opt/graphserve-venv/bin/python3 deploy/bench/shared_memory_vs_wire.py --server build/server/graphserve
      [--sizes-mib 1,4,16,64] [--runs 20] [--server-flags=FLAGS] [--json OUT.json]

Needs torch (to script the model), numpy and tritonclient[grpc], as the test virtualenv has them.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm

from bench_support.server import GraphserveProcess, StartError

MODEL = "offset"


class Offset(torch.nn.Module):
    def forward(self, x):
        return x + 1.0


def write_repository(root, max_elements):
    model_dir = os.path.join(root, MODEL)
    os.makedirs(model_dir)
    torch.jit.script(Offset().eval()).save(os.path.join(model_dir, "model.pt"))
    with open(os.path.join(model_dir, "config.pbtxt"), "w") as config:
        config.write(f"""platform: "pytorch_libtorch"
max_batch_size: 1
max_sequence_length: {max_elements}
input {{ name: "x" data_type: TYPE_FP32 dims: [ -1 ] }}
output {{ name: "y" data_type: TYPE_FP32 dims: [ -1 ] }}
buckets {{ batch_sizes: [ 1 ] sequence_lengths: [ {max_elements} ] }}
""")


def start_server(binary, repository, log_path, flags):
    """graphserve on a free gRPC port (REST off), and a client once it is ready."""
    deadline = time.monotonic() + 300
    server = GraphserveProcess(
        binary, ["--model-repository", repository, "--device", "cpu", "--grpc-address", "127.0.0.1:0",
                 "--http-address", "", "--metrics-address", "127.0.0.1:0", "--max-request-bytes", str(256 << 20),
                 *flags], log_path)
    try:
        port = server.listening_ports(("grpc",), timeout_s=deadline - time.monotonic())["grpc"]
    except StartError as error:
        server.kill()
        sys.exit(f"{error}; see {log_path}")
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    while time.monotonic() < deadline and server.running():
        try:
            if client.is_server_ready():
                return server, client
        except Exception:  # not answering yet
            pass
        time.sleep(0.1)
    server.kill()
    sys.exit(f"graphserve did not turn ready; see {log_path}")


def time_calls(call, runs):
    for _ in range(3):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))]


def measure(client, size_mib, runs):
    elements = size_mib * (1 << 20) // 4
    x = np.random.default_rng(size_mib).standard_normal((1, elements), dtype=np.float32)
    nbytes = x.nbytes

    def wire():
        tensor = grpcclient.InferInput("x", [1, elements], "FP32")
        tensor.set_data_from_numpy(x)
        return client.infer(MODEL, [tensor]).as_numpy("y")

    name = f"bench_{size_mib}"
    key = f"/graphserve_bench_{os.getpid()}_{size_mib}"
    region = shm.create_shared_memory_region(name, key, 2 * nbytes)
    client.register_system_shared_memory(name, key, 2 * nbytes)
    try:
        def in_shared_memory():
            shm.set_shared_memory_region(region, [x])
            tensor = grpcclient.InferInput("x", [1, elements], "FP32")
            tensor.set_shared_memory(name, nbytes)
            output = grpcclient.InferRequestedOutput("y")
            output.set_shared_memory(name, nbytes, offset=nbytes)
            client.infer(MODEL, [tensor], outputs=[output])
            return shm.get_contents_as_numpy(region, np.float32, [1, elements], offset=nbytes).copy()

        for call in (wire, in_shared_memory):
            np.testing.assert_array_equal(call(), x + 1.0)
        results = {}
        for label, call in (("wire", wire), ("shm", in_shared_memory)):
            median, p90 = time_calls(call, runs)
            results[label] = {"median_ms": median, "p90_ms": p90, "mb_per_s": 2 * nbytes / 1e6 / (median / 1000)}
        return results
    finally:
        client.unregister_system_shared_memory(name)
        shm.destroy_shared_memory_region(region)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="the graphserve binary")
    parser.add_argument("--sizes-mib", default="1,4,16,64", help="tensor sizes, MiB each way")
    parser.add_argument("--runs", type=int, default=20, help="timed inferences per size and way")
    parser.add_argument("--server-flags", default="",
                        help="more graphserve flags, space-separated (see above)")
    parser.add_argument("--json", help="also write the numbers here")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes_mib.split(",")]
    if max(sizes) > 100:
        sys.exit("--sizes-mib: at most 100 (a gRPC request holds up to 256 MiB)")
    work = tempfile.mkdtemp(prefix="graphserve_shm_bench_")
    write_repository(os.path.join(work, "repository"), max(sizes) * (1 << 20) // 4)
    server, client = start_server(args.server, os.path.join(work, "repository"), os.path.join(work, "graphserve.log"),
                                   args.server_flags.split())
    rows = []
    try:
        for size in sizes:
            rows.append({"size_mib": size, **measure(client, size, args.runs)})
    finally:
        client.close()
        server.stop(timeout_s=60)
    cores = len(os.sched_getaffinity(0))
    print(f"gRPC, one client, y = x + 1 on the CPU ({cores} usable cores), server flags '{args.server_flags}', "
          f"{args.runs} runs per row; ms per inference, MB/s of tensor bytes in + out")
    print(f"{'tensor':>8} | {'wire p50':>9} {'p90':>7} {'MB/s':>7} | {'shm p50':>9} {'p90':>7} {'MB/s':>7} | shm saves")
    for row in rows:
        wire, in_shm = row["wire"], row["shm"]
        print(f"{row['size_mib']:>5} MiB | {wire['median_ms']:>9.2f} {wire['p90_ms']:>7.2f} {wire['mb_per_s']:>7.0f} | "
              f"{in_shm['median_ms']:>9.2f} {in_shm['p90_ms']:>7.2f} {in_shm['mb_per_s']:>7.0f} | "
              f"{1 - in_shm['median_ms'] / wire['median_ms']:>6.0%}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"cores": cores, "runs": args.runs, "server_flags": args.server_flags, "rows": rows}, out,
                      indent=1)


if __name__ == "__main__":
    main()
