"""The real graphserve, started for tests that call it with Triton's own Python client.

ctest passes the paths through the environment (tests/integration/CMakeLists.txt, tritonclient_test):
  GRAPHSERVE_BINARY            the server
  GRAPHSERVE_TEST_REPOSITORY   the integration model repository (make_model_repository.py)
  GRAPHSERVE_TEST_OUTPUT       a folder for logs and repositories the tests build
  GRAPHSERVE_TEST_DEVICE       optional: the server's --device (default cpu; cuda on a GPU host)
Importing this module exits with 77 (ctest: skipped) where tritonclient[grpc] is not installed (the
CUDA host cannot download it); deploy/install-deps.sh installs it everywhere else. The process itself
is started and stopped by the benchmarks' launcher (deploy/bench/bench_support/server.py).
"""
import os
import pathlib
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "deploy" / "bench"))
from bench_support import metrics  # noqa: E402  (the tests read /metrics back with it too)
from bench_support.server import GraphserveProcess, StartError  # noqa: E402

try:
    import tritonclient.grpc as grpcclient  # noqa: F401  (re-exported for the tests)
    from tritonclient.utils import InferenceServerException  # noqa: F401
except ImportError as missing:
    print(f"SKIPPED: {missing}; deploy/install-deps.sh installs tritonclient[grpc]")
    sys.exit(77)

BINARY = os.environ.get("GRAPHSERVE_BINARY", "")
REPOSITORY = pathlib.Path(os.environ.get("GRAPHSERVE_TEST_REPOSITORY", ""))
OUTPUT = pathlib.Path(os.environ.get("GRAPHSERVE_TEST_OUTPUT", tempfile.gettempdir()))
DEVICE = os.environ.get("GRAPHSERVE_TEST_DEVICE", "cpu")
# Where the server says a model was loaded: a bare "cuda" is the first GPU.
SERVED_DEVICE = "cuda:0" if DEVICE == "cuda" else DEVICE


def infer_inputs(named_arrays, datatype="INT64", module=None):
    """tritonclient InferInputs from (name, numpy array) pairs, in order; `module` is the client's
    (tritonclient.http for its client; default tritonclient.grpc)."""
    tensors = []
    for name, array in named_arrays:
        tensor = (module or grpcclient).InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def masked_token_batch(rows, length, seed):
    """Random token ids [rows, length] (INT64) and their attention mask, the first row's second half
    masked out."""
    import numpy as np
    generator = np.random.default_rng(seed)
    ids = generator.integers(1, 999, size=(rows, length), dtype=np.int64)
    mask = np.ones((rows, length), dtype=np.int64)
    mask[0, length // 2:] = 0
    return ids, mask


def token_inputs(ids, mask, datatype="INT64", module=None):
    """input_ids and attention_mask, as the test models take them."""
    return infer_inputs((("input_ids", ids), ("attention_mask", mask)), datatype, module)


def status_of(call):
    """("OK", "") when call() succeeds, else the gRPC status and message it raised."""
    try:
        call()
    except InferenceServerException as error:
        return error.status(), error.message()
    return "OK", ""


def index_of(client):
    """RepositoryIndex as {model name: entry}."""
    return {model["name"]: model for model in client.get_model_repository_index(as_json=True).get("models", [])}


def scratch_dir(name):
    """An empty folder under the test output, for a repository a test writes."""
    path = OUTPUT / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def copy_model(name, destination, version=None):
    """Copies model `name` of the integration repository to destination/name, flat or, with
    `version`, in Triton's layout name/config.pbtxt + name/VERSION/model.* ."""
    source = REPOSITORY / name
    target = pathlib.Path(destination) / name
    if version is None:
        shutil.copytree(source, target)
        return target
    (target / str(version)).mkdir(parents=True)
    for item in source.iterdir():
        if item.name == "config.pbtxt":
            shutil.copy(item, target / item.name)
        elif item.is_dir():
            shutil.copytree(item, target / str(version) / item.name)
        else:
            shutil.copy(item, target / str(version) / item.name)
    return target


class Server:
    """graphserve on free ports (it binds port 0 and logs the ports it got). A context manager:
    started and ready on entry, stopped with SIGTERM on exit.

    default_addresses=False leaves the endpoints' addresses to `args` (tritonserver's --grpc-port,
    ...); `endpoints` names those the server is expected to log as listening (readiness is waited for
    over gRPC, so without "grpc" pass wait_ready=False); `env` adds to the server's environment;
    `binary` runs in place of GRAPHSERVE_BINARY (a wrapper that sets limits, then execs it)."""

    def __init__(self, *args, log_name="graphserve", ready_timeout_s=600, wait_ready=True,
                 default_addresses=True, endpoints=("grpc", "metrics", "http"), env=None, binary=None):
        if not BINARY:
            raise RuntimeError("GRAPHSERVE_BINARY is not set (run through ctest)")
        addresses = ["--grpc-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0",
                     "--http-address", "127.0.0.1:0"] if default_addresses else []
        self.args = [*addresses, "--device", DEVICE, *args]
        self.endpoints = tuple(endpoints)
        self.log_path = OUTPUT / f"{log_name}.log"
        self.ready_timeout_s = ready_timeout_s
        self.wait_ready = wait_ready
        self.env = env  # added to this process's environment for the server's
        self.binary = binary or BINARY
        self.graphserve = None  # the GraphserveProcess, from __enter__ on
        self.process = None  # its subprocess.Popen, for tests that signal or wait on it
        self.grpc_port = None
        self.metrics_port = None
        self.http_port = None

    @property
    def url(self):
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self):
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def http_url(self):
        return f"127.0.0.1:{self.http_port}"

    def client(self, **kwargs):
        return grpcclient.InferenceServerClient(self.url, **kwargs)

    def http_client(self, **kwargs):
        """Triton's HTTP/REST client (tritonclient[http]) on the REST endpoint."""
        import tritonclient.http as httpclient
        return httpclient.InferenceServerClient(self.http_url, **kwargs)

    def log(self):
        return self.graphserve.log() if self.graphserve else ""

    def metric_samples(self):
        """One scrape of /metrics as (name, labels, value) samples; metrics.values() picks series."""
        return metrics.samples(metrics.fetch(self.metrics_url, timeout_s=30))

    def __enter__(self):
        OUTPUT.mkdir(parents=True, exist_ok=True)
        self.graphserve = GraphserveProcess(self.binary, self.args, self.log_path, env=self.env)
        self.process = self.graphserve.process
        try:
            self._wait_for_ports()
            if self.wait_ready:
                self.wait_until(lambda client: client.is_server_ready(), self.ready_timeout_s,
                                "the server to turn ready")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        if self.graphserve:
            self.graphserve.stop(timeout_s=60)
        return False

    def _fail(self, what):
        raise AssertionError(f"{what}; graphserve log {self.log_path}:\n{self.log()[-4000:]}")

    def _wait_for_ports(self):
        try:
            ports = self.graphserve.listening_ports(self.endpoints, timeout_s=60)
        except StartError as error:
            self._fail(str(error))
        for key, port in ports.items():
            setattr(self, f"{key}_port", port)

    def wait_until(self, predicate, timeout_s, what):
        """Polls predicate(client) until it is true; fails naming `what` and showing the log."""
        deadline = time.monotonic() + timeout_s
        with self.client() as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    self._fail(f"graphserve exited with {self.process.returncode} waiting for {what}")
                try:
                    if predicate(client):
                        return
                except InferenceServerException:
                    pass
                time.sleep(0.05)
        self._fail(f"timed out after {timeout_s} s waiting for {what}")


