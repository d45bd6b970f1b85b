#!/usr/bin/env python3
"""tritonserver's command line against the real graphserve, through Triton's own client: ports,
--model-store, --log-verbose and --exit-on-error=false over a repository holding one good and two
broken models (the good one serves, both broken ones are reported with their reasons, and strict
readiness keeps the server unready), --exit-on-error's default exit naming every broken model,
--model-control-mode poll picking up a model added, edited and removed after start, --allow-grpc
false serving over REST alone, and the refusals of flags graphserve cannot honour."""
import os
import shutil
import socket
import subprocess
import time
import unittest
import urllib.request

import numpy as np

import server_fixture
from server_fixture import index_of, status_of

GOOD = "tiny_traced"
ADDED = "tiny_scripted"
BROKEN = ("bad_config", "bad_file")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def request():
    ids = np.arange(1, 7, dtype=np.int64).reshape(1, 6)
    return server_fixture.token_inputs(ids, np.ones_like(ids))


def write_broken_model(repository, name):
    """bad_config: a config graphserve refuses; bad_file: a good config over a model file libtorch
    cannot read."""
    if name == "bad_config":
        (repository / name).mkdir()
        (repository / name / "config.pbtxt").write_text(f'name: "{name}"\nmax_batch_size: 0\n')
        return
    model = shutil.copytree(server_fixture.REPOSITORY / GOOD, repository / name)
    config = model / "config.pbtxt"
    config.write_text(config.read_text().replace(f'"{GOOD}"', f'"{name}"'))
    (model / "model.pt").write_bytes(b"not a zip archive")


def repository_with_broken_models(name):
    repository = server_fixture.scratch_dir(name)
    server_fixture.copy_model(GOOD, repository)
    for broken in BROKEN:
        write_broken_model(repository, broken)
    return repository


def replace_file(path, text):
    """Rewrites `path` at once (a rename), so that a poll never reads it half written."""
    staged = path.with_name("." + path.name + ".new")
    staged.write_text(text)
    os.replace(staged, path)


class ExitOnErrorTest(unittest.TestCase):
    def test_tritonserver_flags_serve_the_good_model_and_report_every_bad_one(self):
        repository = repository_with_broken_models("exit_on_error_false_repository")
        grpc_port, http_port, metrics_port = free_port(), free_port(), free_port()
        with server_fixture.Server("--model-store", str(repository), "--grpc-port", str(grpc_port),
                                   "--http-port", str(http_port), "--metrics-port", str(metrics_port),
                                   "--log-verbose", "1", "--exit-on-error=false",
                                   default_addresses=False, wait_ready=False,
                                   log_name="exit_on_error_false") as server, server.client() as client:
            self.assertEqual((server.grpc_port, server.http_port, server.metrics_port),
                             (grpc_port, http_port, metrics_port))
            server.wait_until(lambda c: c.is_model_ready(GOOD), 120, f"{GOOD} to serve")
            self.assertEqual(client.infer(GOOD, request()).as_numpy("projected").shape, (1, 6, 4))
            index = index_of(client)
            self.assertEqual(index[GOOD]["state"], "READY")
            for name, reason in (("bad_config", "platform: missing"), ("bad_file", "load error")):
                self.assertEqual(index[name]["state"], "UNAVAILABLE", index[name])
                self.assertIn(reason, index[name].get("reason", ""))
                self.assertNotIn(str(repository), index[name].get("reason", ""))
            # Triton's --strict-readiness (true by default): not ready while a model failed, on both
            # bindings, though the good model serves.
            self.assertFalse(client.is_server_ready())
            with server.http_client() as http:
                self.assertFalse(http.is_server_ready())
                self.assertTrue(http.is_model_ready(GOOD))
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as scrape:
                self.assertIn("nv_inference_request_success", scrape.read().decode())
            log = server.log()
            self.assertIn("2 of 3 model(s) failed to load", log)
            for name in BROKEN:
                self.assertIn(f"model '{name}' failed to load", log)
            self.assertRegex(log, r"(?m) debug \[\d+\] ")  # --log-verbose 1 is the debug level

    def test_without_strict_readiness_the_server_is_ready_beside_broken_models(self):
        repository = repository_with_broken_models("strict_readiness_false_repository")
        with server_fixture.Server("--model-repository", str(repository), "--exit-on-error", "false",
                                   "--strict-readiness", "false", log_name="strict_readiness_false") as server, \
                server.client() as client:
            self.assertTrue(client.is_server_ready())
            self.assertTrue(client.is_model_ready(GOOD))
            self.assertFalse(client.is_model_ready("bad_file"))

    def test_by_default_a_broken_model_stops_the_server_naming_every_one(self):
        repository = repository_with_broken_models("exit_on_error_repository")
        done = subprocess.run([server_fixture.BINARY, "--model-repository", str(repository),
                               "--grpc-address", "127.0.0.1:0", "--http-address", "",
                               "--metrics-address", "127.0.0.1:0", "--device", server_fixture.DEVICE],
                              capture_output=True, text=True, timeout=300)
        output = done.stdout + done.stderr
        self.assertEqual(done.returncode, 3, output)  # a bad model repository (docs/running.md, "Exit status")
        self.assertIn("2 of 3 model(s) failed to load", output)
        for name in BROKEN:
            self.assertIn(f"model '{name}'", output)
        self.assertIn("--exit-on-error=false serves the others", output)


