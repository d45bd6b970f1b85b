#!/usr/bin/env python3
"""Health, metadata and inference through Triton's own gRPC client (tritonclient[grpc], unmodified):
raw tensors as the client sends them, typed tensor contents through its generated stub, answers
checked against the TorchScript model run by torch itself, and the error cases a client must be able
to tell apart (status codes and the field named)."""
import unittest

import numpy as np

import server_fixture
from server_fixture import grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
import grpc

MODEL = "tiny_scripted"


def token_batch(rows, length, seed):
    generator = np.random.default_rng(seed)
    ids = generator.integers(1, 999, size=(rows, length), dtype=np.int64)
    mask = np.ones((rows, length), dtype=np.int64)
    return ids, mask


class InferenceTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.serve_model_copy(MODEL, log_name="inference")

    def test_health_and_metadata(self):
        self.assertTrue(self.client.is_server_live())
        self.assertTrue(self.client.is_server_ready())
        self.assertTrue(self.client.is_model_ready(MODEL))
        server = self.client.get_server_metadata(as_json=True)
        self.assertEqual(server["name"], "graphserve")
        metadata = self.client.get_model_metadata(MODEL, as_json=True)
        self.assertEqual(metadata["platform"], "pytorch_libtorch")
        self.assertEqual([(t["name"], t["datatype"], t["shape"]) for t in metadata["inputs"]],
                         [("input_ids", "INT64", ["-1", "-1"]), ("attention_mask", "INT64", ["-1", "-1"])])
        self.assertEqual([t["name"] for t in metadata["outputs"]], ["hidden", "pooled"])

    def test_raw_inference_matches_torch(self):
        for rows, length, seed in ((1, 5, 1), (3, 17, 2), (4, 32, 3)):
            ids, mask = token_batch(rows, length, seed)
            mask[0, length // 2:] = 0  # a padded row: the mask, not the server, decides
            result = self.client.infer(MODEL, server_fixture.token_inputs(ids, mask), request_id=f"r{seed}")
            hidden, pooled = self.expected(ids, mask)
            self.assertEqual(result.get_response().id, f"r{seed}")
            np.testing.assert_allclose(result.as_numpy("pooled"), pooled, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(result.as_numpy("hidden"), hidden, rtol=1e-4, atol=1e-5)

    def test_requested_output_only(self):
        ids, mask = token_batch(2, 9, 4)
        result = self.client.infer(MODEL, server_fixture.token_inputs(ids, mask),
                                   outputs=[grpcclient.InferRequestedOutput("pooled")])
        self.assertIsNone(result.as_numpy("hidden"))
        np.testing.assert_allclose(result.as_numpy("pooled"), self.expected(ids, mask)[1], rtol=1e-4, atol=1e-5)

    def test_typed_contents_through_the_generated_stub(self):
        ids, mask = token_batch(2, 7, 5)
        request = service_pb2.ModelInferRequest(model_name=MODEL)
        for name, array in (("input_ids", ids), ("attention_mask", mask)):
            tensor = request.inputs.add(name=name, datatype="INT64", shape=list(array.shape))
            tensor.contents.int64_contents.extend(array.ravel().tolist())
        with grpc.insecure_channel(self.server.url) as channel:
            response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
        by_name = {output.name: i for i, output in enumerate(response.outputs)}
        pooled = np.frombuffer(response.raw_output_contents[by_name["pooled"]], dtype=np.float32).reshape(2, 16)
        np.testing.assert_allclose(pooled, self.expected(ids, mask)[1], rtol=1e-4, atol=1e-5)

    def test_concurrent_async_requests_each_get_their_own_rows(self):
        import queue
        answers = queue.Queue()
        batches = [token_batch(1 + i % 3, 3 + 2 * i, 100 + i) for i in range(12)]
        for i, (ids, mask) in enumerate(batches):
            self.client.async_infer(MODEL, server_fixture.token_inputs(ids, mask),
                                    callback=lambda result, error, i=i: answers.put((i, result, error)))
        for _ in batches:
            i, result, error = answers.get(timeout=60)
            self.assertIsNone(error)
            np.testing.assert_allclose(result.as_numpy("pooled"), self.expected(*batches[i])[1],
                                       rtol=1e-4, atol=1e-5)

    def test_unknown_model_is_not_found(self):
        ids, mask = token_batch(1, 4, 6)
        self.assert_status(lambda: self.client.infer("no_such_model", server_fixture.token_inputs(ids, mask)),
                           "NOT_FOUND", "no_such_model")
        self.assert_status(lambda: self.client.get_model_metadata("no_such_model"), "NOT_FOUND")

    def test_bad_inputs_name_the_field(self):
        ids, mask = token_batch(1, 4, 7)
        wrong_type = server_fixture.token_inputs(ids, mask)
        wrong_type[0] = grpcclient.InferInput("input_ids", [1, 4], "INT32")
        wrong_type[0].set_data_from_numpy(ids.astype(np.int32))
        self.assert_status(lambda: self.client.infer(MODEL, wrong_type), "INVALID_ARGUMENT", "input_ids")
        too_long = token_batch(1, 33, 8)
        self.assert_status(lambda: self.client.infer(MODEL, server_fixture.token_inputs(*too_long)),
                           "INVALID_ARGUMENT", "max_sequence_length")
        self.assert_status(lambda: self.client.infer(MODEL, server_fixture.token_inputs(ids, mask)[:1]),
                           "INVALID_ARGUMENT", "attention_mask")

    def test_tritons_request_parameters_are_served_with_their_meaning(self):
        ids, mask = token_batch(2, 6, 10)
        expected = self.expected(ids, mask)[1]
        # Without priority_levels a priority changes nothing; a timeout without the override neither;
        # custom parameters reach no TorchScript model and are reported once in the log.
        for options in ({"priority": 1}, {"timeout": 1000}, {"parameters": {"temperature": "0.5", "top_k": 3}},
                        {"parameters": {"temperature": "0.7"}}):
            result = self.client.infer(MODEL, server_fixture.token_inputs(ids, mask), **options)
            np.testing.assert_allclose(result.as_numpy("pooled"), expected, rtol=1e-4, atol=1e-5, err_msg=str(options))
        log = self.server.log()
        self.assertEqual(log.count("have no effect"), 1, log[-2000:])
        self.assertIn("request parameters 'temperature', 'top_k' have no effect", log)
        # Triton's client refuses reserved keys itself; another client may send them.
        request = service_pb2.ModelInferRequest(model_name=MODEL)
        for name, array in (("input_ids", ids), ("attention_mask", mask)):
            tensor = request.inputs.add(name=name, datatype="INT64", shape=list(array.shape))
            tensor.contents.int64_contents.extend(array.ravel().tolist())
        request.parameters["triton_custom"].int64_param = 1
        with grpc.insecure_channel(self.server.url) as channel:
            with self.assertRaises(grpc.RpcError) as raised:
                service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("parameters['triton_custom']: keys starting with 'triton_' are reserved",
                      raised.exception.details())

    def test_unsupported_request_options_are_refused_by_name(self):
        ids, mask = token_batch(1, 4, 9)
        self.assert_status(lambda: self.client.infer(MODEL, server_fixture.token_inputs(ids, mask), sequence_id=7),
                           "INVALID_ARGUMENT", "parameters['sequence_")
        self.assert_status(lambda: self.client.infer(
            MODEL, server_fixture.token_inputs(ids, mask),
            outputs=[grpcclient.InferRequestedOutput("pooled", class_count=3)]),
            "INVALID_ARGUMENT", "classification")
        # The server keeps serving after each refusal.
        self.client.infer(MODEL, server_fixture.token_inputs(ids, mask))


if __name__ == "__main__":
    unittest.main()