class ServerTestCase(unittest.TestCase):
    """Tests that share one server: setUpClass calls start_server, and the class's last test leaves
    `server` and its `client` to be stopped and closed."""

    server = None
    client = None

    @classmethod
    def start_server(cls, *args, log_name):
        server = Server(*args, log_name=log_name)
        server.__enter__()
        cls.addClassCleanup(server.__exit__, None, None, None)
        cls.server = server
        cls.client = server.client()
        cls.addClassCleanup(cls.client.close)

    @classmethod
    def serve_model_copy(cls, model, log_name, *args):
        """Starts a server (with `args` added to its flags) on a copy of the integration repository's
        `model` alone, and loads the TorchScript file as `reference` for expected() to run in torch
        itself."""
        import torch
        model_dir = copy_model(model, scratch_dir(f"{log_name}_repository"))
        cls.reference = torch.jit.load(str(model_dir / "model.pt"))
        cls.start_server("--model-repository", str(model_dir.parent), *args, log_name=log_name)

    def expected(self, ids, mask):
        """The reference's (hidden, pooled) for a token batch, as numpy arrays."""
        import torch
        with torch.no_grad():
            hidden, pooled = self.reference(torch.from_numpy(ids), torch.from_numpy(mask))
        return hidden.numpy(), pooled.numpy()

    def assert_status(self, call, code, *fragments):
        """call() raises InferenceServerException with gRPC status `code` and a message holding
        every fragment; returns the message."""
        with self.assertRaises(InferenceServerException) as raised:
            call()
        self.assertEqual(raised.exception.status(), f"StatusCode.{code}", raised.exception.message())
        for fragment in fragments:
            self.assertIn(fragment, raised.exception.message())
        return raised.exception.message()

    def assert_http_error(self, call, status, *fragments):
        """call() through tritonclient.http raises InferenceServerException with HTTP `status` and a
        message holding every fragment; returns the message."""
        with self.assertRaises(InferenceServerException) as raised:
            call()
        self.assertEqual(raised.exception.status(), str(status), raised.exception.message())
        for fragment in fragments:
            self.assertIn(fragment, raised.exception.message())
        return raised.exception.message()
