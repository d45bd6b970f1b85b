#!/usr/bin/env python3
"""ModelStreamInfer through Triton's own client (tritonclient[grpc], unmodified): start_stream, many
async_stream_infer calls of mixed shapes on one stream, stop_stream. Each answer is matched by its
request id and must equal the unary answer to the same request; bad requests interleaved with the
good ones come back as errors carrying the unary call's message, and the stream goes on."""
import queue
import unittest

import numpy as np

import server_fixture
from server_fixture import InferenceServerException

MODEL = "tiny_scripted"


def token_inputs(rows, length, seed):
    generator = np.random.default_rng(seed)
    ids = generator.integers(1, 999, size=(rows, length), dtype=np.int64)
    return server_fixture.token_inputs(ids, np.ones_like(ids))


class StreamingTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        repository = server_fixture.scratch_dir("streaming_repository")
        server_fixture.copy_model(MODEL, repository)
        cls.start_server("--model-repository", str(repository), log_name="streaming")

    def bad_requests(self):
        """(model, inputs, what the message must name) of requests that fail."""
        ids = np.arange(1, 5, dtype=np.int64).reshape(1, 4)
        too_long = np.ones((1, 33), dtype=np.int64)
        return [
            (MODEL, server_fixture.token_inputs(ids.astype(np.int32), np.ones_like(ids, dtype=np.int32), "INT32"),
             "input_ids"),
            ("no_such_model", server_fixture.token_inputs(ids, np.ones_like(ids)), "no_such_model"),
            (MODEL, server_fixture.token_inputs(too_long, too_long), "max_sequence_length"),
            (MODEL, server_fixture.token_inputs(ids, np.ones_like(ids))[:1], "attention_mask"),
        ]

    def unary_error(self, model, inputs):
        with self.assertRaises(InferenceServerException) as raised:
            self.client.infer(model, inputs)
        return raised.exception.message()

    def test_many_requests_on_one_stream_answer_as_unary_calls(self):
        good = {f"s{i}": token_inputs(1 + i % 4, 1 + (7 * i) % 32, seed=i) for i in range(40)}
        bad = self.bad_requests()
        expected = {request_id: self.client.infer(MODEL, inputs, request_id=request_id)
                    for request_id, inputs in good.items()}
        expected_errors = sorted(self.unary_error(model, inputs) for model, inputs, _ in bad)

        answers = queue.Queue()
        self.client.start_stream(callback=lambda result, error: answers.put((result, error)))
        bad_after = {5 + 10 * k: request for k, request in enumerate(bad)}  # one every ten good ones
        for i, (request_id, inputs) in enumerate(good.items()):
            self.client.async_stream_infer(MODEL, inputs, request_id=request_id)
            if i in bad_after:
                model, bad_inputs, _ = bad_after[i]
                self.client.async_stream_infer(model, bad_inputs, request_id=f"bad{i}")
        # Returns once the server has answered everything and closed the stream.
        self.client.stop_stream()

        results, errors = {}, []
        while not answers.empty():
            result, error = answers.get_nowait()
            if error is not None:
                errors.append(error.message())
                continue
            request_id = result.get_response().id
            self.assertNotIn(request_id, results, "answered twice")
            results[request_id] = result
        self.assertEqual(sorted(results), sorted(good))
        for request_id, result in results.items():
            self.assertEqual(result.get_response().model_name, MODEL)
            for name in ("hidden", "pooled"):
                np.testing.assert_allclose(result.as_numpy(name), expected[request_id].as_numpy(name),
                                           rtol=1e-4, atol=1e-5, err_msg=f"{name} of {request_id}")
        self.assertEqual(sorted(errors), expected_errors)
        for _, _, field in bad:
            self.assertTrue(any(field in message for message in errors), f"no error names {field}")

    def test_a_cancelled_stream_leaves_the_server_serving(self):
        answers = queue.Queue()
        self.client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for i in range(30):
            self.client.async_stream_infer(MODEL, token_inputs(4, 32, seed=200 + i), request_id=f"c{i}")
        result, error = answers.get(timeout=60)
        self.assertIsNone(error)
        self.client.stop_stream(cancel_requests=True)
        self.assertTrue(self.client.is_server_ready())
        ids, mask = np.full((1, 3), 7, dtype=np.int64), np.ones((1, 3), dtype=np.int64)
        pooled = self.client.infer(MODEL, server_fixture.token_inputs(ids, mask)).as_numpy("pooled")
        self.assertEqual(pooled.shape, (1, 16))

    def test_answers_say_they_are_final_when_the_client_asks_for_it(self):
        # What perf_analyzer's and Triton's streaming clients send; graphserve's models answer once,
        # so each answer is the final one, and no empty response follows it.
        answers = queue.Queue()
        self.client.start_stream(callback=lambda result, error: answers.put((result, error)))
        for i in range(3):
            self.client.async_stream_infer(MODEL, token_inputs(1, 5, seed=300 + i), request_id=f"f{i}",
                                           enable_empty_final_response=True, parameters={"tag": "x"})
        self.client.stop_stream()
        finals = []
        while not answers.empty():
            result, error = answers.get_nowait()
            self.assertIsNone(error)
            final = result.get_response().parameters["triton_final_response"]
            finals.append((result.get_response().id, final.bool_param))
        self.assertEqual(sorted(finals), [("f0", True), ("f1", True), ("f2", True)])


if __name__ == "__main__":
    unittest.main()
