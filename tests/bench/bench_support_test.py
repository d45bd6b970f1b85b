#!/usr/bin/env python3
"""deploy/bench/bench_support's parts that need no server: the /metrics reader on a written
exposition, the launcher on a stand-in program (sh) that logs graphserve's listening lines, and the
attack suite's hand-written HTTP/2 pieces against RFC 7541's examples and a local socket.

  bench_support_test.py SOURCE_DIR OUT_DIR
"""
import pathlib
import signal
import socket
import struct
import sys
import time
import unittest

SOURCE, OUT = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
sys.path.insert(0, str(SOURCE / "deploy" / "bench"))
from bench_support import metrics  # noqa: E402
from bench_support import raw_h2  # noqa: E402
from bench_support.server import GraphserveProcess, StartError  # noqa: E402

EXPOSITION = """# HELP graphserve_requests_total Requests answered, by model and code.
# TYPE graphserve_requests_total counter
graphserve_requests_total{code="success",model="encoder"} 12
graphserve_requests_total{code="invalid_argument",model="encoder"} 3
graphserve_requests_total{code="success",model="other"} 5
graphserve_requests_in_flight{model="encoder"} 2
graphserve_padded_elements_total{model="encoder",device="cpu"} 1.5e3
graphserve_admission_wait_scale 0.5
nv_inference_count{model="quoted \\"name\\"",version="1"} 7
graphserve_broken{model="encoder"} not_a_number
"""


class MetricsTest(unittest.TestCase):
    def test_samples_keep_names_labels_and_values_and_skip_what_is_no_sample(self):
        found = metrics.samples(EXPOSITION)
        self.assertEqual(len(found), 7)  # no comments, not the value that is no number
        self.assertIn(("graphserve_padded_elements_total", {"model": "encoder", "device": "cpu"}, 1500.0), found)
        self.assertIn(("graphserve_admission_wait_scale", {}, 0.5), found)
        self.assertIn(("nv_inference_count", {"model": 'quoted \\"name\\"', "version": "1"}, 7.0), found)

    def test_values_match_every_label_asked_for(self):
        found = metrics.samples(EXPOSITION)
        self.assertEqual(sorted(metrics.values(found, "graphserve_requests_total", model="encoder")), [3.0, 12.0])
        self.assertEqual(metrics.values(found, "graphserve_requests_total", code="success", model="other"), [5.0])
        self.assertEqual(metrics.values(found, "graphserve_requests_total", model="absent"), [])

    def test_one_models_series_and_their_sums(self):
        series = metrics.parse_metrics(EXPOSITION, "encoder")
        self.assertEqual(metrics.total(series, "graphserve_requests_total"), 15.0)
        self.assertEqual(metrics.total(series, "graphserve_requests_total", code="success"), 12.0)
        self.assertEqual(metrics.by_label(series, "graphserve_requests_total", "code"),
                         {"success": 12.0, "invalid_argument": 3.0})
        self.assertNotIn(("graphserve_admission_wait_scale", frozenset()), series)  # no model label


def stand_in(name, script):
    """A GraphserveProcess running `sh -c script`, its log under OUT."""
    OUT.mkdir(parents=True, exist_ok=True)
    return GraphserveProcess("/bin/sh", ["-c", script], OUT / f"{name}.log")


class LauncherTest(unittest.TestCase):
    def test_ports_are_read_from_the_log_and_sigterm_ends_the_process(self):
        process = stand_in("listening", "echo 'gRPC endpoint listening on 127.0.0.1:0 (port 41001); not ready'; "
                                        "echo 'REST endpoint listening on 127.0.0.1:0 (port 41002): KServe v2'; "
                                        "exec sleep 600")
        try:
            self.assertEqual(process.listening_ports(("grpc", "http"), timeout_s=60), {"grpc": 41001, "http": 41002})
            self.assertTrue(process.running())
        finally:
            status = process.stop(timeout_s=60)
        self.assertEqual(status, -signal.SIGTERM)
        self.assertTrue(process.stopped())
        self.assertIn("port 41002", process.log())

    def test_an_exit_before_listening_is_a_start_error_naming_the_status(self):
        process = stand_in("exited", "echo 'gRPC endpoint listening on 127.0.0.1:0 (port 41003)'; exit 3")
        try:
            with self.assertRaisesRegex(StartError, "exited with 3 before listening"):
                process.listening_ports(("grpc", "metrics"), timeout_s=60)
        finally:
            self.assertEqual(process.stop(), 3)
        self.assertIn("port 41003", process.log_tail(5))


class RawH2Test(unittest.TestCase):
    def test_integers_are_encoded_as_rfc_7541_appendix_c1(self):
        self.assertEqual(raw_h2.hpack_integer(10, 5), b"\x0a")
        self.assertEqual(raw_h2.hpack_integer(1337, 5), b"\x1f\x9a\x0a")
        self.assertEqual(raw_h2.hpack_integer(42, 8), b"\x2a")

    def test_a_literal_header_is_unindexed_with_its_lengths(self):
        self.assertEqual(raw_h2.hpack_literal("te", "trailers"), b"\x00\x02te\x08trailers")

    def test_data_waits_for_the_peers_window_and_stops_at_its_deadline(self):
        """A peer that grants 10 bytes of stream window: exactly 10 bytes go, in a DATA frame on the
        stream, and the send returns at its deadline instead of waiting for more."""
        listener = socket.create_server(("127.0.0.1", 0))
        connection = raw_h2.RawH2(listener.getsockname())
        peer, _ = listener.accept()
        peer.sendall(raw_h2.RawH2._frame(raw_h2.SETTINGS, 0, 0, struct.pack(">HI", raw_h2.SETTINGS_INITIAL_WINDOW_SIZE,
                                                                             10)))
        self.assertTrue(connection.wait_for(lambda c: c.peer_initial_window == 10, 5))
        stream = connection.open_stream("/x")
        self.assertEqual(connection.send_data(stream, b"a" * 100, deadline=time.monotonic() + 0.3), 10)
        received = b""
        peer.settimeout(5)
        while received.count(b"a") < 10:
            received += peer.recv(4096)
        data_header = struct.pack(">I", 10)[1:] + bytes([raw_h2.DATA, 0]) + struct.pack(">I", stream)
        self.assertIn(data_header + b"a" * 10, received)
        connection.close()
        peer.close()
        listener.close()


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
