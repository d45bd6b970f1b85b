#!/usr/bin/env python3
"""A short CPU run of deploy/bench/overload.py against the real binaries: the built-in encoder at
twice its measured capacity for one second, with deadlines a CPU can meet. Checks that the reports
hold the run and the figures the bench exists to show (what the server answered, the deadline left
when calls arrived, the loadgens' send lag, the server's thread states, how busy the host's cores
were and how long threads waited for one, the timeline and the TCP queues), and that the
/proc/net/tcp reader, the fallback where `ss` is missing, sees a live connection.

  overload_smoke_test.py SOURCE_DIR BUILD_DIR OUT_DIR
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time


def main():
    source, build, out = sys.argv[1:4]
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, os.path.join(source, "deploy", "bench", "overload.py"),
               "--build-dir", build, "--out", out, "--model", "encoder", "--device", "cpu",
               "--factors", "2", "--deadline-ms", "2000", "--capacity-concurrency", "8",
               "--duration-s", "1", "--warmup-s", "0.3", "--clients", "1", "--loadgen-threads", "1",
               "--connections", "2", "--lengths", "lognormal:32,0.5,8-64"]
    started = time.time()
    done = subprocess.run(command, capture_output=True, text=True)
    print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
    print(f"overload bench took {time.time() - started:.0f} s")
    failures = []

    def check(condition, what):
        if not condition:
            failures.append(what)

    report_path = os.path.join(out, "overload.json")
    md_path = os.path.join(out, "overload.md")
    if done.returncode != 0 or not os.path.exists(report_path) or not os.path.exists(md_path):
        sys.exit(f"FAILED: exit status {done.returncode}, or no overload.json / overload.md")
    with open(report_path) as f:
        report = json.load(f)
    with open(md_path) as f:
        md = f.read()

    check(report["capacity"]["ok"] > 0, "the capacity run answered nothing")
    runs = report["runs"]
    check([r["factor"] for r in runs] == [2.0], f"runs {[r['factor'] for r in runs]}")
    if runs:
        run = runs[0]
        loadgen, metrics = run["loadgen"], run["metrics"]
        check(loadgen["issued"] > 0 and loadgen["ok"] > 0, f"issued {loadgen['issued']}, ok {loadgen['ok']}")
        check(sum(metrics["server_codes"].values()) > 0, f"server codes {metrics['server_codes']}")
        # Every call carried a 2 s deadline and reached the server at once: the median bucket holding
        # what was left is above 1 s (the histogram's bounds: ..., 1, 2.5, ...).
        left = metrics["deadline_left_at_arrival_s"]
        check(left["count"] > 0, f"deadline left: {left}")
        check(left["p50"] is not None and left["p50"] > 1.0, f"deadline left: {left}")
        lag = loadgen.get("send_lag_ms")
        check(lag is not None and 0 <= lag["p50"] <= lag["p99"] <= lag["max"], f"send lag: {lag}")
        states = metrics["server_thread_states"]
        check("gs-infer" in states and "gs-batch" in states, f"server thread states: {sorted(states)}")
        check(all(0 < share <= 1 for shares in states.values() for share in shares.values()),
              f"server thread states: {states}")
        timeline = metrics["timeline"]
        check(len(timeline) >= 2 and any(entry["codes"] for entry in timeline), f"timeline: {timeline[:2]}")
        check(set(metrics["tcp_queue_bytes"]) == {"server_recv_q", "server_send_q", "client_recv_q",
                                                  "client_send_q"}, f"queues: {metrics['tcp_queue_bytes']}")
        busy = metrics["host_cpu_busy_share"]
        check(busy is not None and 0 < busy <= 1, f"host CPU busy share {busy}")
        check(metrics["server_runqueue_s"] >= 0 and metrics["loadgen_runqueue_s"] >= 0,
              f"run-queue waits: server {metrics['server_runqueue_s']}, loadgens {metrics['loadgen_runqueue_s']}")
        check(metrics["server_cpu_s_by_thread"].get("gs-batch", 0) > 0,
              f"CPU by thread: {metrics['server_cpu_s_by_thread']}")
        check("| 2.0× |" in md and "host CPU busy" in md, "no 2.0× row or no host CPU column in overload.md")

    # The /proc/net/tcp reader counts a connection with bytes waiting in its receive queue.
    sys.path.insert(0, os.path.join(source, "deploy", "bench"))
    import overload  # noqa: E402
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            with accepted:
                client.sendall(b"x" * 1000)
                time.sleep(0.2)
                queues = overload.Sampler(os.getpid(), port, None).proc_net_tcp_queues()
    check(queues == [1000, 0, 0, 0], f"/proc/net/tcp queues {queues}, wanted [1000, 0, 0, 0]")

    if failures:
        sys.exit("FAILED:\n  " + "\n  ".join(failures))
    print("overload smoke test passed")


if __name__ == "__main__":
    main()
