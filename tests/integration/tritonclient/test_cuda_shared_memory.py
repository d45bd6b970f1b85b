#!/usr/bin/env python3
"""Triton's CUDA shared-memory extension on a GPU, through Triton's own clients: buffers torch makes on
the GPU in this process, registered by their cudaIpcMemHandle_t over gRPC and HTTP, inputs read from
and outputs written into them, answers equal to an inference that carries its tensors; status and
unregister; and the refusals of untrusted handles, devices and sizes (each naming the field, the server
serving on). Skipped (77) without a CUDA device; the refusal on a CPU server is in
test_shared_memory.py."""
import base64
import os
import sys
import unittest

try:
    import torch
except ImportError as missing:
    print(f"SKIPPED: {missing}; the CUDA buffers are made with torch")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIPPED: no CUDA device (torch.cuda.is_available() is False); CUDA shared memory needs one")
    sys.exit(77)

import numpy as np  # noqa: E402

# The server runs on the GPU whatever the suite's device: a CPU server refuses CUDA regions.
os.environ["GRAPHSERVE_TEST_DEVICE"] = "cuda"
import server_fixture  # noqa: E402
from server_fixture import grpcclient  # noqa: E402

try:
    import tritonclient.http as httpclient
except ImportError as missing:
    print(f"SKIPPED: {missing}; deploy/install-deps.sh installs tritonclient[all]")
    sys.exit(77)

MODEL = "tiny_scripted"  # hidden [B, L, 16] and pooled [B, 16], FP32
HIDDEN = 16


