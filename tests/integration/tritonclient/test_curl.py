#!/usr/bin/env python3
"""The KServe v2 HTTP/REST endpoint as `curl` sees it: health, metadata, config, infer with a JSON
body and with the binary tensor data extension, the JSON error body and HTTP status of each mistake,
and keep-alive (several requests on one connection)."""
import json
import shutil
import subprocess
import unittest

import numpy as np

import server_fixture

MODEL = "tiny_scripted"
CURL = shutil.which("curl")


class CurlTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        if CURL is None:
            raise unittest.SkipTest("curl is not installed (deploy/install-deps.sh installs it)")
        cls.serve_model_copy(MODEL, log_name="curl")
        cls.base = f"http://{cls.server.http_url}"
        cls.scratch = server_fixture.scratch_dir("curl_bodies")

    def curl(self, path, *args):
        """Runs curl on `path`; returns (HTTP status, response headers as a dict, body bytes)."""
        headers_file = self.scratch / "headers"
        body_file = self.scratch / "body"
        done = subprocess.run([CURL, "-sS", "-D", str(headers_file), "-o", str(body_file), "-w", "%{http_code}",
                               *args, self.base + path], capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        headers = {}
        for line in headers_file.read_text().splitlines()[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        return int(done.stdout), headers, body_file.read_bytes()

    def test_health_metadata_and_config(self):
        self.assertEqual(self.curl("/v2/health/live")[0], 200)
        self.assertEqual(self.curl("/v2/health/ready")[0], 200)
        self.assertEqual(self.curl(f"/v2/models/{MODEL}/ready")[0], 200)
        self.assertEqual(self.curl(f"/v2/models/{MODEL}/versions/1/ready")[0], 200)
        self.assertEqual(self.curl(f"/v2/models/{MODEL}/versions/9/ready")[0], 400)
        status, headers, body = self.curl("/v2")
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "application/json")
        self.assertEqual(json.loads(body)["name"], "graphserve")
        status, _, body = self.curl(f"/v2/models/{MODEL}")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["inputs"][0], {"name": "input_ids", "datatype": "INT64", "shape": [-1, -1]})
        status, _, body = self.curl(f"/v2/models/{MODEL}/config")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["name"], MODEL)

    def test_request_parameters_have_tritons_meanings(self):
        def infer(parameters):
            body = json.dumps({"parameters": parameters, "inputs": [
                {"name": "input_ids", "datatype": "INT64", "shape": [1, 3], "data": [5, 6, 7]},
                {"name": "attention_mask", "datatype": "INT64", "shape": [1, 3], "data": [1, 1, 1]}]})
            status, _, answer = self.curl(f"/v2/models/{MODEL}/infer", "-H", "Content-Type: application/json",
                                          "--data-binary", body)
            return status, json.loads(answer)

        for accepted in ({"priority": 2}, {"timeout": 5000}, {"my_setting": "x"},
                         {"triton_enable_empty_final_response": True}):
            status, answer = infer(accepted)
            self.assertEqual(status, 200, f"{accepted}: {answer}")
        for refused, field in (({"triton_x": 1}, "parameters['triton_x']"),
                               ({"sequence_id": 4}, "parameters['sequence_id']"),
                               ({"priority": "high"}, "parameters['priority']")):
            status, answer = infer(refused)
            self.assertEqual(status, 400, f"{refused}: {answer}")
            self.assertIn(field, answer["error"])

    def test_framing_two_readers_could_read_differently_is_refused_once(self):
        # Request-smuggling shapes behind a proxy: each is answered with one status line, before
        # the body is read, and the connection closes.
        import socket
        host, port = self.server.http_url.split(":")
        start = f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: x\r\n"
        cases = (("Content-Length: 14\r\nContent-Length: 5\r\n", 400, "given twice"),
                 ("Transfer-Encoding: gzip, chunked\r\n", 501, "Transfer-Encoding"),
                 ("Transfer-Encoding: identity\r\n", 501, "Transfer-Encoding"))
        for headers, status, fragment in cases:
            with socket.create_connection((host, int(port)), timeout=10) as connection:
                connection.sendall((start + headers + "\r\n" + '{"inputs": []}').encode())
                answer = b""
                while chunk := connection.recv(65536):  # the server closes after answering
                    answer += chunk
            self.assertEqual(answer.count(b"HTTP/1.1 "), 1, answer)
            self.assertTrue(answer.startswith(f"HTTP/1.1 {status} ".encode()), answer)
            self.assertIn(fragment.encode(), answer)
        self.assertEqual(self.curl("/v2/health/ready")[0], 200)  # still serving

    def test_infer_with_a_json_body(self):
        ids = np.array([[5, 6, 7, 8]], dtype=np.int64)
        mask = np.array([[1, 1, 1, 0]], dtype=np.int64)
        request = {"id": "c1", "inputs": [
            {"name": "input_ids", "datatype": "INT64", "shape": [1, 4], "data": ids.tolist()},
            {"name": "attention_mask", "datatype": "INT64", "shape": [1, 4], "data": mask.ravel().tolist()}],
            "outputs": [{"name": "pooled"}]}
        status, headers, body = self.curl(f"/v2/models/{MODEL}/infer", "-H", "Content-Type: application/json",
                                          "-d", json.dumps(request))
        self.assertEqual(status, 200, body)
        answer = json.loads(body)
        self.assertEqual(answer["id"], "c1")
        self.assertEqual([output["name"] for output in answer["outputs"]], ["pooled"])
        pooled = np.array(answer["outputs"][0]["data"], dtype=np.float32).reshape(answer["outputs"][0]["shape"])
        np.testing.assert_allclose(pooled, self.expected(ids, mask)[1], rtol=1e-4, atol=1e-5)

    def test_infer_with_binary_tensors(self):
        ids = np.arange(10, 22, dtype=np.int64).reshape(2, 6)
        mask = np.ones((2, 6), dtype=np.int64)
        header = json.dumps({"inputs": [
            {"name": "input_ids", "datatype": "INT64", "shape": [2, 6], "parameters": {"binary_data_size": 96}},
            {"name": "attention_mask", "datatype": "INT64", "shape": [2, 6], "parameters": {"binary_data_size": 96}}],
            "outputs": [{"name": "pooled", "parameters": {"binary_data": True}}]}).encode()
        request = self.scratch / "binary_request"
        request.write_bytes(header + ids.tobytes() + mask.tobytes())
        status, headers, body = self.curl(f"/v2/models/{MODEL}/infer", "--data-binary", f"@{request}",
                                          "-H", "Content-Type: application/octet-stream",
                                          "-H", f"Inference-Header-Content-Length: {len(header)}")
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["content-type"], "application/octet-stream")
        json_length = int(headers["inference-header-content-length"])
        answer = json.loads(body[:json_length])
        output = answer["outputs"][0]
        self.assertEqual(output["parameters"]["binary_data_size"], len(body) - json_length)
        pooled = np.frombuffer(body[json_length:], dtype=np.float32).reshape(output["shape"])
        np.testing.assert_allclose(pooled, self.expected(ids, mask)[1], rtol=1e-4, atol=1e-5)

    def test_mistakes_get_a_json_error_and_the_right_status(self):
        infer = f"/v2/models/{MODEL}/infer"
        good_input = {"name": "attention_mask", "datatype": "INT64", "shape": [1, 2], "data": [1, 1]}
        # Nested 100,000 deep: quoting it in the message once overflowed the handler's stack.
        deep = self.scratch / "deep.json"
        deep.write_text('{"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": ['
                        + "[" * 100000 + "]" * 100000 + "]}]}")
        cases = [
            (infer, ["-d", "{not json"], 400, "body: not valid JSON"),
            (infer, ["-d", json.dumps({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 3],
                                                   "data": [1, 2]}, good_input]})],
             400, "inputs[0].data: 2 values, but shape [1, 3] has 3"),
            (infer, ["-d", json.dumps({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 2, 2],
                                                   "data": [1, 2, 3, 4]}, good_input]})],
             400, "input_ids"),
            ("/v2/models/no_such_model/infer", ["-d", "{}"], 404, "no_such_model"),
            ("/v2/models/no_such_model", [], 404, "no_such_model"),
            (infer, [], 405, "POST"),
            ("/v2/nowhere", [], 404, "unknown path '/v2/nowhere'"),
            (infer, ["--data-binary", f"@{deep}"], 400,
             "inputs[0].shape: dimensions must be non-negative integers, got an array"),
            ("/v2/models/%FF/infer", ["-d", "{}"], 400, "path: not valid UTF-8"),
            ("/v2/models/%FF", [], 400, "path: not valid UTF-8"),
            # A decoded NUL once ended the path early: this was routed as the model's metadata.
            (f"/v2/models/{MODEL}%00/anything", [], 400, "path: not valid UTF-8"),
            ("/metrics", [], 404, "/v2"),
        ]
        for path, args, want_status, fragment in cases:
            status, headers, body = self.curl(path, *args)
            self.assertEqual(status, want_status, (path, args, body))
            self.assertEqual(headers["content-type"], "application/json", path)
            self.assertIn(fragment, json.loads(body)["error"], (path, args))
        # Still serving.
        self.assertEqual(self.curl("/v2/health/ready")[0], 200)

    def test_keep_alive_reuses_one_connection(self):
        done = subprocess.run([CURL, "-sS", "-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null",
                               "-w", "%{http_code} %{num_connects}\n",
                               self.base + "/v2/health/ready", self.base + f"/v2/models/{MODEL}",
                               self.base + "/v2"], capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.split("\n")[:3], ["200 1", "200 0", "200 0"])


if __name__ == "__main__":
    unittest.main()
