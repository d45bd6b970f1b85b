#!/usr/bin/env python3
"""Triton's own perf_analyzer against graphserve, as a Triton user measures a server: gRPC in sync,
async and streaming modes, and HTTP, each binding also with its tensors in system shared memory. Each
run must end cleanly (exit 0, a throughput line, no error), and the server must have answered every
request it counted. perf_analyzer comes from
deploy/install-deps.sh (toolchain.env says which); where it is missing, as on the CUDA host, the test
is skipped (77)."""
import os
import pathlib
import re
import subprocess
import sys
import unittest

import server_fixture

PERF_ANALYZER = pathlib.Path(os.environ.get("GRAPHSERVE_PERF_ANALYZER_DIR", "/opt/graphserve-perf-analyzer"),
                             "perf_analyzer")
if not os.access(PERF_ANALYZER, os.X_OK):
    print(f"SKIPPED: no {PERF_ANALYZER}; deploy/install-deps.sh installs it")
    sys.exit(77)

# A per-token model that clamps its ids: perf_analyzer sends random int64 tokens.
MODEL = "tiny_traced"


class PerfAnalyzerTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.serve_model_copy(MODEL, log_name="perf_analyzer")

    def run_perf_analyzer(self, *mode):
        protocol_url = (["-i", "http", "-u", self.server.http_url] if "http" in mode
                        else ["-i", "grpc", "-u", self.server.url])
        command = [str(PERF_ANALYZER), "-m", MODEL, *protocol_url, *[m for m in mode if m != "http"],
                   "--shape", "input_ids:8", "--shape", "attention_mask:8", "--concurrency-range", "4",
                   # Short and bounded: a few windows of a fixed number of requests each.
                   "--measurement-mode", "count_windows", "--measurement-request-count", "40",
                   "--max-trials", "4", "--stability-percentage", "1000"]
        before = self.successes()
        run = subprocess.run(command, capture_output=True, text=True, timeout=180)
        output = run.stdout + run.stderr
        self.assertEqual(run.returncode, 0, f"{' '.join(command)}\n{output}\n{self.server.log()[-3000:]}")
        self.assertRegex(output, r"Throughput: [0-9.]+ infer/sec", output)
        self.assertNotRegex(output.lower(), r"error|failed", output)
        answered = re.search(r"Request count: (\d+)", output)
        self.assertIsNotNone(answered, output)
        self.assertGreaterEqual(self.successes() - before, int(answered.group(1)), output)
        return output

    def successes(self):
        stats = self.client.get_inference_statistics(MODEL, as_json=True)["model_stats"][0]
        return int(stats["inference_stats"].get("success", {}).get("count", 0))

    def test_grpc_sync(self):
        self.run_perf_analyzer()

    def test_grpc_async(self):
        self.run_perf_analyzer("--async")

    def test_grpc_streaming(self):
        self.run_perf_analyzer("--streaming")

    def test_http(self):
        self.run_perf_analyzer("http")

    # Triton's shared-memory extension: perf_analyzer creates and registers a region per input and
    # output, and every request names them instead of carrying its tensors.
    def test_grpc_system_shared_memory(self):
        self.run_perf_analyzer("--shared-memory", "system")
        self.assertEqual(self.client.get_system_shared_memory_status(as_json=True), {})  # it unregistered

    def test_http_system_shared_memory(self):
        self.run_perf_analyzer("http", "--shared-memory", "system")


if __name__ == "__main__":
    unittest.main()