class CudaRegion:
    """A buffer torch makes on GPU 0, shared as Triton's clients share one: the cudaIpcMemHandle_t of
    the allocation holding it (base64, as tritonclient's register calls take it). torch's caching
    allocator carves buffers out of larger allocations, so the buffer starts `start` bytes into what
    the handle names: the region is registered from the allocation's start, and tensors' offsets
    count from there."""

    def __init__(self, byte_size):
        self.buffer = torch.zeros(byte_size, dtype=torch.uint8, device="cuda:0")
        shared = self.buffer.untyped_storage()._share_cuda_()
        handle, self.start = shared[1], shared[3]
        # torch before 2.2 gives the handle's 64 bytes as they are; later releases put a version byte
        # and a type byte first, 'c' for a cudaMalloc block ('e', an expandable segment, has none).
        if len(handle) == 66 and handle[1:2] == b"c":
            handle = handle[2:]
        if len(handle) != 64:
            raise unittest.SkipTest(f"torch shares this buffer by a {len(handle)}-byte handle, not a "
                                    "cudaIpcMemHandle_t (PYTORCH_CUDA_ALLOC_CONF=expandable_segments?)")
        self.handle = base64.b64encode(handle).decode()
        self.byte_size = self.start + byte_size  # to register: from the allocation's start

    def write(self, offset, *arrays):
        """The arrays' bytes one after the other from `offset` of the buffer, on the GPU before the
        server reads them."""
        for array in arrays:
            data = torch.from_numpy(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
            self.buffer[offset:offset + data.numel()].copy_(data)
            offset += data.numel()
        torch.cuda.synchronize()

    def read(self, offset, dtype, shape):
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return self.buffer[offset:offset + count].cpu().numpy().view(dtype).reshape(shape)


class CudaSharedMemoryTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.serve_model_copy(MODEL, log_name="cuda_shared_memory")
        cls.http = cls.server.http_client()
        cls.addClassCleanup(cls.http.close)

    def setUp(self):
        self.client.unregister_system_shared_memory()
        self.client.unregister_cuda_shared_memory()

    def tearDown(self):
        self.client.unregister_cuda_shared_memory()

    def test_inputs_and_outputs_in_cuda_shared_memory_answer_as_tensors_in_the_request(self):
        self.assertIn("cuda_shared_memory", self.http.get_server_metadata()["extensions"])
        for module, client, rows, length in ((grpcclient, self.client, 2, 7), (httpclient, self.http, 3, 12)):
            with self.subTest(client=module.__name__):
                ids, mask = server_fixture.masked_token_batch(rows, length, seed=rows)
                hidden_bytes, pooled_bytes = rows * length * HIDDEN * 4, rows * HIDDEN * 4
                # Both inputs in one region, the second after the first; both outputs in another.
                inputs_region = CudaRegion(ids.nbytes + mask.nbytes)
                inputs_region.write(0, ids, mask)
                outputs_region = CudaRegion(hidden_bytes + pooled_bytes)
                client.register_cuda_shared_memory(f"in_{rows}", inputs_region.handle, 0, inputs_region.byte_size)
                client.register_cuda_shared_memory(f"out_{rows}", outputs_region.handle, 0,
                                                   outputs_region.byte_size)

                inputs = [module.InferInput("input_ids", list(ids.shape), "INT64"),
                          module.InferInput("attention_mask", list(mask.shape), "INT64")]
                inputs[0].set_shared_memory(f"in_{rows}", ids.nbytes, offset=inputs_region.start)
                inputs[1].set_shared_memory(f"in_{rows}", mask.nbytes, offset=inputs_region.start + ids.nbytes)
                outputs = [module.InferRequestedOutput("hidden"), module.InferRequestedOutput("pooled")]
                outputs[0].set_shared_memory(f"out_{rows}", hidden_bytes, offset=outputs_region.start)
                outputs[1].set_shared_memory(f"out_{rows}", pooled_bytes, offset=outputs_region.start + hidden_bytes)
                result = client.infer(MODEL, inputs, outputs=outputs)
                if module is grpcclient:
                    self.assertEqual(result.get_output("pooled").parameters["shared_memory_region"].string_param,
                                     f"out_{rows}")

                # The server's copies into the region are done when its answer comes.
                hidden = outputs_region.read(0, np.float32, [rows, length, HIDDEN])
                pooled = outputs_region.read(hidden_bytes, np.float32, [rows, HIDDEN])
                carried = self.client.infer(MODEL, server_fixture.token_inputs(ids, mask))
                np.testing.assert_allclose(hidden, carried.as_numpy("hidden"), rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(pooled, carried.as_numpy("pooled"), rtol=1e-5, atol=1e-6)
                self.assertTrue(np.any(pooled != 0))

    def test_status_and_unregister(self):
        a, b = CudaRegion(1024), CudaRegion(4096)
        self.client.register_cuda_shared_memory("a", a.handle, 0, a.byte_size)
        self.http.register_cuda_shared_memory("b", b.handle, 0, b.byte_size)
        self.assertEqual(self.http.get_cuda_shared_memory_status(),
                         [{"name": "a", "device_id": 0, "byte_size": a.byte_size},
                          {"name": "b", "device_id": 0, "byte_size": b.byte_size}])
        regions = self.client.get_cuda_shared_memory_status(as_json=True)["regions"]
        self.assertEqual(set(regions), {"a", "b"})
        self.assertEqual(regions["b"]["byte_size"], str(b.byte_size))
        # System and CUDA regions share names; each kind's calls touch only its own.
        self.client.unregister_system_shared_memory()
        self.assert_status(lambda: self.client.get_system_shared_memory_status("a"), "NOT_FOUND",
                           "registered as CUDA shared memory")
        self.http.unregister_cuda_shared_memory("a")
        self.client.unregister_cuda_shared_memory("never_registered")
        self.assertEqual(list(self.client.get_cuda_shared_memory_status(as_json=True)["regions"]), ["b"])
        self.assert_http_error(lambda: self.http.get_cuda_shared_memory_status("a"), 404, "'a'")
        self.http.unregister_cuda_shared_memory()
        self.assertEqual(self.http.get_cuda_shared_memory_status(), [])

    def test_untrusted_handles_devices_and_sizes_are_refused_and_the_server_serves_on(self):
        region = CudaRegion(4096)
        garbage = base64.b64encode(bytes(range(64))).decode()
        self.assert_status(lambda: self.client.register_cuda_shared_memory("r", garbage, 0, 64),
                           "INVALID_ARGUMENT", "raw_handle: the CUDA driver cannot open it")
        self.assert_http_error(lambda: self.http.register_cuda_shared_memory("r", garbage, 0, 64), 400,
                               "raw_handle: the CUDA driver cannot open it")
        short = base64.b64encode(b"\1" * 10).decode()
        self.assert_status(lambda: self.client.register_cuda_shared_memory("r", short, 0, 64),
                           "INVALID_ARGUMENT", "raw_handle: 10 bytes")
        self.assert_http_error(lambda: self.http.register_cuda_shared_memory("r", "not base64!", 0, 64), 400,
                               "raw_handle.b64")
        devices = torch.cuda.device_count()
        self.assert_status(lambda: self.client.register_cuda_shared_memory("r", region.handle, devices, 64),
                           "INVALID_ARGUMENT", f"device_id: {devices} is no CUDA device")
        self.assert_http_error(lambda: self.http.register_cuda_shared_memory("r", region.handle, -1, 64), 400,
                               "device_id: -1")
        # More than the allocation holds (torch's are a few MiB); under the server's mapped-bytes cap.
        self.assert_status(lambda: self.client.register_cuda_shared_memory("r", region.handle, 0, 1 << 30),
                           "INVALID_ARGUMENT", "byte_size: 1073741824 bytes, more than the")
        self.assert_status(lambda: self.client.register_cuda_shared_memory("r", region.handle, 0, 0),
                           "INVALID_ARGUMENT", "byte_size: 0")
        self.assertEqual(self.client.get_cuda_shared_memory_status(as_json=True), {})

        self.client.register_cuda_shared_memory("r", region.handle, 0, region.byte_size)
        self.assert_status(lambda: self.client.register_cuda_shared_memory("r", region.handle, 0, 64),
                           "ALREADY_EXISTS", "'r' is already registered")
        ids, mask = server_fixture.masked_token_batch(1, 4, seed=9)
        region.write(0, ids, mask)

        def shared_inputs(ids_bytes=ids.nbytes, offset=region.start):
            inputs = server_fixture.token_inputs(ids, mask)
            inputs[0].set_shared_memory("r", ids_bytes, offset=offset)
            return inputs

        self.assert_status(lambda: self.client.infer(MODEL, shared_inputs(offset=region.byte_size - 16)),
                           "INVALID_ARGUMENT", "pass the end of region 'r'")
        self.assert_status(lambda: self.client.infer(MODEL, shared_inputs(ids_bytes=16)), "INVALID_ARGUMENT",
                           "shared_memory_byte_size", "expected 32")
        too_small = grpcclient.InferRequestedOutput("pooled")
        too_small.set_shared_memory("r", 32, offset=region.start + 1024)
        self.assert_status(lambda: self.client.infer(MODEL, shared_inputs(), outputs=[too_small]),
                           "INVALID_ARGUMENT", "outputs[0] 'pooled'", "more than the 32")
        # The region the refused output named is as it was.
        np.testing.assert_array_equal(region.read(1024, np.int64, [1, 4]), np.zeros((1, 4), dtype=np.int64))
        result = self.client.infer(MODEL, shared_inputs())
        carried = self.client.infer(MODEL, server_fixture.token_inputs(ids, mask))
        np.testing.assert_allclose(result.as_numpy("pooled"), carried.as_numpy("pooled"), rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    unittest.main()
