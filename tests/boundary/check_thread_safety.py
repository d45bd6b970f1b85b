#!/usr/bin/env python3
"""Clang's thread-safety analysis over the server's and client's translation units of a build.

GCC, which builds graphserve, ignores the GUARDED_BY/REQUIRES annotations
(server/include/graphserve/server/common/thread_annotations.h); this compiles every unit under server/,
client/ and tools/ once more with clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety, with
the flags compile_commands.json gives it, so that an unguarded access to an annotated field fails CI.
graph_engine/ is left out: its units include libtorch, whose headers clang checks on their own terms.

  check_thread_safety.py BUILD_DIR SOURCE_DIR [CLANG]
Exit 77 (skipped) without clang++.
"""
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import compile_commands

CHECKED_DIRS = ("server/", "client/", "tools/")
ANALYSIS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety"]


def clang_command(entry, clang):
    """The unit's compile command with clang++ in place of the compiler and no outputs."""
    return [clang] + compile_commands.without_outputs(entry)[1:] + ANALYSIS


def main():
    build_dir, source_dir = sys.argv[1], sys.argv[2]
    clang = sys.argv[3] if len(sys.argv) > 3 else (shutil.which("clang++") or "")
    if not clang or not shutil.which(clang):
        print("clang++ not found (Debian package clang): thread-safety analysis skipped")
        return 77
    units = [(rel, e) for rel, e in compile_commands.load(build_dir, source_dir)
             if rel.startswith(CHECKED_DIRS)]
    if not units:
        print("no server/client units in compile_commands.json")
        return 1

    def check(unit):
        rel, entry = unit
        result = subprocess.run(clang_command(entry, clang), cwd=entry["directory"],
                                capture_output=True, text=True)
        return rel, result.returncode, result.stderr

    failed = 0
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for rel, code, stderr in pool.map(check, sorted(units)):
            if code != 0:
                failed += 1
                print(f"FAIL {rel}\n{stderr}")
    print(f"thread-safety analysis: {len(units) - failed} units clean, {failed} with errors")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
