#!/usr/bin/env python3
"""Triton's request tracing through Triton's own clients: update_trace_settings turns tracing on over
gRPC and HTTP, requests then appear in the trace file as Triton's trace JSON (each request's stages
under Triton's names, in order, with non-decreasing times), per-model settings override the global
ones, trace_rate samples, trace_count stops tracing, log_frequency rolls files, and what graphserve
does not trace is refused naming the setting."""
import json
import time
import unittest

import numpy as np

import server_fixture

try:
    import tritonclient.http as httpclient
except ImportError as missing:  # the [http] extra's gevent is missing
    print(f"SKIPPED: {missing}; deploy/install-deps.sh installs tritonclient[http]")
    raise SystemExit(77)

MODEL = "tiny_scripted"
OTHER = "tiny_traced"
STAGES = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
          "COMPUTE_END", "REQUEST_END"]


def token_batch(seed):
    ids = np.random.default_rng(seed).integers(1, 999, size=(1, 6), dtype=np.int64)
    return ids, np.ones_like(ids)


def http_inputs(ids, mask):
    inputs = []
    for name, array in (("input_ids", ids), ("attention_mask", mask)):
        tensor = httpclient.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def read_traces(path, expected, timeout_s=30):
    """The traces in `path` once it holds `expected` of them, as {request_id: (info, timestamps)}; the
    writer appends off the request path, so the file is polled."""
    deadline = time.monotonic() + timeout_s
    objects = []
    while time.monotonic() < deadline:
        try:
            objects = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):  # not written yet, or caught mid-append
            objects = []
        if sum(1 for item in objects if "model_name" in item) >= expected:
            break
        time.sleep(0.05)
    infos = {item["id"]: item for item in objects if "model_name" in item}
    stamps = {item["id"]: item["timestamps"] for item in objects if "timestamps" in item}
    return {info["request_id"]: (info, stamps.get(trace_id)) for trace_id, info in infos.items()}


class TraceTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        repository = server_fixture.scratch_dir("trace_repository")
        server_fixture.copy_model(MODEL, repository)
        server_fixture.copy_model(OTHER, repository)
        cls.traces = server_fixture.scratch_dir("traces")
        # The operator's file; tests choose their own over the API, which the flag allows.
        cls.start_server("--model-repository", str(repository), "--trace-config",
                         f"triton,file={cls.traces / 'startup.json'}", "--trace-config", "level=OFF",
                         "--trace-file-from-clients", log_name="trace")
        cls.http = cls.server.http_client()
        cls.addClassCleanup(cls.http.close)

    def tearDown(self):
        # Every test starts from tracing off, with no model settings.
        for model in (MODEL, OTHER):
            self.client.update_trace_settings(model, {"trace_level": None, "trace_rate": None, "trace_count": None})
        self.client.update_trace_settings(settings={"trace_level": ["OFF"], "trace_rate": "1000",
                                                    "trace_count": "-1", "log_frequency": "0"})

    def infer(self, model, request_id, seed=0):
        self.client.infer(model, server_fixture.token_inputs(*token_batch(seed)), request_id=request_id)

    def assert_stages(self, info, stamps, model, request_id):
        self.assertEqual((info["model_name"], info["model_version"], info["request_id"]), (model, 1, request_id))
        self.assertEqual([stamp["name"] for stamp in stamps], STAGES)
        times = [stamp["ns"] for stamp in stamps]
        self.assertEqual(times, sorted(times), stamps)
        self.assertGreater(times[-1], times[0])

    def test_grpc_turns_tracing_on_and_each_request_is_traced(self):
        path = self.traces / "grpc.json"
        settings = self.client.update_trace_settings(settings={
            "trace_file": str(path), "trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1"},
            as_json=True)["settings"]
        self.assertEqual(settings["trace_level"]["value"], ["TIMESTAMPS"])
        self.assertEqual(settings["trace_file"]["value"], [str(path)])
        for i in range(3):
            self.infer(MODEL, f"g{i}", seed=i)
        traces = read_traces(path, 3)
        self.assertEqual(sorted(traces), ["g0", "g1", "g2"])
        for request_id, (info, stamps) in traces.items():
            self.assert_stages(info, stamps, MODEL, request_id)
        self.assertEqual(len({info["id"] for info, _ in traces.values()}), 3)

    def test_http_settings_sample_every_rate_th_request(self):
        path = self.traces / "http.json"
        settings = self.http.update_trace_settings(settings={
            "trace_file": str(path), "trace_level": ["TIMESTAMPS"], "trace_rate": "2"})
        self.assertEqual((settings["trace_level"], settings["trace_rate"]), (["TIMESTAMPS"], "2"))
        self.assertEqual(self.http.get_trace_settings(), settings)
        for i in range(4):
            ids, mask = token_batch(i)
            self.http.infer(MODEL, http_inputs(ids, mask), request_id=f"h{i}")
        traces = read_traces(path, 2)
        self.assertEqual(sorted(traces), ["h1", "h3"])
        for request_id, (info, stamps) in traces.items():
            self.assert_stages(info, stamps, MODEL, request_id)

    def test_model_settings_override_the_global_ones_and_count_stops_tracing(self):
        path = self.traces / "model.json"
        self.client.update_trace_settings(settings={"trace_file": str(path), "trace_level": ["OFF"],
                                                    "trace_rate": "1"})
        model = self.client.update_trace_settings(OTHER, {"trace_level": ["TIMESTAMPS"], "trace_count": "2"},
                                                  as_json=True)["settings"]
        self.assertEqual(model["trace_level"]["value"], ["TIMESTAMPS"])
        self.assertEqual(model["trace_rate"]["value"], ["1"])  # the global rate
        self.assertEqual(self.client.get_trace_settings(as_json=True)["settings"]["trace_level"]["value"], ["OFF"])
        for i in range(3):
            self.infer(OTHER, f"m{i}", seed=i)
            self.infer(MODEL, f"untraced{i}", seed=i)
        traces = read_traces(path, 2)
        self.assertEqual(sorted(traces), ["m0", "m1"])
        for request_id, (info, stamps) in traces.items():
            self.assert_stages(info, stamps, OTHER, request_id)
        self.assertEqual(self.client.get_trace_settings(OTHER, as_json=True)["settings"]["trace_count"]["value"],
                         ["0"])
        # Over HTTP too, for the other model: HTTP's per-model path.
        http_model = self.http.update_trace_settings(MODEL, {"trace_level": ["TIMESTAMPS"]})
        self.assertEqual(http_model["trace_level"], ["TIMESTAMPS"])
        ids, mask = token_batch(9)
        self.http.infer(MODEL, http_inputs(ids, mask), request_id="http_model")
        self.infer(OTHER, "counted_out")
        # Traces are written in the order requests finish: once the last one is in, an untraced
        # request sent before it would be too.
        self.infer(MODEL, "last")
        traces = read_traces(path, 4)
        self.assertEqual(sorted(traces), ["http_model", "last", "m0", "m1"])

    def test_log_frequency_rolls_to_numbered_files(self):
        path = self.traces / "rolled.json"
        self.client.update_trace_settings(settings={"trace_file": str(path), "trace_level": ["TIMESTAMPS"],
                                                    "trace_rate": "1", "log_frequency": "2"})
        for i in range(3):
            self.infer(MODEL, f"r{i}", seed=i)
        self.assertEqual(sorted(read_traces(path.with_name("rolled.json.0"), 2)), ["r0", "r1"])
        self.assertEqual(sorted(read_traces(path.with_name("rolled.json.1"), 1)), ["r2"])
        self.assertFalse(path.exists())

    def test_what_graphserve_does_not_trace_is_refused(self):
        before = self.client.get_trace_settings(as_json=True)["settings"]
        self.assert_status(lambda: self.client.update_trace_settings(settings={"trace_level": ["TENSORS"]}),
                           "UNIMPLEMENTED", "trace_level", "TENSORS")
        self.assert_status(lambda: self.client.update_trace_settings(settings={"trace_mode": "opentelemetry"}),
                           "UNIMPLEMENTED", "trace_mode", "OpenTelemetry")
        self.assert_status(lambda: self.client.update_trace_settings(settings={"trace_rate": "0"}),
                           "INVALID_ARGUMENT", "trace_rate")
        self.assert_http_error(lambda: self.http.update_trace_settings(settings={"trace_count": "-5"}),
                               400, "trace_count")
        self.assert_status(lambda: self.client.get_trace_settings("no_such_model"), "NOT_FOUND", "no_such_model")
        self.assertEqual(self.client.get_trace_settings(as_json=True)["settings"], before)
        self.assertIn("trace", self.http.get_server_metadata()["extensions"])
        dropped = server_fixture.metrics.values(self.server.metric_samples(), "graphserve_trace_dropped_total",
                                                reason="queue_full")
        self.assertEqual(dropped, [0.0])
        self.infer(MODEL, "still_serving")


if __name__ == "__main__":
    unittest.main()
