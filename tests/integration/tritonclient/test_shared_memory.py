#!/usr/bin/env python3
"""Triton's system shared-memory extension through Triton's own clients and their shared-memory
utilities (tritonclient.utils.shared_memory), unmodified: regions the client creates and registers,
inputs read from and outputs written into them over gRPC and HTTP, answers equal to an inference that
carries its tensors, status and unregister, the refusals (each naming what is wrong, the server
serving on), the region cap from its flag, and CUDA shared memory refused cleanly on a server that runs
on the CPU. perf_analyzer --shared-memory system is in test_perf_analyzer.py; CUDA shared memory on a
GPU is in test_cuda_shared_memory.py."""
import base64
import os
import unittest

import numpy as np

import server_fixture
from server_fixture import InferenceServerException, grpcclient

try:
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as shm
except ImportError as missing:
    print(f"SKIPPED: {missing}; deploy/install-deps.sh installs tritonclient[all]")
    raise SystemExit(77)

MODEL = "tiny_scripted"  # hidden [B, L, 16] and pooled [B, 16], FP32


class SharedMemoryTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.serve_model_copy(MODEL, log_name="shared_memory")
        cls.http = cls.server.http_client()
        cls.addClassCleanup(cls.http.close)

    def setUp(self):
        # As Triton's examples begin: nothing left registered, system or CUDA.
        self.client.unregister_system_shared_memory()
        self.client.unregister_cuda_shared_memory()

    def tearDown(self):
        self.client.unregister_system_shared_memory()

    def region(self, name, byte_size):
        """A system shared-memory region the client creates (destroyed after the test) and its key."""
        key = f"/graphserve_{name}_{os.getpid()}"
        handle = shm.create_shared_memory_region(name, key, byte_size)
        self.addCleanup(shm.destroy_shared_memory_region, handle)
        return handle, key

    def test_inputs_and_outputs_in_shared_memory_answer_as_tensors_in_the_request(self):
        for module, client, rows, length in ((grpcclient, self.client, 2, 7), (httpclient, self.http, 3, 12)):
            with self.subTest(client=module.__name__):
                ids, mask = server_fixture.masked_token_batch(rows, length, seed=rows)
                hidden_bytes, pooled_bytes = rows * length * 16 * 4, rows * 16 * 4
                # Both inputs in one region, the second at an offset; both outputs in another.
                inputs_region, inputs_key = self.region(f"in_{rows}", ids.nbytes + mask.nbytes)
                shm.set_shared_memory_region(inputs_region, [ids, mask])
                outputs_region, outputs_key = self.region(f"out_{rows}", hidden_bytes + pooled_bytes)
                client.register_system_shared_memory(f"in_{rows}", inputs_key, ids.nbytes + mask.nbytes)
                client.register_system_shared_memory(f"out_{rows}", outputs_key, hidden_bytes + pooled_bytes)

                inputs = [module.InferInput("input_ids", list(ids.shape), "INT64"),
                          module.InferInput("attention_mask", list(mask.shape), "INT64")]
                inputs[0].set_shared_memory(f"in_{rows}", ids.nbytes)
                inputs[1].set_shared_memory(f"in_{rows}", mask.nbytes, offset=ids.nbytes)
                outputs = [module.InferRequestedOutput("hidden"), module.InferRequestedOutput("pooled")]
                outputs[0].set_shared_memory(f"out_{rows}", hidden_bytes)
                outputs[1].set_shared_memory(f"out_{rows}", pooled_bytes, offset=hidden_bytes)
                result = client.infer(MODEL, inputs, outputs=outputs)

                pooled_output = result.get_output("pooled")
                if module is grpcclient:
                    parameters = pooled_output.parameters
                    self.assertEqual(parameters["shared_memory_region"].string_param, f"out_{rows}")
                    self.assertEqual(parameters["shared_memory_offset"].int64_param, hidden_bytes)
                    self.assertEqual(list(pooled_output.shape), [rows, 16])
                else:  # as Triton answers: no data, and no parameters (its C++ client reads them as binary's)
                    self.assertEqual(pooled_output, {"name": "pooled", "datatype": "FP32", "shape": [rows, 16]})
                hidden = shm.get_contents_as_numpy(outputs_region, np.float32, [rows, length, 16])
                pooled = shm.get_contents_as_numpy(outputs_region, np.float32, [rows, 16], offset=hidden_bytes)

                carried = self.client.infer(MODEL, server_fixture.token_inputs(ids, mask))
                np.testing.assert_allclose(hidden, carried.as_numpy("hidden"), rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(pooled, carried.as_numpy("pooled"), rtol=1e-5, atol=1e-6)
                expected_hidden, expected_pooled = self.expected(ids, mask)
                np.testing.assert_allclose(pooled, expected_pooled, rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(hidden, expected_hidden, rtol=1e-4, atol=1e-5)

    def test_tensors_in_the_request_and_in_shared_memory_mix(self):
        ids, mask = server_fixture.masked_token_batch(1, 9, seed=5)
        ids_region, ids_key = self.region("ids", ids.nbytes)
        shm.set_shared_memory_region(ids_region, [ids])
        self.client.register_system_shared_memory("ids", ids_key, ids.nbytes)
        expected_hidden, expected_pooled = self.expected(ids, mask)
        for module, client in ((grpcclient, self.client), (httpclient, self.http)):
            with self.subTest(client=module.__name__):
                # input_ids from the region, attention_mask in the request, outputs in the answer.
                inputs = server_fixture.token_inputs(ids, mask) if module is grpcclient else [
                    httpclient.InferInput("input_ids", list(ids.shape), "INT64"),
                    httpclient.InferInput("attention_mask", list(mask.shape), "INT64")]
                inputs[0].set_shared_memory("ids", ids.nbytes)
                inputs[1].set_data_from_numpy(mask)
                result = client.infer(MODEL, inputs)
                np.testing.assert_allclose(result.as_numpy("pooled"), expected_pooled, rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(result.as_numpy("hidden"), expected_hidden, rtol=1e-4, atol=1e-5)

    def test_status_and_unregister(self):
        _, key = self.region("status", 4096)
        self.assertEqual(self.client.get_system_shared_memory_status(as_json=True), {})
        self.assertEqual(self.http.get_system_shared_memory_status(), [])
        self.client.register_system_shared_memory("a", key, 1024)
        self.http.register_system_shared_memory("b", key, 1000, offset=3000)
        regions = self.client.get_system_shared_memory_status(as_json=True)["regions"]
        self.assertEqual(regions["b"], {"name": "b", "key": key, "offset": "3000", "byte_size": "1000"})
        self.assertEqual(set(regions), {"a", "b"})
        self.assertEqual(self.http.get_system_shared_memory_status(),
                         [{"name": "a", "key": key, "offset": 0, "byte_size": 1024},
                          {"name": "b", "key": key, "offset": 3000, "byte_size": 1000}])
        self.assertEqual(self.http.get_system_shared_memory_status("a"),
                         [{"name": "a", "key": key, "offset": 0, "byte_size": 1024}])
        self.assertIn("system_shared_memory", self.http.get_server_metadata()["extensions"])

        self.http.unregister_system_shared_memory("a")
        self.client.unregister_system_shared_memory("never_registered")
        self.assertEqual(list(self.client.get_system_shared_memory_status(as_json=True)["regions"]), ["b"])
        self.assert_status(lambda: self.client.get_system_shared_memory_status("a"), "NOT_FOUND", "'a'")
        self.assert_http_error(lambda: self.http.get_system_shared_memory_status("a"), 404, "'a'")
        self.http.unregister_system_shared_memory()
        self.assertEqual(self.http.get_system_shared_memory_status(), [])

    def test_refusals_name_what_is_wrong_and_the_server_serves_on(self):
        region, key = self.region("refusals", 4096)
        missing_key = f"/graphserve_missing_{os.getpid()}"
        self.assert_status(lambda: self.client.register_system_shared_memory("r", missing_key, 64),
                           "NOT_FOUND", "no shared-memory object")
        self.assert_http_error(lambda: self.http.register_system_shared_memory("r", missing_key, 64), 404,
                               "no shared-memory object")
        # Keys are POSIX shared-memory names: nothing outside /dev/shm is reachable.
        self.assert_status(lambda: self.client.register_system_shared_memory("r", "/../etc/passwd", 64),
                           "INVALID_ARGUMENT", "key:", "second '/'")
        self.assert_http_error(lambda: self.http.register_system_shared_memory("r", "etc_passwd", 64), 400,
                               "key:", "not starting with '/'")
        self.assert_status(lambda: self.client.register_system_shared_memory("r", key, 4096, offset=1),
                           "INVALID_ARGUMENT", "pass the end of object")
        self.client.register_system_shared_memory("r", key, 4096)
        self.assert_status(lambda: self.client.register_system_shared_memory("r", key, 64), "ALREADY_EXISTS",
                           "'r' is already registered")
        self.assert_http_error(lambda: self.http.register_system_shared_memory("r", key, 64), 400,
                               "'r' is already registered")

        ids, mask = server_fixture.masked_token_batch(1, 4, seed=9)
        shm.set_shared_memory_region(region, [ids, mask])

        def shared_inputs(region_name="r", ids_bytes=ids.nbytes, offset=0):
            inputs = server_fixture.token_inputs(ids, mask)
            inputs[0].set_shared_memory(region_name, ids_bytes, offset=offset)
            return inputs

        self.assert_status(lambda: self.client.infer(MODEL, shared_inputs("nowhere")), "NOT_FOUND",
                           "input_ids", "shared_memory_region", "'nowhere'")
        self.assert_status(lambda: self.client.infer(MODEL, shared_inputs(ids_bytes=16)), "INVALID_ARGUMENT",
                           "input_ids", "shared_memory_byte_size", "expected 32")
        self.assert_status(lambda: self.client.infer(MODEL, shared_inputs(offset=4090)), "INVALID_ARGUMENT",
                           "pass the end of region 'r'")
        too_small = grpcclient.InferRequestedOutput("pooled")
        too_small.set_shared_memory("r", 32, offset=1024)
        self.assert_status(lambda: self.client.infer(MODEL, shared_inputs(), outputs=[too_small]),
                           "INVALID_ARGUMENT", "outputs[0] 'pooled'", "more than the 32")
        http_too_small = httpclient.InferRequestedOutput("pooled")
        http_too_small.set_shared_memory("r", 32, offset=1024)
        http_inputs = [httpclient.InferInput("input_ids", [1, 4], "INT64"),
                       httpclient.InferInput("attention_mask", [1, 4], "INT64")]
        http_inputs[0].set_shared_memory("r", ids.nbytes)
        http_inputs[1].set_shared_memory("r", mask.nbytes, offset=ids.nbytes)
        self.assert_http_error(lambda: self.http.infer(MODEL, http_inputs, outputs=[http_too_small]), 400,
                               "more than the 32")
        # The region the refused output named is as it was.
        np.testing.assert_array_equal(shm.get_contents_as_numpy(region, np.int64, [1, 4], offset=1024),
                                      np.zeros((1, 4), dtype=np.int64))
        result = self.client.infer(MODEL, shared_inputs())
        np.testing.assert_allclose(result.as_numpy("pooled"), self.expected(ids, mask)[1], rtol=1e-4, atol=1e-5)

    @unittest.skipUnless(server_fixture.DEVICE == "cpu", "a CUDA server serves CUDA shared memory "
                         "(test_cuda_shared_memory.py)")
    def test_cuda_shared_memory_is_refused_cleanly_on_the_cpu(self):
        self.assertEqual(self.client.get_cuda_shared_memory_status(as_json=True), {})
        self.assertEqual(self.http.get_cuda_shared_memory_status(), [])
        self.assert_status(lambda: self.client.get_cuda_shared_memory_status("c"), "NOT_FOUND", "'c'")
        self.client.unregister_cuda_shared_memory("c")
        self.http.unregister_cuda_shared_memory()
        self.http.unregister_cuda_shared_memory("c")
        # Both clients take the handle in base64, as tritonclient.utils.cuda_shared_memory gives it.
        handle = base64.b64encode(b"\1" * 64).decode()
        for register in (lambda: self.client.register_cuda_shared_memory("c", handle, 0, 64),
                         lambda: self.http.register_cuda_shared_memory("c", handle, 0, 64)):
            with self.assertRaises(InferenceServerException) as raised:
                register()
            self.assertIn(raised.exception.status(), ("StatusCode.INVALID_ARGUMENT", "400"))
            self.assertIn("CUDA shared memory needs a CUDA device: this server runs its models on the CPU "
                          "(--device cpu)", raised.exception.message())
            self.assertIn("system shared memory", raised.exception.message())
        self.assertEqual(self.client.get_cuda_shared_memory_status(as_json=True), {})
        self.assertNotIn("cuda_shared_memory", self.http.get_server_metadata()["extensions"])
        # A system region's name asked for as a CUDA one is not found, and says what it is.
        _, key = self.region("system_not_cuda", 4096)
        self.client.register_system_shared_memory("s", key, 64)
        self.assert_status(lambda: self.client.get_cuda_shared_memory_status("s"), "NOT_FOUND",
                           "registered as system shared memory, not CUDA shared memory")
        self.client.unregister_cuda_shared_memory()
        self.assertIn("s", self.client.get_system_shared_memory_status(as_json=True)["regions"])


class SharedMemoryLimitsTest(unittest.TestCase):
    def test_the_region_cap_comes_from_its_flag(self):
        handle = shm.create_shared_memory_region("capped", f"/graphserve_capped_{os.getpid()}", 4096)
        self.addCleanup(shm.destroy_shared_memory_region, handle)
        repository = server_fixture.scratch_dir("shared_memory_limits_repository")
        server_fixture.copy_model(MODEL, repository)
        # Registration needs no model: the server need not be ready.
        with server_fixture.Server("--model-repository", str(repository), "--max-shared-memory-regions", "1",
                                   "--max-shared-memory-bytes", "8192", log_name="shared_memory_limits",
                                   wait_ready=False) as server:
            with server.client() as client:
                client.register_system_shared_memory("a", f"/graphserve_capped_{os.getpid()}", 4096)
                with self.assertRaises(InferenceServerException) as raised:
                    client.register_system_shared_memory("b", f"/graphserve_capped_{os.getpid()}", 4096)
                self.assertEqual(raised.exception.status(), "StatusCode.RESOURCE_EXHAUSTED")
                self.assertIn("--max-shared-memory-regions", raised.exception.message())
                client.unregister_system_shared_memory("a")
                client.register_system_shared_memory("b", f"/graphserve_capped_{os.getpid()}", 4096)


if __name__ == "__main__":
    unittest.main()
