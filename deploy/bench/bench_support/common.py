"""The source tree's root, progress lines and the benchmarks' way of failing."""
import os
import sys

# graphserve's source tree: this file is deploy/bench/bench_support/common.py.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def log(message):
    print(message, flush=True)


def fail(message):
    """Ends the benchmark with `message` on stderr, named after the script that runs, and status 1."""
    program = os.path.splitext(os.path.basename(sys.argv[0]))[0] or "bench_support"
    print(f"{program}: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def csv(text):
    return [item.strip() for item in text.split(",") if item.strip()]
