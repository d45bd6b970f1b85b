#!/usr/bin/env python3
"""Goodput under overload: one graphserve (default config), its capacity measured first (closed loop,
no deadline), then graphserve-loadgen's open loop (Poisson arrivals) at multiples of that capacity,
every call with the same deadline. Reports, per load, the successful requests/s against capacity,
the latency of the successful calls and what became of the others (refused at once for their
deadline, expired, ...). Writes OUT/overload.md and OUT/overload.json.

  python3 deploy/bench/overload.py --build-dir build-cuda --out OUT [--model bert_base_bf16]
      [--factors 1.5,2,4] [--deadline-ms 100] [--protocol grpc|http] [--busy-start-processes N]

--busy-start-processes starts the server while N Python busy loops hold the host's cores, and stops
them once it is ready: the warm-up then measures the buckets on a busy host, as a server started
beside other work does, and the run shows whether admission recovers from those figures.

Built on deploy/bench/bench_support (model export, repository, server, loadgen, /metrics).
"""
import argparse
import json
import os
import re
import resource
import subprocess
import threading
import time

from bench_support.common import csv, log
from bench_support.loadgen import loadgen_command, run_loadgen
from bench_support.metrics import by_label, metric_delta
from bench_support.report import fmt
from bench_support.server import add_load_arguments, add_server_arguments, one_model_server


