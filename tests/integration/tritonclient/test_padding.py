#!/usr/bin/env python3
"""A model that does not mask padding, configured as a Triton user would (a -1 dimension, dynamic
batching, no sequence_mask_input): every answer must equal the model's own answer for that request
alone, however the requests are batched. Padding its length would change them: a mean over the
sequence of [1, 2, 3, 4, 5] padded to 8 with zeros is 1.875, not 3; a softmax row would sum to less
than 1; a max over negative values would become 0."""
import concurrent.futures
import unittest

import numpy as np

import server_fixture

MODEL = "unmasked"

# Triton's PyTorch backend names; graphserve's own settings travel as parameters, as they would in
# a config Triton must load too. Bucket lengths 4 and 8 replay buckets; every other length runs at
# its exact shape. The long queue delay makes concurrent requests share batches.
CONFIG = """
name: "unmasked"
backend: "pytorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [
  { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "OUTPUT__2" data_type: TYPE_FP32 dims: [ 1 ] }
]
dynamic_batching { max_queue_delay_microseconds: 100000 }
parameters: { key: "max_sequence_length" value: { string_value: "16" } }
parameters: { key: "bucket_sequence_lengths" value: { string_value: "4,8" } }
parameters: { key: "bucket_batch_sizes" value: { string_value: "1,2,4,8" } }
"""


def write_model(folder):
    """Mean, softmax and max over the sequence, none of them masked."""
    import torch

    class Unmasked(torch.nn.Module):
        def forward(self, values: torch.Tensor):
            return (values.mean(dim=1, keepdim=True), torch.softmax(values, dim=1),
                    values.max(dim=1, keepdim=True).values)

    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(CONFIG)
    torch.jit.script(Unmasked().eval()).save(str(folder / "1" / "model.pt"))


def expected(values):
    """The model's answer for one request alone, row by row, in numpy."""
    shifted = np.exp(values - values.max(axis=1, keepdims=True))
    return (values.mean(axis=1, keepdims=True), shifted / shifted.sum(axis=1, keepdims=True),
            values.max(axis=1, keepdims=True))


def request_values(generator, rows, length):
    # Negative values too: a padded zero would then win the max.
    return generator.uniform(-5.0, -0.5, size=(rows, length)).astype(np.float32)


class UnmaskedPaddingTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        repository = server_fixture.scratch_dir("padding_repository")
        write_model(repository / MODEL)
        cls.start_server("--model-repository", str(repository), log_name="padding")

    def check(self, values, answer, what):
        mean, softmax, largest = expected(values)
        np.testing.assert_allclose(answer("OUTPUT__0"), mean, rtol=1e-5, atol=1e-6, err_msg=what)
        np.testing.assert_allclose(answer("OUTPUT__1"), softmax, rtol=1e-5, atol=1e-6, err_msg=what)
        np.testing.assert_allclose(answer("OUTPUT__2"), largest, rtol=1e-5, atol=1e-6, err_msg=what)

    def statistics(self):
        stats = self.client.get_inference_statistics(MODEL, as_json=True)["model_stats"][0]
        return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))

    def test_the_log_says_lengths_are_not_padded(self):
        self.assertIn("model 'unmasked' runs every batch at its requests' exact length", self.server.log())

    def test_a_short_request_batched_with_a_longer_one_keeps_its_own_answer(self):
        # The case: [1, 2, 3, 4, 5] beside a request of 8, both within one queue delay.
        short = np.array([[1, 2, 3, 4, 5]], dtype=np.float32)
        long = np.arange(1, 9, dtype=np.float32)[None, :]
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            calls = [(values, pool.submit(self.client.infer, MODEL,
                                          server_fixture.infer_inputs([("INPUT__0", values)], "FP32")))
                     for values in (short, long)]
            for values, call in calls:
                result = call.result()
                self.check(values, result.as_numpy, f"length {values.shape[1]}")
        self.assertAlmostEqual(float(calls[0][1].result().as_numpy("OUTPUT__0")[0, 0]), 3.0, places=5)

    def test_concurrent_mixed_lengths_over_grpc_and_http_equal_the_solo_answers(self):
        generator = np.random.default_rng(11)
        # Every length from 1 to 12: bucket lengths (4, 8) and lengths between and beyond them, with
        # 1 to 3 rows, several requests of each so that batches form.
        shapes = [(int(generator.integers(1, 4)), length) for length in range(1, 13) for _ in range(3)]
        requests = [request_values(generator, rows, length) for rows, length in shapes]
        inferences_before, executions_before = self.statistics()
        import tritonclient.http as httpclient

        def over_http(values):
            # A client per call: the HTTP client's connections belong to the thread that made them.
            with self.server.http_client() as http:
                tensor = httpclient.InferInput("INPUT__0", list(values.shape), "FP32")
                tensor.set_data_from_numpy(values)
                return http.infer(MODEL, [tensor])

        def over_grpc(values):
            return self.client.infer(MODEL, server_fixture.infer_inputs([("INPUT__0", values)], "FP32"))

        with concurrent.futures.ThreadPoolExecutor(max_workers=len(requests)) as pool:
            calls = [pool.submit(over_http if i % 2 else over_grpc, values) for i, values in enumerate(requests)]
            for values, call in zip(requests, calls):
                self.check(values, call.result().as_numpy, f"shape {values.shape}")
        inferences, executions = self.statistics()
        self.assertEqual(inferences - inferences_before, sum(rows for rows, _ in shapes))
        # Batching still happened: fewer executions than requests.
        self.assertLess(executions - executions_before, len(requests))


if __name__ == "__main__":
    unittest.main()
