#!/usr/bin/env python3
"""Triton's model repository API and versioned layout through Triton's own client (unmodified):
RepositoryIndex, RepositoryModelLoad/Unload under --model-control-mode explicit, per-model and
per-version readiness, a load that warms up in the background while another model serves, a reload
that swaps versions under continuous traffic without failing a request, an unload that answers what
reached the model first, and the refusals (mode none, unknown folders, unsupported parameters, a
broken config) with their status codes."""
import re
import shutil
import subprocess
import threading
import time
import unittest

import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc

import server_fixture
from server_fixture import InferenceServerException, index_of, status_of

SCRIPTED = "tiny_scripted"  # Triton layout, versions 1 and 2
TRACED = "tiny_traced"      # flat layout: version "1"
ENCODER = "encoder"         # slow enough to load that its LOADING state is seen


def request_for(model, rows=1, length=6, seed=0):
    ids = np.random.default_rng(seed).integers(1, 999, size=(rows, length), dtype=np.int64)
    return server_fixture.token_inputs(ids, np.ones_like(ids))


class VersionedRepositoryTest(server_fixture.ServerTestCase):
    """Explicit mode over a repository mixing Triton's versioned layout and the flat one."""

    @classmethod
    def setUpClass(cls):
        cls.repository = server_fixture.scratch_dir("versioned_repository")
        server_fixture.copy_model(SCRIPTED, cls.repository, version=1)
        shutil.copytree(cls.repository / SCRIPTED / "1", cls.repository / SCRIPTED / "2")
        (cls.repository / SCRIPTED / "not_a_version").mkdir()
        server_fixture.copy_model(TRACED, cls.repository)
        server_fixture.copy_model(ENCODER, cls.repository)
        cls.start_server("--model-repository", str(cls.repository), "--model-control-mode", "explicit",
                         "--load-model", SCRIPTED, log_name="repository_explicit")

    def test_latest_version_is_served_and_others_are_not(self):
        self.assertTrue(self.client.is_model_ready(SCRIPTED))
        self.assertTrue(self.client.is_model_ready(SCRIPTED, "2"))
        self.assertFalse(self.client.is_model_ready(SCRIPTED, "1"))
        self.assertEqual(self.client.get_model_metadata(SCRIPTED, as_json=True)["versions"], ["2"])
        result = self.client.infer(SCRIPTED, request_for(SCRIPTED))
        self.assertEqual(result.get_response().model_version, "2")
        self.assertEqual(self.client.infer(SCRIPTED, request_for(SCRIPTED), model_version="2")
                         .get_response().model_version, "2")
        for call in (lambda: self.client.infer(SCRIPTED, request_for(SCRIPTED), model_version="1"),
                     lambda: self.client.infer(SCRIPTED, request_for(SCRIPTED), model_version="7"),
                     lambda: self.client.get_model_metadata(SCRIPTED, model_version="7")):
            code, message = status_of(call)
            self.assertEqual(code, "StatusCode.NOT_FOUND", message)
            self.assertIn("version", message)

    def test_index_lists_every_folder_with_its_state(self):
        index = index_of(self.client)
        self.assertEqual(index[SCRIPTED]["state"], "READY")
        self.assertEqual(index[SCRIPTED]["version"], "2")
        self.assertIn(TRACED, index)
        # A folder never loaded has no state; one unloaded (by an earlier test) is UNAVAILABLE.
        self.assertIn(index[ENCODER].get("state", ""), ("", "UNAVAILABLE"))

    def test_load_infer_unload_a_flat_model(self):
        code, _ = status_of(lambda: self.client.infer(TRACED, request_for(TRACED)))
        self.assertIn(code, ("StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE"))
        self.client.load_model(TRACED)
        self.assertTrue(self.client.is_model_ready(TRACED, "1"))
        self.assertEqual(index_of(self.client)[TRACED]["state"], "READY")
        self.assertEqual(self.client.infer(TRACED, request_for(TRACED)).as_numpy("projected").shape[0], 1)
        self.client.unload_model(TRACED)
        self.assertFalse(self.client.is_model_ready(TRACED))
        self.assertEqual(index_of(self.client)[TRACED]["state"], "UNAVAILABLE")
        code, message = status_of(lambda: self.client.infer(TRACED, request_for(TRACED)))
        self.assertEqual(code, "StatusCode.NOT_FOUND", message)
        self.assertIn(TRACED, message)
        # Unloading what is not loaded is not an error, as in Triton.
        self.client.unload_model(TRACED)

    def test_a_load_warms_up_in_the_background_while_another_model_serves(self):
        seen_states = set()
        answered_while_loading = 0
        done = threading.Event()

        def load():
            self.client.load_model(ENCODER)
            done.set()

        loader = threading.Thread(target=load)
        loader.start()
        with self.server.client() as other:
            while not done.is_set():
                seen_states.add(index_of(other).get(ENCODER, {}).get("state", ""))
                if index_of(other).get(ENCODER, {}).get("state") == "LOADING":
                    other.infer(SCRIPTED, request_for(SCRIPTED))
                    answered_while_loading += 1
        loader.join()
        self.assertIn("LOADING", seen_states)
        self.assertGreater(answered_while_loading, 0)
        self.assertTrue(self.client.is_model_ready(ENCODER))
        self.client.unload_model(ENCODER)

    def test_reload_swaps_versions_without_failing_a_request(self):
        self.client.load_model(TRACED)  # a second model, served throughout
        failures, versions = [], []
        stop = threading.Event()

        def traffic(seed):
            with self.server.client() as client:
                i = 0
                while not stop.is_set():
                    i += 1
                    try:
                        result = client.infer(SCRIPTED, request_for(SCRIPTED, rows=1 + i % 3, length=3 + i % 20,
                                                                     seed=seed * 1000 + i))
                        versions.append(result.get_response().model_version)
                    except InferenceServerException as error:
                        failures.append(f"{error.status()}: {error.message()}")

        threads = [threading.Thread(target=traffic, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        shutil.copytree(self.repository / SCRIPTED / "2", self.repository / SCRIPTED / "3")
        try:
            self.client.load_model(SCRIPTED)
            time.sleep(0.5)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
            shutil.rmtree(self.repository / SCRIPTED / "3")
        self.assertEqual(failures, [])
        self.assertIn("2", versions)
        self.assertEqual(versions[-1], "3")
        self.assertTrue(self.client.is_model_ready(SCRIPTED, "3"))
        self.assertFalse(self.client.is_model_ready(SCRIPTED, "2"))
        self.client.load_model(SCRIPTED)  # back to version 2 for the other tests
        self.assertTrue(self.client.is_model_ready(SCRIPTED, "2"))

    def test_unload_answers_what_reached_the_model(self):
        self.client.load_model(TRACED)
        results = []
        lock = threading.Lock()

        def record(result, error):
            with lock:
                results.append("OK" if error is None else error.status())

        for i in range(64):
            self.client.async_infer(TRACED, request_for(TRACED, rows=1 + i % 4, length=4 + i % 28, seed=i),
                                    callback=record)
        self.client.unload_model(TRACED)
        deadline = time.monotonic() + 60
        while len(results) < 64 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(len(results), 64)
        # Every request either reached the model and was answered, or arrived after the unload began.
        self.assertTrue(set(results) <= {"OK", "StatusCode.NOT_FOUND", "StatusCode.UNAVAILABLE"}, results)
        self.assertIn("OK", results)

    def test_a_stream_whose_client_reads_nothing_does_not_hold_up_an_unload(self):
        # A request held its model until its answer was written; with a client that stops reading,
        # flow control stalls the writes and the unload (and every later load) waited forever.
        self.client.load_model(ENCODER)
        ids = np.ones((8, 64), dtype=np.int64).tobytes()
        request = service_pb2.ModelInferRequest(model_name=ENCODER)
        for name in ("input_ids", "attention_mask"):
            request.inputs.add(name=name, datatype="INT64", shape=[8, 64])
            request.raw_input_contents.append(ids)
        count = 60  # half a megabyte of last_hidden_state each: far beyond the stream's window
        stop = threading.Event()

        def requests():
            for _ in range(count):
                yield request
            stop.wait(120)

        channel = grpc.insecure_channel(self.server.url)
        responses = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(requests())
        try:
            self.server.wait_until(
                lambda client: int(client.get_inference_statistics(ENCODER, as_json=True)["model_stats"][0]
                                   .get("inference_stats", {}).get("success", {}).get("count", "0")) >= count,
                60, "the stream's requests answered")
            unloader = threading.Thread(target=self.client.unload_model, args=(ENCODER,))
            unloader.start()
            unloader.join(30)
            self.assertFalse(unloader.is_alive(), "the unload waits for a stream that reads nothing")
            self.assertEqual(index_of(self.client)[ENCODER]["state"], "UNAVAILABLE")
        finally:
            stop.set()
            responses.cancel()
            channel.close()

    def test_a_model_added_later_with_larger_requests_than_the_server_takes_is_refused(self):
        # The request limit is fixed at start-up from the models then in the repository; one added
        # later loaded and then answered its valid requests RESOURCE_EXHAUSTED.
        late = self.repository / "late_long"
        shutil.copytree(self.repository / TRACED, late)
        config = (late / "config.pbtxt").read_text().replace(f'"{TRACED}"', '"late_long"')
        (late / "config.pbtxt").write_text(config.replace("max_sequence_length: 64", "max_sequence_length: 300000"))
        code, message = status_of(lambda: self.client.load_model("late_long"))
        self.assertEqual(code, "StatusCode.RESOURCE_EXHAUSTED", message)
        self.assertIn("model 'late_long': its largest request comes to 38400000 bytes", message)
        self.assertIn("--max-request-bytes", message)
        self.assertEqual(index_of(self.client)["late_long"]["state"], "UNAVAILABLE")

    def test_refusals_name_what_is_wrong(self):
        code, message = status_of(lambda: self.client.load_model("no_such_model"))
        self.assertEqual(code, "StatusCode.NOT_FOUND", message)
        self.assertIn("no_such_model", message)
        code, message = status_of(lambda: self.client.load_model("../escape"))
        self.assertEqual(code, "StatusCode.INVALID_ARGUMENT", message)
        code, message = status_of(lambda: self.client.load_model(TRACED, config='{"max_batch_size": 2}'))
        self.assertEqual(code, "StatusCode.INVALID_ARGUMENT", message)
        self.assertIn("parameters['config']", message)

    def test_a_broken_model_fails_to_load_without_leaking_paths(self):
        broken = self.repository / "broken"
        broken.mkdir(exist_ok=True)
        (broken / "config.pbtxt").write_text('name: "broken"\nmax_batch_size: 0\n')
        code, message = status_of(lambda: self.client.load_model("broken"))
        self.assertEqual(code, "StatusCode.INVALID_ARGUMENT", message)
        self.assertIn("broken", message)
        self.assertNotIn(str(self.repository), message)
        entry = index_of(self.client)["broken"]
        self.assertEqual(entry["state"], "UNAVAILABLE")
        self.assertNotIn(str(self.repository), entry.get("reason", ""))
        self.assertTrue(self.client.is_model_ready(SCRIPTED))  # the others keep serving
        # A model file libtorch cannot read: its complaint stays in the log, the caller gets a number.
        garbled = self.repository / "garbled"
        shutil.copytree(self.repository / TRACED, garbled, dirs_exist_ok=True)
        config = garbled / "config.pbtxt"
        config.write_text(config.read_text().replace(f'"{TRACED}"', '"garbled"'))
        (garbled / "model.pt").write_bytes(b"not a zip archive")
        code, message = status_of(lambda: self.client.load_model("garbled"))
        self.assertEqual(code, "StatusCode.INVALID_ARGUMENT", message)
        self.assertRegex(message, rf"model 'garbled' failed to load on {re.escape(server_fixture.SERVED_DEVICE)} "
                                  r"\(load error \d+ in the server log\)")
        self.assertNotIn("zip", message.lower())
        self.assertIn("zip", self.server.log().lower())
        self.assertNotIn("zip", index_of(self.client)["garbled"].get("reason", "").lower())


class NoneModeTest(unittest.TestCase):
    def test_every_model_is_loaded_and_control_is_refused(self):
        repository = server_fixture.scratch_dir("none_mode_repository")
        server_fixture.copy_model(SCRIPTED, repository, version=4)
        server_fixture.copy_model(TRACED, repository)
        # version_policy.specific names the one version to serve, though a higher one is there.
        pinned = server_fixture.copy_model(SCRIPTED, repository / "pinned_parent", version=1)
        pinned = pinned.rename(repository / "pinned")
        shutil.copytree(pinned / "1", pinned / "2")
        config = (pinned / "config.pbtxt").read_text().replace(f'name: "{SCRIPTED}"', 'name: "pinned"')
        (pinned / "config.pbtxt").write_text(config + "version_policy { specific { versions: [ 1 ] } }\n")
        (repository / "pinned_parent").rmdir()
        with server_fixture.Server("--model-repository", str(repository), log_name="repository_none") as server, \
                server.client() as client:
            self.assertTrue(client.is_model_ready(SCRIPTED, "4"))
            self.assertTrue(client.is_model_ready(TRACED, "1"))
            self.assertTrue(client.is_model_ready("pinned", "1"))
            self.assertFalse(client.is_model_ready("pinned", "2"))
            self.assertEqual({name: entry["state"] for name, entry in index_of(client).items()},
                             {SCRIPTED: "READY", TRACED: "READY", "pinned": "READY"})
            for call in (lambda: client.load_model(TRACED), lambda: client.unload_model(TRACED)):
                code, message = status_of(call)
                self.assertEqual(code, "StatusCode.FAILED_PRECONDITION", message)
                self.assertIn("--model-control-mode explicit", message)
            self.assertTrue(client.is_model_ready(TRACED))

    def test_load_model_without_a_repository_is_refused(self):
        # It served the built-in encoder and said nothing of the model asked for.
        done = subprocess.run([server_fixture.BINARY, "--grpc-address", "127.0.0.1:0", "--http-address", "",
                               "--metrics-address", "127.0.0.1:0", "--device", "cpu", "--load-model", "foo"],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 2, done.stdout + done.stderr)  # bad usage, before any port opens
        self.assertIn("--load-model: only with --model-repository", done.stdout + done.stderr)
        self.assertNotIn("listening", done.stdout + done.stderr)


if __name__ == "__main__":
    unittest.main()