def open_loop(args, server, rate, json_path):
    """--clients loadgen processes, each sending rate/clients (one process issues from one thread,
    which tops out near 20k calls/s); their reports merged: counts summed, latency percentiles the
    largest any client saw."""
    commands = []
    for client in range(args.clients):
        part = f"{json_path}.{client}"
        # Over REST the loadgen sends the deadline as Triton's `timeout` parameter too, so the
        # server refuses and drops calls for it as it does gRPC's.
        rest = ["--http-address", server.http] if args.protocol == "http" else []
        command = loadgen_command(args, server, ["--rate", f"{rate / args.clients:.1f}"], part,
                                  extra=["--seed", str(client + 1), "--timeout-ms", str(args.deadline_ms),
                                         "--max-in-flight", str(args.max_in_flight), *rest])
        commands.append((part, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    reports = []
    for part, process in commands:
        output, _ = process.communicate(timeout=args.duration_s + args.warmup_s + 120)
        if process.returncode == 2 or not os.path.exists(part):
            server.fail(f"graphserve-loadgen could not run (status {process.returncode}):\n" + output[-2000:])
        with open(part) as f:
            reports.append(json.load(f))
    merged = dict(reports[0])
    for key in ("issued", "ok", "error_count", "requests_per_s", "tokens", "tokens_per_s"):
        merged[key] = sum(r[key] for r in reports)
    merged["errors"] = {}
    for r in reports:
        for code, count in r["errors"].items():
            merged["errors"][code] = merged["errors"].get(code, 0) + count
    latencies = [r["latency_ms"] for r in reports if r["latency_ms"]["count"]]
    merged["latency_ms"] = {"count": sum(latency["count"] for latency in latencies)}
    for key in ("p50", "p90", "p99", "max"):
        merged["latency_ms"][key] = max((latency[key] for latency in latencies), default=None)
    lags = [r["send_lag_ms"] for r in reports if r.get("send_lag_ms")]
    merged["send_lag_ms"] = {key: max(lag[key] for lag in lags) for key in ("p50", "p99", "max")} if lags else None
    with open(json_path, "w") as f:
        json.dump({"merged": merged, "clients": reports}, f, indent=1)
    return merged


class Sampler(threading.Thread):
    """Samples, every `interval_s` while a load runs, where the calls wait: CPU time by thread, for
    the server (by thread name: gRPC's callback threads are "nexting_thread", its executor's
    "default-executo", graphserve's own "graphserve") and for the loadgens (the busiest thread: one
    near 100% is a client that cannot keep up), and the bytes waiting in the TCP queues of the gRPC
    port's connections, on the server's side (unread requests) and the clients' (unread answers,
    unsent requests), from `ss` or, where it is missing, /proc/net/tcp. Also a timeline: the
    server's answers by code, its wait scale, the TCP queues and (with `ss`) the bytes its sockets
    received and sent."""

    def __init__(self, pid, port, scrape, interval_s=0.25):
        super().__init__(daemon=True)
        self.pid, self.port, self.scrape, self.interval_s = pid, str(port), scrape, interval_s
        self.stop_event = threading.Event()
        self.timeline = []  # one entry per sample
        self.first = self.last = None
        self.started = self.ended = None
        self.queues = []  # (server recv-q, server send-q, client recv-q, client send-q) per sample

    @staticmethod
    def thread_times(pid):
        """{tid: (name, CPU seconds, run-queue seconds)} of process `pid`'s threads: the time each
        ran, and the time it was ready to run but waited for a core (/proc's schedstat; 0 where the
        kernel keeps none). A thread sampled "running" may be doing either."""
        times = {}
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return times
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    name, rest = f.read().split("(", 1)[1].rsplit(")", 1)
            except OSError:
                continue  # the thread ended
            fields = rest.split()
            waited = 0.0
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    waited = int(f.read().split()[1]) / 1e9
            except (OSError, ValueError, IndexError):
                pass
            times[tid] = (name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), waited)
        return times

    @staticmethod
    def host_cpu():
        """(busy, total) jiffies of every core of the host so far, from /proc/stat."""
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle and iowait
        total = sum(values[:8])  # guest time is already inside user time
        return total - idle, total

    def loadgen_pids(self):
        """This script's child processes: the loadgens."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == self.pid:
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                        pids.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
        return pids

    def snapshot(self):
        return {"server": self.thread_times(self.pid),
                "loadgens": {pid: self.thread_times(pid) for pid in self.loadgen_pids()},
                "host_cpu": self.host_cpu()}

    def proc_net_tcp_queues(self):
        """What socket_queues gives, from /proc/net/tcp and tcp6: established sockets' transmit and
        receive queues, by whether the gRPC port is the local or the remote end."""
        totals = [0, 0, 0, 0]
        port = int(self.port)
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(table) as f:
                    lines = f.readlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                if len(fields) < 5 or fields[3] != "01":  # 01: ESTABLISHED
                    continue
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                send_q, recv_q = (int(v, 16) for v in fields[4].split(":"))
                if local_port == port:
                    totals[0] += recv_q
                    totals[1] += send_q
                elif remote_port == port:
                    totals[2] += recv_q
                    totals[3] += send_q
        return totals

    def socket_queues(self):
        try:
            out = subprocess.run(["ss", "-tnH", "state", "established"], capture_output=True, text=True).stdout
        except OSError:
            return self.proc_net_tcp_queues()  # no `ss` (the CUDA host has none)
        totals = [0, 0, 0, 0]
        for line in out.splitlines():
            fields = line.split()
            if len(fields) < 4:
                continue
            recv_q, send_q, local, peer = int(fields[0]), int(fields[1]), fields[2], fields[3]
            if local.rsplit(":", 1)[-1] == self.port:
                totals[0] += recv_q
                totals[1] += send_q
            elif peer.rsplit(":", 1)[-1] == self.port:
                totals[2] += recv_q
                totals[3] += send_q
        return totals

    def server_socket_bytes(self):
        """Bytes received and sent so far over the gRPC port's open connections, on the server's
        side: what the clients really sent, whether or not gRPC has handed it on yet."""
        out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{self.port} )"],
                             capture_output=True, text=True).stdout
        received = sum(int(v) for v in re.findall(r"bytes_received:(\d+)", out))
        sent = sum(int(v) for v in re.findall(r"bytes_sent:(\d+)", out))
        return received, sent

    def run(self):
        # The loadgens start with this thread: their first figures come from the first sample.
        self.started = time.monotonic()
        self.first = self.snapshot()
        while not self.stop_event.wait(self.interval_s):
            try:
                self.queues.append(self.socket_queues())
            except (OSError, ValueError):
                pass  # the thread figures still come
            latest = self.snapshot()
            if not self.first["loadgens"]:
                self.first["loadgens"] = latest["loadgens"]
            self.last, self.ended = latest, time.monotonic()
            try:
                _, series = self.scrape()
            except OSError:
                continue
            codes = by_label(series, "graphserve_requests_total", "code")
            try:
                received, sent = self.server_socket_bytes()
            except (OSError, ValueError):
                received = sent = None
            self.timeline.append({"t": round(self.ended - self.started, 2), "server_rx_bytes": received,
                                  "server_tx_bytes": sent, "tcp_queues": self.queues[-1] if self.queues else None,
                                  "codes": {k: v for k, v in codes.items() if v},
                                  "wait_scale": series.get(("graphserve_admission_wait_scale", frozenset()))})

    def summary(self):
        self.stop_event.set()
        self.join()
        last = self.last or self.snapshot()
        window = max((self.ended or time.monotonic()) - self.started, 1e-9)

        def deltas(before, after):
            return {tid: (name, cpu - before.get(tid, (name, 0.0, 0.0))[1],
                          waited - before.get(tid, (name, 0.0, 0.0))[2])
                    for tid, (name, cpu, waited) in after.items()}

        server = deltas(self.first["server"], last["server"])
        by_name, waited_by_name = {}, {}
        for name, cpu, waited in server.values():
            by_name[name] = by_name.get(name, 0.0) + cpu
            waited_by_name[name] = waited_by_name.get(name, 0.0) + waited
        busiest_loadgen_thread = 0.0
        loadgen_cpu = loadgen_waited = 0.0
        for pid, threads in last["loadgens"].items():
            for _, cpu, waited in deltas(self.first["loadgens"].get(pid, {}), threads).values():
                loadgen_cpu += cpu
                loadgen_waited += waited
                busiest_loadgen_thread = max(busiest_loadgen_thread, cpu)
        busy = last["host_cpu"][0] - self.first["host_cpu"][0]
        total = last["host_cpu"][1] - self.first["host_cpu"][1]
        columns = list(zip(*self.queues)) or [[0]] * 4
        names = ("server_recv_q", "server_send_q", "client_recv_q", "client_send_q")
        queues = {name: {"max": max(col), "mean": round(sum(col) / len(col))} for name, col in zip(names, columns)}
        return {"server_cpu_s_by_thread": {k: round(v, 1) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1])
                                           if v >= 0.05},
                # Ready to run but waiting for a core: a host with too few cores for server and loadgens.
                "server_runqueue_s_by_thread": {k: round(v, 2)
                                                for k, v in sorted(waited_by_name.items(), key=lambda kv: -kv[1])
                                                if v >= 0.01},
                "server_runqueue_s": round(sum(waited_by_name.values()), 2),
                "server_busiest_thread_share":
                    round(max((cpu for _, cpu, _ in server.values()), default=0.0) / window, 2),
                "loadgen_cpu_s": round(loadgen_cpu, 1),
                "loadgen_runqueue_s": round(loadgen_waited, 2),
                "host_cpu_busy_share": round(busy / total, 3) if total > 0 else None,
                "loadgen_busiest_thread_share": round(busiest_loadgen_thread / window, 2),
                "tcp_queue_bytes": queues,
                "timeline": self.timeline}


def histogram_quantiles(before, after, name, quantiles=(0.1, 0.5, 0.9)):
    """Upper bounds, per quantile, of the histogram bucket holding that quantile of what `name`
    observed between two scrapes (None past the last finite bound), and the count."""
    counts = {}
    for scrape, sign in ((after[1], 1), (before[1], -1)):
        for (n, labels), value in scrape.items():
            if n == name + "_bucket":
                bound = float(dict(labels)["le"])
                counts[bound] = counts.get(bound, 0.0) + sign * value
    bounds = sorted(counts)
    total = counts[bounds[-1]] if bounds else 0.0
    out = {"count": int(total)}
    for q in quantiles:
        out[f"p{round(q * 100)}"] = next((b if b != float("inf") else None for b in bounds
                                          if total and counts[b] >= q * total), None)
    return out


# x86-64 system call numbers of what the sampled threads are usually in.
SYSCALLS = {"0": "read", "1": "write", "7": "poll", "9": "mmap", "10": "mprotect", "11": "munmap",
            "24": "sched_yield", "35": "nanosleep", "46": "sendmsg", "47": "recvmsg", "202": "futex",
            "230": "clock_nanosleep", "232": "epoll_wait", "271": "ppoll", "281": "epoll_pwait"}


class WaitSampler(threading.Thread):
    """What each thread of process `pid` is doing, sampled every `interval_s` from /proc/PID/task/TID/syscall:
    running, or blocked in which system call (a futex with its address, so that threads queued on
    one lock show as one entry). Tells threads that wait for work (epoll, their own condition
    variable) from threads that wait for each other."""

    def __init__(self, pid, interval_s=0.005, prefixes=("gs-", "grpc", "default-exec", "nexting", "event_engine")):
        super().__init__(daemon=True)
        self.pid, self.interval_s, self.prefixes = pid, interval_s, prefixes
        self.stop_event = threading.Event()
        self.tally = {}  # (thread name, state) -> samples
        self.samples = {}  # thread name -> samples

    def run(self):
        task = f"/proc/{self.pid}/task"
        while not self.stop_event.wait(self.interval_s):
            try:
                tids = os.listdir(task)
            except OSError:
                return
            for tid in tids:
                try:
                    with open(f"{task}/{tid}/comm") as f:
                        name = f.read().strip()
                    with open(f"{task}/{tid}/syscall") as f:
                        fields = f.read().split()
                except OSError:
                    continue
                if not fields:
                    continue
                if fields[0] == "running":
                    state = "running"
                else:
                    state = SYSCALLS.get(fields[0], "syscall " + fields[0])
                    if state == "futex" and len(fields) > 1:
                        state += "@" + fields[1]
                self.tally[(name, state)] = self.tally.get((name, state), 0) + 1
                self.samples[name] = self.samples.get(name, 0) + 1

    def summary(self, per_thread=4):
        """Per thread name (those starting with one of `prefixes`), its most frequent states, each
        as its share of that name's samples."""
        self.stop_event.set()
        self.join()
        out = {}
        for (name, state), n in sorted(self.tally.items(), key=lambda kv: -kv[1]):
            if not name.startswith(self.prefixes):
                continue
            states = out.setdefault(name, {})
            if len(states) < per_thread:
                states[state] = round(n / self.samples[name], 3)
        return out


class LoadgenWaits(threading.Thread):
    """A WaitSampler on the first loadgen, once it has started."""

    def __init__(self, sampler):
        super().__init__(daemon=True)
        self.sampler, self.waits = sampler, None
        self.stop_event = threading.Event()

    def run(self):
        while not self.stop_event.wait(0.05):
            pids = self.sampler.loadgen_pids()
            if pids:
                self.waits = WaitSampler(min(pids), prefixes=("",))
                self.waits.start()
                return

    def summary(self):
        self.stop_event.set()
        self.join()
        return self.waits.summary() if self.waits else {}


def server_settings(args):
    """How the server was started, for the report's header."""
    changed = args.server_args + [f"environment {entry}" for entry in args.server_env]
    return "default config" if not changed else "default config but " + ", ".join(f"`{c}`" for c in changed)


def cpu_seconds(pid):
    """User plus system CPU time of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_busy_loops(count):
    """`count` Python processes that spin until killed: a host busy with other work."""
    return [subprocess.Popen(["python3", "-c", "while True: pass"]) for _ in range(count)]


def stop_busy_loops(loops):
    for loop in loops:
        loop.kill()
        loop.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_arguments(parser)
    parser.add_argument("--factors", default="1.5,2,4")
    parser.add_argument("--deadline-ms", type=int, default=100)
    parser.add_argument("--capacity-concurrency", type=int, default=512)
    parser.add_argument("--duration-s", type=float, default=5)
    parser.add_argument("--warmup-s", type=float, default=1)
    parser.add_argument("--outputs", default="pooler_output")
    parser.add_argument("--lengths", default="skewed")
    parser.add_argument("--max-in-flight", type=int, default=65536)
    parser.add_argument("--clients", type=int, default=4, help="loadgen processes sharing the open loop's rate")
    parser.add_argument("--max-batch-size", type=int, help="the model's max_batch_size, cut (a smaller grid "
                        "warms up in seconds on a CPU)")
    parser.add_argument("--max-sequence-length", type=int, help="the model's max_sequence_length, cut")
    parser.add_argument("--protocol", choices=("grpc", "http"), default="grpc",
                        help="send the infer calls over gRPC or to the REST port (Poisson arrivals both, "
                             "the deadline sent as REST's `timeout` parameter)")
    parser.add_argument("--busy-start-processes", type=int, default=0,
                        help="busy loops running while the server starts and warms up (a poisoned start-up)")
    add_load_arguments(parser)
    parser.add_argument("--server-arg", dest="server_args", action="append", default=[],
                        help="a flag for graphserve (repeatable), e.g. --server-arg=--grpc-max-concurrent-streams=256")
    parser.add_argument("--server-env", dest="server_env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for graphserve alone, not the loadgens (repeatable), "
                             "e.g. --server-env GRPC_POLL_STRATEGY=poll")
    args = parser.parse_args()
    busy_loops = start_busy_loops(args.busy_start_processes)
    server = one_model_server(args)
    runs = []
    try:
        try:
            server.wait_ready(args.start_timeout_s)
        finally:
            stop_busy_loops(busy_loops)
        # Really without deadline: the loadgen's default (10 s) now reaches a REST server too, whose
        # admission then refuses at once whatever a poisoned warm-up figure puts past it, and a
        # closed loop of instant refusals spins on them instead of measuring capacity.
        capacity_report = run_loadgen(args, server, args.capacity_concurrency,
                                      os.path.join(args.out, "raw", "capacity.json"), protocol=args.protocol,
                                      extra=["--timeout-ms", "0"])
        capacity = capacity_report["requests_per_s"]
        log(f"capacity: {capacity:,.0f} req/s (closed loop, c={args.capacity_concurrency}, no deadline)")
        for factor in [float(f) for f in csv(args.factors)]:
            before = server.scrape(stats=True)
            server_cpu = cpu_seconds(server.process.pid)
            client_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
            sampler = Sampler(server.process.pid, server.grpc.rsplit(":", 1)[-1], server.scrape)
            sampler.start()
            waits = WaitSampler(server.process.pid)
            waits.start()
            loadgen_waits = LoadgenWaits(sampler)
            loadgen_waits.start()
            report = open_loop(args, server, factor * capacity, os.path.join(args.out, "raw", f"open_{factor}x.json"))
            where = sampler.summary()
            where["server_thread_states"] = waits.summary()
            where["loadgen_thread_states"] = loadgen_waits.summary()
            after = server.scrape(stats=True)
            client_after = resource.getrusage(resource.RUSAGE_CHILDREN)
            delta = metric_delta(before, after, None)
            codes0 = by_label(before[1], "graphserve_requests_total", "code")
            codes1 = by_label(after[1], "graphserve_requests_total", "code")
            delta["server_codes"] = {k: v - codes0.get(k, 0.0) for k, v in codes1.items() if v > codes0.get(k, 0.0)}
            delta["server_cpu_s"] = cpu_seconds(server.process.pid) - server_cpu
            delta["client_cpu_s"] = (client_after.ru_utime + client_after.ru_stime
                                     - client_cpu.ru_utime - client_cpu.ru_stime)
            delta.update(where)
            # Where the deadline went: spent before the call reached the model (client, network,
            # gRPC's transport) or in graphserve; and whether the loadgens kept to their schedule.
            delta["deadline_left_at_arrival_s"] = histogram_quantiles(
                before, after, "graphserve_request_deadline_left_seconds")
            delta["loadgen_send_lag_ms"] = report.get("send_lag_ms")
            runs.append({"factor": factor, "offered_rps": factor * capacity, "loadgen": report, "metrics": delta})
            lat = report["latency_ms"]
            log(f"{factor}x: offered {factor * capacity:,.0f}/s, ok {report['requests_per_s']:,.0f}/s "
                    f"({report['requests_per_s'] / capacity:.0%} of capacity), p50 {fmt(lat['p50'])} "
                    f"p99 {fmt(lat['p99'])} ms, errors {report['errors']}; server saw {delta['server_codes']}, "
                    f"CPU s: server {delta['server_cpu_s']:.1f} client {delta['client_cpu_s']:.1f} over "
                    f"{delta['window_s']:.1f} s; where: {where}")
    finally:
        server.stop()

    with open(os.path.join(args.out, "overload.json"), "w") as f:
        json.dump({"settings": vars(args), "capacity": capacity_report, "runs": runs}, f, indent=1)
    lines = [f"# Goodput under overload: {args.model} on `{args.device}`, {time.strftime('%Y-%m-%d')}", "",
             f"One server, {server_settings(args)}, calls over {args.protocol}"
             + (f", started beside {args.busy_start_processes} busy loops" if args.busy_start_processes else "")
             + f". Capacity: closed loop at c={args.capacity_concurrency} without "
             f"deadline, {capacity:,.0f} successful requests/s. Then `graphserve-loadgen --rate` (Poisson "
             f"arrivals) at multiples of it, every call with a {args.deadline_ms} ms deadline; lengths "
             f"`{args.lengths}`, one row, outputs `{args.outputs or 'all'}`, {args.duration_s} s after "
             f"{args.warmup_s} s warm-up, {args.clients} loadgen processes of {args.connections} connections "
             "each (percentiles: the largest any process saw).", "",
             "Deadline left at arrival: the bounds of the server's histogram buckets holding the 10th and "
             "50th percentile of what was left of each call's deadline when it reached the model. Sent "
             "late: the loadgens' p99 of how long after its due time a call was sent. Host CPU busy: "
             f"the share of the host's {os.cpu_count()} cores in use during the load; waiting for a core: "
             "seconds the server's and the loadgens' threads were ready to run but not running.", "",
             "| load | offered req/s | successful req/s | of capacity | p50 ms | p99 ms | refused or expired "
             "| deadline left at arrival p10 / p50 ms | sent late p99 ms | host CPU busy "
             "| waiting for a core, server / loadgens s |",
             "|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]

    def ms(bound):
        return "–" if bound is None else f"≤ {bound * 1000:g}"

    def share(value):
        return "–" if value is None else f"{value:.0%}"

    for run in runs:
        r, m = run["loadgen"], run["metrics"]
        errors = ", ".join(f"{code} {count:,}" for code, count in sorted(r["errors"].items())) or "none"
        lines.append(f"| {run['factor']}× | {run['offered_rps']:,.0f} | {r['requests_per_s']:,.0f} | "
                     f"{r['requests_per_s'] / capacity:.0%} | {fmt(r['latency_ms']['p50'])} | "
                     f"{fmt(r['latency_ms']['p99'])} | {errors} | "
                     f"{ms(m['deadline_left_at_arrival_s']['p10'])} / "
                     f"{ms(m['deadline_left_at_arrival_s']['p50'])} | "
                     f"{fmt((r.get('send_lag_ms') or {}).get('p99'))} | {share(m['host_cpu_busy_share'])} | "
                     f"{m['server_runqueue_s']:.2f} / {m['loadgen_runqueue_s']:.2f} |")
    with open(os.path.join(args.out, "overload.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    log("\n".join(lines))


if __name__ == "__main__":
    main()
