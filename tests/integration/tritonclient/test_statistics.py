#!/usr/bin/env python3
"""Triton's statistics, log and trace RPCs through Triton's own client: statistics count known
traffic exactly, log settings change what the server writes, tracing without a trace file stays off,
and a request whose client deadline passes while it waits behind slow work is DEADLINE_EXCEEDED on
the client and counted as deadline_exceeded in /metrics. (Shared memory: test_shared_memory.py;
tracing to a file: test_trace.py.)"""
import queue
import re
import time
import unittest

import numpy as np
import torch

import server_fixture

COUNTED = "tiny_scripted"  # only test_known_traffic_is_counted_exactly sends it requests
SLOW = "slow"  # only test_deadline_passed_in_the_queue_is_deadline_exceeded sends it requests


class Slow(torch.nn.Module):
    """A long chain of tiny operations: slow on any CPU through per-operation overhead, while using
    one core at most. Kept on the CPU (KIND_CPU) on a CUDA test server too, where a graph replay
    would make it fast."""

    def forward(self, input_ids, attention_mask):
        x = attention_mask.to(torch.float32)
        for _ in range(20000):
            x = x * 0.5 + 0.5
        return x


SLOW_CONFIG = """name: "slow"
platform: "pytorch_libtorch"
max_batch_size: 1
max_sequence_length: 8
sequence_mask_input: "attention_mask"
input { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }
input { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }
output { name: "out" data_type: TYPE_FP32 dims: [ -1 ] }
buckets { batch_sizes: [ 1 ] sequence_lengths: [ 8 ] }
dynamic_batching { max_queue_delay_microseconds: 0 }
instance_group { count: 1 kind: KIND_CPU }
"""


def inputs(rows, length):
    ids = np.arange(1, rows * length + 1, dtype=np.int64).reshape(rows, length) % 999
    return server_fixture.token_inputs(ids, np.ones_like(ids))


def count(duration):
    """A StatisticDuration in Triton's JSON: uint64 as strings, zero fields left out."""
    return int(duration.get("count", 0)), int(duration.get("ns", 0))


class StatisticsAndSettingsTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        repository = server_fixture.scratch_dir("statistics_repository")
        server_fixture.copy_model(COUNTED, repository)
        slow_dir = repository / SLOW
        slow_dir.mkdir()
        (slow_dir / "config.pbtxt").write_text(SLOW_CONFIG)
        torch.jit.script(Slow().eval()).save(str(slow_dir / "model.pt"))
        cls.start_server("--model-repository", str(repository), log_name="statistics")

    def statistics(self, model):
        answer = self.client.get_inference_statistics(model, as_json=True)
        self.assertEqual(len(answer["model_stats"]), 1)
        stats = answer["model_stats"][0]
        self.assertEqual((stats["name"], stats["version"]), (model, "1"))
        return stats

    def metrics(self):
        """graphserve_requests_total by (model, code) from /metrics."""
        return {(labels["model"], labels["code"]): value for name, labels, value in self.server.metric_samples()
                if name == "graphserve_requests_total"}

    def test_known_traffic_is_counted_exactly(self):
        # One after the other, so that every request is a batch of its own.
        shapes = [(1, 5), (2, 9), (2, 17), (3, 30)]
        for rows, length in shapes:
            self.client.infer(COUNTED, inputs(rows, length))
        # Refused as invalid before reaching the queue: neither a success nor a failure.
        self.assert_status(lambda: self.client.infer(COUNTED, inputs(1, 33)), "INVALID_ARGUMENT")

        stats = self.statistics(COUNTED)
        self.assertEqual(int(stats["inference_count"]), sum(rows for rows, _ in shapes))
        self.assertEqual(int(stats["execution_count"]), len(shapes))
        self.assertGreater(int(stats["last_inference"]), 1_600_000_000_000)  # ms since the epoch
        infer = stats["inference_stats"]
        success_count, success_ns = count(infer["success"])
        self.assertEqual(success_count, len(shapes))
        self.assertEqual(count(infer.get("fail", {})), (0, 0))
        stage_ns = 0
        for stage in ("queue", "compute_input", "compute_infer", "compute_output"):
            stage_count, ns = count(infer[stage])
            self.assertEqual(stage_count, len(shapes), stage)
            self.assertGreater(ns, 0, stage)
            stage_ns += ns
        self.assertLessEqual(stage_ns, success_ns)

        by_size = {int(b["batch_size"]): b for b in stats["batch_stats"]}
        self.assertEqual({size: count(b["compute_infer"])[0] for size, b in by_size.items()},
                         {1: 1, 2: 2, 3: 1})
        infer_ns = sum(count(b["compute_infer"])[1] for b in by_size.values())
        self.assertEqual(infer_ns, count(infer["compute_infer"])[1])  # one request per batch

        # Triton's metric names carry the same figures, so that a Triton dashboard reads them.
        samples = self.server.metric_samples()

        def nv(name):
            found = server_fixture.metrics.values(samples, name, model=COUNTED, version="1")
            self.assertEqual(len(found), 1, f"{name} for {COUNTED} in:\n{samples}")
            return found[0]

        self.assertEqual(nv("nv_inference_request_success"), success_count)
        self.assertEqual(nv("nv_inference_request_failure"), 0)
        self.assertEqual(nv("nv_inference_count"), sum(rows for rows, _ in shapes))
        self.assertEqual(nv("nv_inference_exec_count"), len(shapes))
        self.assertEqual(nv("nv_inference_request_duration_us"), success_ns // 1000)
        for stage in ("queue", "compute_input", "compute_infer", "compute_output"):
            self.assertEqual(nv(f"nv_inference_{stage}_duration_us"), count(infer[stage])[1] // 1000, stage)
        self.assertEqual(nv("nv_inference_pending_request_count"), 0)

    def test_every_model_and_the_fields_naming_what_is_not_served(self):
        every = self.client.get_inference_statistics(as_json=True)
        self.assertEqual(sorted(s["name"] for s in every["model_stats"]), sorted([COUNTED, SLOW]))
        self.assert_status(lambda: self.client.get_inference_statistics("no_such_model"), "NOT_FOUND",
                           "name", "no_such_model")
        self.assert_status(lambda: self.client.get_inference_statistics(COUNTED, "2"), "NOT_FOUND",
                           "version", "'2'")

    def test_deadline_passed_in_the_queue_is_deadline_exceeded(self):
        started = time.monotonic()
        self.client.infer(SLOW, inputs(1, 4))
        slow_s = time.monotonic() - started
        # Two slow requests ahead of it on the model's one instance: a quarter of one's time is long
        # gone when the third could start.
        answers = queue.Queue()
        for _ in range(2):
            self.client.async_infer(SLOW, inputs(1, 4), callback=lambda result, error: answers.put(error))
        self.server.wait_until(lambda _: self.in_flight(SLOW) >= 2, 60, "two slow requests in flight")
        self.assert_status(lambda: self.client.infer(SLOW, inputs(1, 4), client_timeout=max(slow_s / 4, 0.02)),
                           "DEADLINE_EXCEEDED")
        for _ in range(2):
            self.assertIsNone(answers.get(timeout=120))

        # Counted once the worker is back from the batch that held it up; the successes once written,
        # which their client may see first.
        self.server.wait_until(lambda _: self.metrics().get((SLOW, "deadline_exceeded"), 0) >= 1
                               and self.metrics().get((SLOW, "success"), 0) >= 3, 60,
                               "the expired request and the successes in /metrics")
        totals = self.metrics()
        self.assertEqual(totals[(SLOW, "deadline_exceeded")], 1)
        self.assertEqual(totals[(SLOW, "cancelled")], 0)
        self.assertEqual(totals[(SLOW, "success")], 3)

        stats = self.statistics(SLOW)
        infer = stats["inference_stats"]
        self.assertEqual(count(infer["success"])[0], 3)
        fail_count, fail_ns = count(infer["fail"])
        self.assertEqual(fail_count, 1)
        self.assertGreater(fail_ns, 0)
        self.assertEqual(int(stats["execution_count"]), 3)  # the expired one never ran

    def in_flight(self, model):
        return sum(server_fixture.metrics.values(self.server.metric_samples(), "graphserve_requests_in_flight",
                                                 model=model))

    def test_log_settings_are_read_and_updated_through_tritons_keys(self):
        settings = self.client.get_log_settings(as_json=True)["settings"]
        self.assertEqual(settings["log_verbose_level"]["uint32_param"], 0)
        self.assertTrue(settings["log_info"]["bool_param"])
        self.assertEqual(settings["log_format"]["string_param"], "ISO8601")
        self.assertEqual(settings["log_file"]["string_param"], "")
        try:
            updated = self.client.update_log_settings(
                {"log_verbose_level": 1, "log_format": "default"}, as_json=True)["settings"]
            self.assertEqual(updated["log_verbose_level"]["uint32_param"], 1)
            self.assertEqual(updated["log_format"]["string_param"], "default")
            self.assertEqual(self.client.get_log_settings(as_json=True)["settings"], updated)
            # The server announced its new level in Triton's default format.
            self.server.wait_until(
                lambda _: re.search(r"^I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+\] LogSettings: log level info -> debug$",
                                    self.server.log(), re.MULTILINE), 30, "the level change in the log")

            self.assert_status(lambda: self.client.update_log_settings({"log_file": "/tmp/graphserve.log"}),
                               "UNIMPLEMENTED", "log_file")
            self.assert_status(lambda: self.client.update_log_settings({"log_rotation": True}),
                               "INVALID_ARGUMENT", "log_rotation")
            self.assert_status(lambda: self.client.update_log_settings({"log_verbose_level": 2, "log_format": "XML"}),
                               "INVALID_ARGUMENT", "log_format")
            self.assertEqual(self.client.get_log_settings(as_json=True)["settings"], updated)  # nothing changed
        finally:
            restored = self.client.update_log_settings({"log_verbose_level": 0, "log_format": "ISO8601"},
                                                       as_json=True)["settings"]
        self.assertEqual(restored, settings)

    def test_tracing_without_a_trace_file_stays_off(self):
        settings = self.client.get_trace_settings(as_json=True)["settings"]
        self.assertEqual(settings["trace_level"]["value"], ["OFF"])
        self.assertEqual(settings["trace_rate"]["value"], ["1000"])
        self.assertEqual(settings["trace_count"]["value"], ["-1"])
        self.assertEqual(settings["log_frequency"]["value"], ["0"])
        self.assertEqual(self.client.update_trace_settings(settings={"trace_level": ["OFF"]}, as_json=True)["settings"],
                         settings)
        self.assertEqual(self.client.get_trace_settings(COUNTED, as_json=True)["settings"], settings)
        # Started without --trace-config triton,file=...: there is nowhere to write traces to.
        self.assert_status(lambda: self.client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]}),
                           "FAILED_PRECONDITION", "trace_level", "no trace file", "--trace-config triton,file=")
        # Nor may a client name a file for the server to write (no --trace-file-from-clients).
        self.assert_status(lambda: self.client.update_trace_settings(settings={"trace_file": "/tmp/trace.json"}),
                           "FAILED_PRECONDITION", "trace_file", "--trace-file-from-clients")
        self.assertNotIn("trace_file", settings)
        self.assertEqual(self.client.get_trace_settings(as_json=True)["settings"], settings)  # nothing changed
        self.assert_status(lambda: self.client.get_trace_settings("no_such_model"), "NOT_FOUND", "no_such_model")


if __name__ == "__main__":
    unittest.main()
