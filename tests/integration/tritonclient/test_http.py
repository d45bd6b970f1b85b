#!/usr/bin/env python3
"""The KServe v2 HTTP/REST endpoint through Triton's own HTTP client (tritonclient[http], unmodified):
health, metadata, config, inference with binary and JSON tensors (answers equal torch's and the gRPC
port's), gzip and deflate bodies and answers, the HTTP status and field named for each mistake,
statistics, the repository API, and the request counts in /metrics, which both bindings share."""
import gzip
import json
import unittest
import urllib.error
import urllib.request
import zlib

import numpy as np

import server_fixture
from server_fixture import InferenceServerException

try:
    import tritonclient.http as httpclient
except ImportError as missing:  # the [http] extra's gevent is missing
    print(f"SKIPPED: {missing}; deploy/install-deps.sh installs tritonclient[http]")
    raise SystemExit(77)

MODEL = "tiny_scripted"


def token_batch(rows, length, seed):
    generator = np.random.default_rng(seed)
    ids = generator.integers(1, 999, size=(rows, length), dtype=np.int64)
    return ids, np.ones((rows, length), dtype=np.int64)


def http_inputs(ids, mask, binary=(True, True)):
    inputs = []
    for name, array, as_binary in (("input_ids", ids, binary[0]), ("attention_mask", mask, binary[1])):
        tensor = httpclient.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array, binary_data=as_binary)
        inputs.append(tensor)
    return inputs


def successes(server, model):
    return sum(server_fixture.metrics.values(server.metric_samples(), "graphserve_requests_total",
                                             code="success", model=model))


class HttpTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.serve_model_copy(MODEL, log_name="http")
        cls.http = cls.server.http_client(concurrency=4)
        cls.addClassCleanup(cls.http.close)

    def test_health_metadata_and_config(self):
        self.assertTrue(self.http.is_server_live())
        self.assertTrue(self.http.is_server_ready())
        self.assertTrue(self.http.is_model_ready(MODEL))
        self.assertTrue(self.http.is_model_ready(MODEL, "1"))
        self.assertFalse(self.http.is_model_ready(MODEL, "7"))
        self.assertFalse(self.http.is_model_ready("no_such_model"))
        server = self.http.get_server_metadata()
        self.assertEqual(server["name"], "graphserve")
        self.assertIn("binary_tensor_data", server["extensions"])
        metadata = self.http.get_model_metadata(MODEL)
        self.assertEqual(metadata["versions"], ["1"])
        self.assertEqual(metadata["platform"], "pytorch_libtorch")
        # Shapes are JSON numbers over REST (the gRPC JSON printer would quote 64-bit integers).
        self.assertEqual([(t["name"], t["datatype"], t["shape"]) for t in metadata["inputs"]],
                         [("input_ids", "INT64", [-1, -1]), ("attention_mask", "INT64", [-1, -1])])
        config = self.http.get_model_config(MODEL)
        grpc_config = self.client.get_model_config(MODEL, as_json=True)["config"]
        self.assertEqual(config["name"], MODEL)
        self.assertEqual(config["max_batch_size"], grpc_config["max_batch_size"])
        self.assertEqual([t["name"] for t in config["input"]], ["input_ids", "attention_mask"])
        self.assertEqual(config["input"][0]["data_type"], "TYPE_INT64")
        self.assert_http_error(lambda: self.http.get_model_metadata("no_such_model"), 404, "no_such_model")
        self.assert_http_error(lambda: self.http.get_model_config(MODEL, "7"), 404, "version")

    def test_binary_inference_matches_torch_and_the_grpc_port(self):
        for rows, length, seed in ((1, 5, 1), (3, 17, 2), (4, 32, 3)):
            ids, mask = token_batch(rows, length, seed)
            mask[0, length // 2:] = 0
            result = self.http.infer(MODEL, http_inputs(ids, mask), request_id=f"h{seed}")
            self.assertEqual(result.get_response()["id"], f"h{seed}")
            self.assertEqual(result.get_response()["model_version"], "1")
            hidden, pooled = self.expected(ids, mask)
            np.testing.assert_allclose(result.as_numpy("pooled"), pooled, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(result.as_numpy("hidden"), hidden, rtol=1e-4, atol=1e-5)
            over_grpc = self.client.infer(MODEL, server_fixture.token_inputs(ids, mask))
            np.testing.assert_array_equal(result.as_numpy("pooled"), over_grpc.as_numpy("pooled"))

    def test_json_and_mixed_tensors(self):
        ids, mask = token_batch(2, 9, 4)
        hidden, pooled = self.expected(ids, mask)
        json_only = self.http.infer(MODEL, http_inputs(ids, mask, binary=(False, False)),
                                    outputs=[httpclient.InferRequestedOutput("pooled", binary_data=False)])
        self.assertIsNone(json_only.as_numpy("hidden"))
        self.assertIn("data", json_only.get_output("pooled"))
        np.testing.assert_allclose(json_only.as_numpy("pooled"), pooled, rtol=1e-4, atol=1e-5)
        mixed = self.http.infer(MODEL, http_inputs(ids, mask, binary=(True, False)),
                                outputs=[httpclient.InferRequestedOutput("hidden", binary_data=True),
                                         httpclient.InferRequestedOutput("pooled", binary_data=False)])
        self.assertIn("binary_data_size", mixed.get_output("hidden")["parameters"])
        np.testing.assert_allclose(mixed.as_numpy("hidden"), hidden, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(mixed.as_numpy("pooled"), pooled, rtol=1e-4, atol=1e-5)

    def test_concurrent_async_requests_each_get_their_own_rows(self):
        batches = [token_batch(1 + i % 3, 3 + 2 * i, 100 + i) for i in range(12)]
        pending = [self.http.async_infer(MODEL, http_inputs(*batch)) for batch in batches]
        for batch, request in zip(batches, pending):
            np.testing.assert_allclose(request.get_result(timeout=60).as_numpy("pooled"), self.expected(*batch)[1],
                                       rtol=1e-4, atol=1e-5)

    def test_mistakes_get_the_protocols_status_and_name_the_field(self):
        ids, mask = token_batch(1, 4, 6)
        self.assert_http_error(lambda: self.http.infer("no_such_model", http_inputs(ids, mask)), 404, "no_such_model")
        self.assert_http_error(lambda: self.http.infer(MODEL, http_inputs(ids, mask), model_version="7"), 404,
                               "model_version")
        self.assert_http_error(lambda: self.http.infer(MODEL, http_inputs(ids, mask)[:1]), 400, "attention_mask")
        self.assert_http_error(lambda: self.http.infer(MODEL, http_inputs(*token_batch(1, 33, 7))), 400,
                               "max_sequence_length")
        wrong_type = http_inputs(ids, mask)
        wrong_type[0] = httpclient.InferInput("input_ids", [1, 4], "INT32")
        wrong_type[0].set_data_from_numpy(ids.astype(np.int32))
        self.assert_http_error(lambda: self.http.infer(MODEL, wrong_type), 400, "input_ids")
        self.assert_http_error(lambda: self.http.infer(
            MODEL, http_inputs(ids, mask), outputs=[httpclient.InferRequestedOutput("pooled", class_count=2)]),
            400, "classification")
        self.assert_http_error(
            lambda: self.http.infer(MODEL, http_inputs(ids, mask), headers={"Content-Encoding": "br"}),
            415, "Content-Encoding: 'br'")
        # Trace settings are answered as on gRPC: off, and without a trace file refused on.
        settings = self.http.get_trace_settings()
        self.assertEqual(settings["trace_level"], ["OFF"])
        self.assertEqual(settings["trace_rate"], "1000")
        self.assertEqual(self.http.get_trace_settings(MODEL), settings)
        self.assertEqual(self.http.update_trace_settings(settings={"trace_level": ["OFF"], "trace_rate": None}),
                         settings)
        self.assert_http_error(lambda: self.http.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]}),
                               400, "no trace file")
        self.assert_http_error(lambda: self.http.get_trace_settings("no_such_model"), 404, "no_such_model")
        self.assert_http_error(lambda: self.http.update_log_settings({"log_file": "/tmp/x"}), 501, "log_file")
        # The server keeps serving after each refusal.
        self.http.infer(MODEL, http_inputs(ids, mask))

    def test_statuses_are_tritons(self):
        # Triton (2.42 on) answers a missing model, version or path 404 and a malformed version 400,
        # on every route; gRPC says NOT_FOUND and INVALID_ARGUMENT.
        ids, mask = token_batch(1, 4, 10)
        for version in ("latest", "-1", "1.0"):
            with self.subTest(version=version):
                self.assert_http_error(lambda: self.http.get_model_metadata(MODEL, version), 400, "version: '")
                self.assert_http_error(lambda: self.http.get_model_config(MODEL, version), 400, "version: '")
                self.assert_http_error(lambda: self.http.get_inference_statistics(MODEL, version), 400, "version: '")
                self.assert_http_error(lambda: self.http.infer(MODEL, http_inputs(ids, mask), model_version=version),
                                       400, "model_version: '")
                with self.assertRaises(InferenceServerException) as raised:
                    self.client.get_model_metadata(MODEL, version)
                self.assertEqual(raised.exception.status(), "StatusCode.INVALID_ARGUMENT")
                with self.assertRaises(InferenceServerException) as raised:
                    self.client.is_model_ready(MODEL, version)
                self.assertEqual(raised.exception.status(), "StatusCode.INVALID_ARGUMENT")
        # A version is a number: "01" is the served version 1.
        self.assertEqual(self.http.get_model_metadata(MODEL, "01")["name"], MODEL)
        self.assertTrue(self.http.is_model_ready(MODEL, "01"))
        self.assert_http_error(lambda: self.http.get_model_config(MODEL, "2"), 404, "version")
        self.assert_http_error(lambda: self.http.get_model_config("no_such_model"), 404, "no_such_model")
        self.assert_http_error(lambda: self.http.get_inference_statistics("no_such_model"), 404, "no_such_model")
        # Not ready: 400 with a body saying so, as Triton's.
        for path in ("no_such_model/ready", f"{MODEL}/versions/7/ready"):
            with self.assertRaises(urllib.error.HTTPError) as raised:
                urllib.request.urlopen(f"http://{self.server.http_url}/v2/models/{path}", timeout=30)
            self.assertEqual(raised.exception.code, 400)
            self.assertIn("is not ready", json.loads(raised.exception.read())["error"])
        with self.assertRaises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(f"http://{self.server.http_url}/v2/no/such/path", timeout=30)
        self.assertEqual(raised.exception.code, 404)

    def test_compressed_requests_and_answers(self):
        # tritonclient's request_compression_algorithm and response_compression_algorithm, every pairing.
        ids, mask = token_batch(2, 11, 9)
        hidden, pooled = self.expected(ids, mask)
        for request_coding in (None, "gzip", "deflate"):
            for response_coding in (None, "gzip", "deflate"):
                with self.subTest(request=request_coding, response=response_coding):
                    result = self.http.infer(MODEL, http_inputs(ids, mask, binary=(True, False)),
                                             outputs=[httpclient.InferRequestedOutput("hidden", binary_data=True),
                                                      httpclient.InferRequestedOutput("pooled", binary_data=False)],
                                             request_compression_algorithm=request_coding,
                                             response_compression_algorithm=response_coding)
                    np.testing.assert_allclose(result.as_numpy("hidden"), hidden, rtol=1e-4, atol=1e-5)
                    np.testing.assert_allclose(result.as_numpy("pooled"), pooled, rtol=1e-4, atol=1e-5)
        # The answer is compressed on the wire (tritonclient inflates it unseen), and says so.
        body = json.dumps({"inputs": [{"name": name, "datatype": "INT64", "shape": list(array.shape),
                                       "data": array.flatten().tolist()}
                                      for name, array in (("input_ids", ids), ("attention_mask", mask))]}).encode()
        request = urllib.request.Request(f"http://{self.server.http_url}/v2/models/{MODEL}/infer",
                                         data=gzip.compress(body),
                                         headers={"Content-Encoding": "gzip", "Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            self.assertEqual(answer.headers["Content-Encoding"], "gzip")
            self.assertEqual(answer.headers["Vary"], "Accept-Encoding")
            outputs = {o["name"]: o for o in json.loads(gzip.decompress(answer.read()))["outputs"]}
        np.testing.assert_allclose(np.array(outputs["pooled"]["data"]).reshape(pooled.shape), pooled,
                                   rtol=1e-4, atol=1e-5)
        # Other routes' bodies too: a repository index asked for in deflate.
        request = urllib.request.Request(f"http://{self.server.http_url}/v2/repository/index",
                                         data=zlib.compress(b'{"ready": true}'),
                                         headers={"Content-Encoding": "deflate"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            self.assertEqual(json.loads(answer.read()),
                             [{"name": MODEL, "version": "1", "state": "READY", "reason": ""}])
        # A body that is not what its Content-Encoding says is 400.
        self.assert_http_error(
            lambda: self.http.infer(MODEL, http_inputs(ids, mask), headers={"Content-Encoding": "gzip"}),
            400, "not one complete gzip stream")

    def test_log_settings(self):
        settings = self.http.get_log_settings()
        self.assertEqual(set(settings), set(self.client.get_log_settings(as_json=True)["settings"]))
        self.assertIs(settings["log_info"], True)
        changed = self.http.update_log_settings({"log_verbose_level": 1})
        self.assertEqual(changed["log_verbose_level"], 1)
        self.assertEqual(self.http.update_log_settings({"log_verbose_level": 0})["log_verbose_level"], 0)

    def test_statistics_repository_and_metrics_are_shared_with_grpc(self):
        before_stats = self.http.get_inference_statistics(MODEL)["model_stats"][0]["inference_count"]
        before_metrics = successes(self.server, MODEL)
        ids, mask = token_batch(2, 6, 8)
        self.http.infer(MODEL, http_inputs(ids, mask))
        self.client.infer(MODEL, server_fixture.token_inputs(ids, mask))
        stats = self.http.get_inference_statistics(MODEL)["model_stats"][0]
        self.assertEqual(stats["inference_count"], before_stats + 4)  # rows, from both bindings
        self.assertIsInstance(stats["inference_stats"]["success"]["count"], int)
        # A success counts once its answer is written, which its client may see first.
        self.server.wait_until(lambda _: successes(self.server, MODEL) == before_metrics + 2, 10,
                               "both answers counted as successes")
        self.assertEqual(self.http.get_model_repository_index(),
                         [{"name": MODEL, "version": "1", "state": "READY", "reason": ""}])
        # The default control mode serves the whole repository: unload is refused as over gRPC.
        self.assert_http_error(lambda: self.http.unload_model(MODEL), 400, "--model-control-mode explicit")

if __name__ == "__main__":
    unittest.main()
