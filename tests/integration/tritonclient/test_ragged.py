#!/usr/bin/env python3
"""A ragged model configured as Triton's ragged batching is (allow_ragged_batch, a batch_input of
offsets, a batch_output scattered back): requests of any lengths go end to end into one flat batch
with no padding between them, and every answer must equal that request's answer alone. The model's
running sum per row would carry one request's tokens into the next if the offsets were wrong."""
import concurrent.futures
import unittest

import numpy as np

import server_fixture
from bench_support import metrics

MODEL = "ragged"
FEATURES = 4
TOKEN_SIZES = ",".join(str(size) for size in range(8, 257, 8))

# Triton's ragged convention; graphserve's grid travels as parameters: 16 rows, token sizes every 8
# up to the 256-token budget. The queue delay makes concurrent requests share batches.
CONFIG = f"""
name: "{MODEL}"
backend: "pytorch"
max_batch_size: 16
input [ {{ name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: true }} ]
batch_input [ {{
  kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO
  target_name: "cu_seqlens"
  data_type: TYPE_INT32
  source_input: "input_ids"
}} ]
output [
  {{ name: "per_token" data_type: TYPE_FP32 dims: [ -1, {FEATURES} ] }},
  {{ name: "pooled" data_type: TYPE_FP32 dims: [ {FEATURES} ] }}
]
batch_output [ {{
  target_name: "per_token"
  kind: BATCH_SCATTER_WITH_INPUT_SHAPE
  source_input: "input_ids"
}} ]
dynamic_batching {{ max_queue_delay_microseconds: 20000 }}
parameters: {{ key: "max_sequence_length" value: {{ string_value: "32" }} }}
parameters: {{ key: "max_batch_tokens" value: {{ string_value: "256" }} }}
parameters: {{ key: "bucket_sequence_lengths" value: {{ string_value: "{TOKEN_SIZES}" }} }}
parameters: {{ key: "bucket_batch_sizes" value: {{ string_value: "16" }} }}
"""


def write_model(folder):
    """forward(input_ids [T], cu_seqlens [R + 1]) -> (per_token [T, 4], pooled [R, 4]): per row, a
    running sum of its ids times (k + 1), and its mean (0 for an empty row)."""
    import torch

    class Ragged(torch.nn.Module):
        def forward(self, input_ids: torch.Tensor, cu_seqlens: torch.Tensor):
            offsets = cu_seqlens.to(torch.int64)
            positions = torch.arange(input_ids.shape[0])
            row_of = torch.searchsorted(offsets[1:], positions, right=True)
            running = torch.cumsum(input_ids.to(torch.float64), 0)
            before_row = torch.cat([running.new_zeros(1), running])[offsets[:-1]]
            within_row = (running - before_row[row_of]).to(torch.float32)
            per_token = within_row.unsqueeze(1) * torch.arange(1, 5, dtype=torch.float32)
            sums = torch.zeros(offsets.shape[0] - 1, 4).index_add_(0, row_of, per_token)
            counts = (offsets[1:] - offsets[:-1]).clamp(min=1).to(torch.float32).unsqueeze(1)
            return per_token, sums / counts

    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(CONFIG)
    torch.jit.script(Ragged().eval()).save(str(folder / "1" / "model.pt"))


def expected(ids):
    """The model's answer for one request [rows, length] alone, in numpy."""
    running = np.cumsum(ids.astype(np.float64), axis=1)
    per_token = (running[:, :, None] * np.arange(1, FEATURES + 1)).astype(np.float32)
    return per_token, per_token.mean(axis=1)


class RaggedBatchingTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        repository = server_fixture.scratch_dir("ragged_repository")
        write_model(repository / MODEL)
        cls.start_server("--model-repository", str(repository), log_name="ragged")

    def infer(self, ids):
        return self.client.infer(MODEL, server_fixture.infer_inputs([("input_ids", ids)]))

    def check(self, ids, result, what):
        per_token, pooled = expected(ids)
        np.testing.assert_allclose(result.as_numpy("per_token"), per_token, rtol=1e-6, err_msg=what)
        np.testing.assert_allclose(result.as_numpy("pooled"), pooled, rtol=1e-6, err_msg=what)

    def padding(self):
        samples = self.server.metric_samples()
        real = sum(metrics.values(samples, "graphserve_real_elements_total", model=MODEL))
        padded = sum(metrics.values(samples, "graphserve_padded_elements_total", model=MODEL))
        return real, padded

    def test_the_log_says_the_model_is_ragged(self):
        self.assertIn(f"model '{MODEL}' is ragged: requests of any lengths are packed end to end", self.server.log())

    def test_the_model_config_says_what_is_served(self):
        config = self.client.get_model_config(MODEL, as_json=True)["config"]
        self.assertTrue(config["input"][0].get("allow_ragged_batch"))
        self.assertEqual(config["batch_input"][0]["kind"], "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO")
        self.assertEqual(config["batch_input"][0]["target_name"], ["cu_seqlens"])
        self.assertEqual(config["batch_output"][0]["target_name"], ["per_token"])

    def test_a_request_of_several_rows_gets_each_row_its_own_answer(self):
        ids = np.arange(1, 16, dtype=np.int64).reshape(3, 5)
        self.check(ids, self.infer(ids), "3 rows of 5")

    def test_a_client_cannot_send_the_offsets(self):
        ids = np.ones((1, 4), dtype=np.int64)
        offsets = np.array([[0, 1000]], dtype=np.int32)
        self.assert_status(lambda: self.client.infer(MODEL, [
            *server_fixture.infer_inputs([("input_ids", ids)]),
            *server_fixture.infer_inputs([("cu_seqlens", offsets)], "INT32")]),
            "INVALID_ARGUMENT", "cu_seqlens", "batch input, made by the server")

    def test_a_row_longer_than_max_sequence_length_is_refused(self):
        self.assert_status(lambda: self.infer(np.ones((1, 33), dtype=np.int64)), "INVALID_ARGUMENT",
                           "max_sequence_length 32")

    def test_concurrent_mixed_lengths_equal_their_solo_answers_with_only_tail_padding(self):
        generator = np.random.default_rng(5)
        shapes = [(int(generator.integers(1, 4)), int(generator.integers(1, 33))) for _ in range(96)]
        requests = [generator.integers(0, 1000, size=shape, dtype=np.int64) for shape in shapes]
        real_before, padded_before = self.padding()
        with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
            calls = [pool.submit(self.infer, ids) for ids in requests]
            for ids, call in zip(requests, calls):
                self.check(ids, call.result(), f"shape {ids.shape}")
        real, padded = self.padding()
        real_tokens = sum(rows * length for rows, length in shapes)
        self.assertEqual(real - real_before, real_tokens)
        # Token sizes every 8: a batch pads at most 7 tokens, far fewer than a padded grid would.
        self.assertLessEqual(padded - padded_before, real_tokens * 1.25)
        self.assertGreaterEqual(padded - padded_before, real_tokens)


if __name__ == "__main__":
    unittest.main()
