"""graphserve-loadgen runs against a benchmark's Server, read back from their --json reports."""
import json
import os
import subprocess


def loadgen_command(args, server, load, json_path, lengths=None, duration_s=None, lone_client=False, extra=()):
    """graphserve-loadgen's command line: `load` (["--concurrency", N] or ["--rate", R]) on `server`'s
    gRPC port with the benchmark's lengths, timing, threads, connections, outputs and --loadgen-arg
    flags, one row per request, its report in `json_path`; `extra` flags added.
    lone_client: one connection and one polling thread, as a single caller has."""
    threads, connections = (1, 1) if lone_client else (args.loadgen_threads, args.connections)
    command = [args.loadgen, "--address", server.grpc, "--model", server.model,
               *load, "--lengths", lengths or args.lengths, "--rows", "1",
               "--duration-s", str(duration_s or args.duration_s), "--warmup-s", str(args.warmup_s),
               "--threads", str(threads), "--connections", str(connections),
               "--wait-s", "30", "--no-progress", "--json", json_path, *extra]
    if args.outputs:
        command += ["--outputs", args.outputs]
    return command + getattr(args, "loadgen_args", [])


def run_loadgen(args, server, concurrency, json_path, lengths=None, duration_s=None, protocol="grpc",
                lone_client=False, rate=None, extra=()):
    """One closed-loop run (an open loop of Poisson arrivals at `rate` req/s instead when given);
    protocol "http" sends the infer calls to the REST port instead; `extra` flags added. Its report;
    a run that could not start, or hangs, ends the benchmark (Server.fail)."""
    load = ["--rate", f"{rate:.1f}"] if rate else ["--concurrency", str(concurrency)]
    command = loadgen_command(args, server, load, json_path, lengths, duration_s, lone_client, extra)
    if protocol == "http":
        command += ["--http-address", server.http]
    # A closed loop ends after its duration plus the answers still in flight; far beyond that
    # something hangs, and the run must not eat the whole session.
    limit_s = (duration_s or args.duration_s) + args.warmup_s + 120
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit_s)
    except subprocess.TimeoutExpired:
        server.fail(f"graphserve-loadgen still running after {limit_s:.0f} s")
    if done.returncode == 2 or not os.path.exists(json_path):
        server.fail(f"graphserve-loadgen could not run (status {done.returncode}):\n"
                    + done.stdout[-2000:] + done.stderr[-2000:])
    with open(json_path) as f:
        return json.load(f)
