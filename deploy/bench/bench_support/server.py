"""graphserve as a child process: the one launcher of the benchmarks and the Python tests.

GraphserveProcess starts the binary with its log in a file, learns the ports it bound from that log
and stops it with SIGTERM. Server is the benchmarks' one-model server on top of it: ready once the
model's series are in /metrics, scraped before and after each load, ending the benchmark on a
failure. one_model_server and the add_*_arguments helpers are the single-server benchmarks' common
setup (REST against gRPC, overload).
"""
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import time
import urllib.request

from .common import REPO, fail, log
from .metrics import MEASURED_INFER_KEY, parse_metrics
from .repository import base_model, with_instances, write_repository

# What graphserve logs (at info level) once an endpoint listens: the port it bound, also for :0.
PORT_LINES = {
    "grpc": re.compile(r"gRPC endpoint listening on \S+ \(port (\d+)\)"),
    "metrics": re.compile(r"metrics endpoint listening on \S+ \(port (\d+)\)"),
    "http": re.compile(r"REST endpoint listening on \S+ \(port (\d+)\)"),
}


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StartError(Exception):
    """graphserve exited, or did not say where it listens, while starting."""


class GraphserveProcess:
    """`binary` run with `args`, stdout and stderr in `log_path`; `env` adds to this process's
    environment. Started on construction; stop() ends it. Not thread-safe: one thread owns it."""

    def __init__(self, binary, args, log_path, env=None):
        self.log_path = pathlib.Path(log_path)
        self._log_file = open(self.log_path, "w")
        environment = None if env is None else {**os.environ, **env}
        self.process = subprocess.Popen([str(binary), *args], stdout=self._log_file,
                                        stderr=subprocess.STDOUT, env=environment)

    def running(self):
        return self.process.poll() is None

    def log(self):
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def listening_ports(self, endpoints=("grpc", "metrics", "http"), timeout_s=60):
        """{endpoint: port} once the log names the port of every one of `endpoints` ("grpc",
        "metrics", "http"); StartError when the process exits or `timeout_s` passes first."""
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.log()
            found = {endpoint: PORT_LINES[endpoint].search(text) for endpoint in endpoints}
            if all(found.values()):
                return {endpoint: int(match.group(1)) for endpoint, match in found.items()}
            if not self.running():
                raise StartError(f"graphserve exited with {self.process.returncode} before listening")
            if time.monotonic() > deadline:
                raise StartError(f"graphserve did not log its ports within {timeout_s:g} s")
            time.sleep(0.05)

    def stopped(self):
        """Whether stop() or kill() has run."""
        return self._log_file.closed

    def stop(self, timeout_s=60):
        """SIGTERM, and SIGKILL after `timeout_s` without an exit; the exit status (negative: the
        signal that ended it). Closes the log; a second call only returns the status."""
        if self.running():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()
        return self.process.returncode

    def kill(self):
        if self.running():
            self.process.kill()
            self.process.wait()
        self._log_file.close()


