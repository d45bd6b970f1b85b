#!/usr/bin/env python3
"""Checks graphserve's torch boundary on every translation unit of a build.

Rules (why: docs/development/gpu-host.md, pitfall 2 — the torch wheel's bundled protobuf/fmt
headers break gRPC, protobuf and spdlog code; a unit that happens to compile today still breaks with
the next header):
  1. only sources under graph_engine/ and tests/graph_engine/ may include libtorch headers;
  2. no translation unit includes both libtorch headers and gRPC, protobuf or spdlog headers.
Rule 1 also keeps graph_engine's public headers torch-free, since server/ includes them.

It asks the compiler itself, through compile_commands.json, which headers each unit really includes
(transitively), so it cannot be fooled by an include hidden behind another header.

  check_torch_boundary.py BUILD_DIR SOURCE_DIR   check a build
  check_torch_boundary.py --self-test            check the rules on made-up include lists
"""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import compile_commands

TORCH_MARKERS = ("/torch/csrc/", "/ATen/", "/c10/", "/torch/script.h", "/torch/torch.h")
RPC_MARKERS = ("/google/protobuf/", "/grpcpp/", "/grpc/", "/spdlog/")
TORCH_ALLOWED_DIRS = ("graph_engine/", "tests/graph_engine/")


def classify(headers):
    torch = sorted(h for h in headers if any(m in h for m in TORCH_MARKERS))
    rpc = sorted(h for h in headers if any(m in h for m in RPC_MARKERS))
    return torch, rpc


def violations(source_rel, headers):
    """The rule violations of one unit, given its path relative to the source root."""
    torch, rpc = classify(headers)
    problems = []
    if torch and not source_rel.startswith(TORCH_ALLOWED_DIRS):
        problems.append(f"{source_rel}: includes libtorch ({torch[0]}) outside graph_engine/")
    if torch and rpc:
        problems.append(f"{source_rel}: includes both libtorch ({torch[0]}) and {rpc[0]}")
    return problems


def dependencies(entry):
    """Headers the unit includes, from the compiler's -M output."""
    stripped = compile_commands.without_outputs(entry)
    result = subprocess.run(stripped + ["-M"], cwd=entry["directory"], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"cannot list the includes of {entry['file']}:\n{result.stderr[-2000:]}")
    text = result.stdout.replace("\\\n", " ")
    return text.split(":", 1)[1].split()


def check_build(build_dir, source_dir):
    units = [(rel, e) for rel, e in compile_commands.load(build_dir, source_dir)
             if not rel.startswith("..")]
    if not units:
        print("no translation units of the project in compile_commands.json")
        return 1

    def check(unit):
        rel, entry = unit
        return rel, violations(rel, dependencies(entry))

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(check, units))
    problems = [p for _, found in results for p in found]
    torch_units = [rel for rel, _ in results if rel.startswith(TORCH_ALLOWED_DIRS)]
    print(f"checked {len(results)} translation units ({len(torch_units)} allowed to see libtorch)")
    for problem in problems:
        print("VIOLATION:", problem)
    return 1 if problems else 0


def self_test():
    torch_h = "/usr/include/ATen/core/Tensor.h"
    grpc_h = "/usr/include/grpcpp/grpcpp.h"
    spdlog_h = "/usr/include/spdlog/spdlog.h"
    cases = [
        ("graph_engine/src/eager_executor.cpp", [torch_h], 0),
        ("server/src/config/config.cpp", [grpc_h, spdlog_h], 0),
        ("server/src/config/config.cpp", [grpc_h, torch_h], 2),
        ("client/src/client.cpp", [torch_h], 1),
        ("graph_engine/src/engine_log.cpp", [torch_h, spdlog_h], 1),
        ("tests/graph_engine/encoder_test.cpp", [torch_h], 0),
        ("tests/server/config_test.cpp", ["/opt/torch/include/torch/csrc/api/include/torch/torch.h"], 1),
    ]
    failed = 0
    for source, headers, expected in cases:
        found = violations(source, headers)
        if len(found) != expected:
            print(f"self-test: {source} with {headers}: expected {expected} violations, got {found}")
            failed += 1
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(check_build(sys.argv[1], sys.argv[2]))