class BadUsageTest(unittest.TestCase):
    def run_server(self, *args):
        done = subprocess.run([server_fixture.BINARY, *args], capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout + done.stderr

    def test_flags_graphserve_cannot_honour_or_that_disagree_exit_2_naming_them(self):
        for args, message in (
                (("--rate-limit", "execution_count"), "--rate-limit execution_count: tritonserver's flag is not"),
                (("--grpc-use-ssl", "true"), "--tls-cert-file"),
                (("--model-store", "/a", "--model-repository", "/b"), "--model-store /a and --model-repository /b"),
                (("--grpc-address", "127.0.0.1:8001", "--grpc-port", "9001"), "disagree"),
                (("--repository-poll-secs", "5"), "only with --model-control-mode poll")):
            code, output = self.run_server(*args)
            self.assertEqual(code, 2, output)
            self.assertIn(message, output)


class PollModeTest(unittest.TestCase):
    def test_models_added_edited_and_removed_after_start(self):
        repository = server_fixture.scratch_dir("poll_repository")
        staging = server_fixture.scratch_dir("poll_staging")
        server_fixture.copy_model(GOOD, repository)
        with server_fixture.Server("--model-repository", str(repository), "--model-control-mode", "poll",
                                   "--repository-poll-secs", "1", log_name="poll_mode") as server, \
                server.client() as client:
            code, message = status_of(lambda: client.load_model(GOOD))
            self.assertEqual(code, "StatusCode.FAILED_PRECONDITION", message)
            self.assertIn("'poll'", message)

            # Added: copied aside, then moved in whole.
            os.rename(server_fixture.copy_model(ADDED, staging), repository / ADDED)
            server.wait_until(lambda c: c.is_model_ready(ADDED), 60, f"{ADDED} to be loaded")
            self.assertEqual(client.infer(ADDED, request()).as_numpy("pooled").shape, (1, 16))

            # Edited: the new config is served after a reload.
            config = repository / GOOD / "config.pbtxt"
            replace_file(config, config.read_text() + "dynamic_batching { max_queue_delay_microseconds: 1234 }\n")
            server.wait_until(
                lambda c: c.get_model_config(GOOD).config.dynamic_batching.max_queue_delay_microseconds == 1234,
                60, f"{GOOD} to be reloaded with its new config")
            self.assertTrue(client.is_model_ready(GOOD))

            # Removed: unloaded and gone from the index.
            os.rename(repository / ADDED, staging / "removed")
            server.wait_until(lambda c: ADDED not in index_of(c), 60, f"{ADDED} to leave the index")
            code, message = status_of(lambda: client.infer(ADDED, request()))
            self.assertEqual(code, "StatusCode.NOT_FOUND", message)

            # A broken model keeps the server unready (strict readiness) until it is mended.
            self.assertTrue(client.is_server_ready())
            write_broken_model(staging, "bad_config")
            os.rename(staging / "bad_config", repository / "bad_config")
            server.wait_until(lambda c: index_of(c).get("bad_config", {}).get("state") == "UNAVAILABLE", 60,
                              "bad_config to fail")
            self.assertFalse(client.is_server_ready())
            self.assertTrue(client.is_model_ready(GOOD))
            shutil.rmtree(repository / "bad_config")
            server.wait_until(lambda c: c.is_server_ready(), 60, "readiness once bad_config is gone")
        log = server.log()
        self.assertIn(f"model '{ADDED}' appeared in the repository", log)
        self.assertIn(f"model '{GOOD}' changed in the repository", log)
        self.assertIn(f"model '{ADDED}' left the repository", log)


class EndpointOffTest(unittest.TestCase):
    def test_allow_grpc_false_serves_over_rest_alone(self):
        import tritonclient.http as httpclient  # as server_fixture.Server.http_client does
        repository = server_fixture.scratch_dir("grpc_off_repository")
        server_fixture.copy_model(GOOD, repository)
        with server_fixture.Server("--model-repository", str(repository), "--allow-grpc", "false",
                                   "--http-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0",
                                   default_addresses=False, wait_ready=False, endpoints=("http", "metrics"),
                                   log_name="grpc_off") as server, server.http_client() as http:
            deadline = time.monotonic() + 120
            while not http.is_server_ready():
                self.assertIsNone(server.process.poll(), server.log()[-2000:])
                self.assertLess(time.monotonic(), deadline, "not ready over REST: " + server.log()[-2000:])
                time.sleep(0.05)
            ids = np.arange(1, 7, dtype=np.int64).reshape(1, 6)
            tensors = []
            for name, array in (("input_ids", ids), ("attention_mask", np.ones_like(ids))):
                tensor = httpclient.InferInput(name, list(array.shape), "INT64")
                tensor.set_data_from_numpy(array)
                tensors.append(tensor)
            self.assertEqual(http.infer(GOOD, tensors).as_numpy("projected").shape, (1, 6, 4))
            log = server.log()
            self.assertIn("gRPC endpoint off", log)
            self.assertNotIn("gRPC endpoint listening", log)


if __name__ == "__main__":
    unittest.main()