class Server(GraphserveProcess):
    """graphserve serving `repository` for the benchmarks, on free ports, with `args`'s --graphserve,
    --device, server_args and server_env. Not yet ready: wait_ready() first."""

    def __init__(self, args, repository, model, log_path):
        self.model = model
        self.grpc = f"127.0.0.1:{free_port()}"
        http_port = free_port()
        self.http = f"127.0.0.1:{http_port}"
        self.stats_url = f"http://127.0.0.1:{http_port}/v2/models/{model}/stats"
        self.metrics_url = f"http://127.0.0.1:{free_port()}/metrics"
        command = ["--model-repository", repository, "--device", args.device,
                   "--grpc-address", self.grpc, "--http-address", self.http,
                   "--metrics-address", self.metrics_url[len("http://"):-len("/metrics")],
                   "--log-level", "info", *getattr(args, "server_args", [])]
        env = dict(entry.split("=", 1) for entry in getattr(args, "server_env", []))
        super().__init__(args.graphserve, command, log_path, env)

    def wait_ready(self, timeout_s):
        # A model's series appear in /metrics once it has warmed up (docs/metrics.md).
        marker = f'graphserve_batches_total{{model="{self.model}"'
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if not self.running():
                self.fail(f"graphserve exited with status {self.process.returncode} while starting")
            try:
                with urllib.request.urlopen(self.metrics_url, timeout=2) as answer:
                    if marker in answer.read().decode():
                        return
            except OSError:
                pass
            time.sleep(0.25)
        self.fail(f"graphserve not ready after {timeout_s} s")

    def scrape(self, stats=False):
        """(time, /metrics series); with `stats`, also under MEASURED_INFER_KEY the executed batches'
        compute_infer time from the model's statistics (REST /stats): on a GPU each replay's own
        duration, timed with CUDA events, where /metrics only counts replays."""
        with urllib.request.urlopen(self.metrics_url, timeout=10) as answer:
            text = answer.read().decode()
        series = parse_metrics(text, self.model)
        if not stats:
            return time.time(), series
        try:
            with urllib.request.urlopen(self.stats_url, timeout=10) as answer:
                statistics = json.load(answer)
            series[MEASURED_INFER_KEY] = sum(batch["compute_infer"]["ns"] for model in statistics["model_stats"]
                                             for batch in model.get("batch_stats", [])) / 1e9
        except (OSError, ValueError, KeyError):
            pass  # no REST port, or statistics of another shape: the estimate alone
        return time.time(), series

    def stop(self, timeout_s=60):
        if self.stopped():
            return self.process.returncode  # already stopped, or killed by fail()
        status = super().stop(timeout_s)
        if status != 0:
            log(f"warning: graphserve exited with status {status}; log tail:\n" + self.log_tail(20))
        return status

    def fail(self, message):
        """Kills the server and ends the benchmark with `message` and the log's tail."""
        self.kill()
        fail(f"{message}; log {self.log_path}, its tail:\n{self.log_tail()}")


def add_server_arguments(parser):
    """The single-server benchmarks' flags for the build, the output and the model."""
    parser.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="bert_base_bf16")
    parser.add_argument("--bert-repo")
    parser.add_argument("--device", default="cuda")


def add_load_arguments(parser):
    """The single-server benchmarks' flags for graphserve-loadgen and the server's start."""
    cpus = os.cpu_count() or 4
    parser.add_argument("--loadgen-threads", type=int, default=max(1, min(4, cpus // 4)))
    parser.add_argument("--connections", type=int, default=max(1, min(8, cpus // 4)))
    parser.add_argument("--start-timeout-s", type=float, default=240)
    parser.add_argument("--loadgen-arg", dest="loadgen_args", action="append", default=[],
                        help="a flag for every graphserve-loadgen run (repeatable), "
                             "e.g. --loadgen-arg=--grpc-executor-offload")


def resolve_paths(args):
    """Absolute --out and BERT repository, and the binaries of --build-dir (or --server-binary);
    returns the build folder."""
    args.out = os.path.abspath(args.out)
    args.bert_repo = os.path.abspath(args.bert_repo or os.path.join(args.out, "bert_repository"))
    build = os.path.abspath(args.build_dir)
    args.graphserve = os.path.abspath(getattr(args, "server_binary", None)
                                      or os.path.join(build, "server", "graphserve"))
    args.loadgen = os.path.join(build, "client", "graphserve-loadgen")
    return build


def one_model_server(args):
    """The server of the single-server benchmarks (REST against gRPC, overload): --model's default
    config in a repository under --out (its limits cut where the benchmark has --max-batch-size /
    --max-sequence-length), BERT exported first when missing. Not yet ready."""
    # What the repository helpers read, left at the model's own settings.
    args.instance_devices = ""
    args.max_batch_size = getattr(args, "max_batch_size", None)
    args.max_sequence_length = getattr(args, "max_sequence_length", None)
    resolve_paths(args)
    for sub in ("raw", "logs"):
        os.makedirs(os.path.join(args.out, sub), exist_ok=True)
    base, weights = base_model(args, args.model)
    # Under the name of e2e_benchmark.py's mode a, the default config.
    repository = write_repository(args, args.model, "a", with_instances(args, base), weights)
    return Server(args, repository, args.model, os.path.join(args.out, "logs", "server.log"))
