#!/usr/bin/env python3
"""The gRPC endpoint's bounds on hostile clients (issue #43), pushed past against the real server
while a normal tritonclient keeps calling: messages that never complete (the transport's memory
budget cancels streams past it; the connection's age and grace close it), answers their client
never reads (dropped after the write timeout, their calls cancelled and counted), and one client
address opening more connections than its cap (closed on arrival and counted).

The bounds are set small so that the test stays short on CI's two shared cores: a 16 MiB budget
against ~94 MiB of incomplete messages, a 20 s age with 1 s of grace, a 1 s write timeout. The
normal client's p99 while an attack holds must stay within twice its idle p99, plus 50 ms for a
host that other tests load; against incomplete messages, which can stall it for seconds (known open,
docs/security.md), it is reported while the attack holds and checked once the connection is gone."""
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import numpy as np
from tritonclient.grpc import service_pb2

import server_fixture
from bench_support.hostile import ATTACKER, close_all, open_sockets, still_open
from bench_support.raw_h2 import RawH2, grpc_message_prefix

MODEL = "tiny_scripted"
MIB = 1024 * 1024
GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"
GRPC_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
BUDGET = 16 * MIB
AGE_S, GRACE_S = 20, 1
# The server hands free heap pages back every 5 s: what it holds is read after that.
TRIM_S = 6
# The limit gRPC applies to the integration models' requests (test_limits checks it is logged).
REQUEST_LIMIT = 4 * MIB
NOISE_S = 0.05
# What a call that gRPC's memory reclaimer cancelled fails with: its stream reset, or its idle
# connection sent away, with ENHANCE_YOUR_CALM (11).
RECLAIMED = re.compile(r"(RST_STREAM with error code 11|GOAWAY received; Error code: 11)")


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def p99(latencies):
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def call_back_to_back(url):
    """The normal client's process (--normal-client URL): calls MODEL back to back until its stdin
    closes, writing a line per call: its start (CLOCK_MONOTONIC, which the parent shares), its
    latency, and its error message or nothing."""
    ids = np.full((1, 8), 7, dtype=np.int64)
    inputs = server_fixture.token_inputs(ids, np.ones_like(ids))
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    with server_fixture.grpcclient.InferenceServerClient(url) as client:
        while not stop.is_set():
            started, error = time.monotonic(), None
            try:
                client.infer(MODEL, inputs, client_timeout=10)
            except server_fixture.InferenceServerException as failure:
                error = failure.message()
            print(json.dumps([started, time.monotonic() - started, error]), flush=True)


class NormalClient(threading.Thread):
    """A tritonclient calling the model back to back until stopped, recording each call's latency
    and its failures. It calls from a child process: grpcio's client has aborted its process
    (memory_quota.cc "Check failed", grpcio 1.85) on the GOAWAYs gRPC's memory reclaimer sends, and
    such an abort is then one failed call (with the process's last words) and a new process, not
    the end of the test run."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.url = server.url
        self.stopped = threading.Event()
        # Every call's latency and start, and (start, message) of each that failed.
        self.latencies, self.starts, self.failures = [], [], []

    def run(self):
        while not self.stopped.is_set():
            # Its log to a file: a pipe nobody reads while calls go on could fill and stall it.
            with tempfile.TemporaryFile("w+") as log:
                child = subprocess.Popen([sys.executable, __file__, "--normal-client", self.url],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
                threading.Thread(target=lambda: (self.stopped.wait(), child.stdin.close()), daemon=True).start()
                for line in child.stdout:
                    started, latency, error = json.loads(line)
                    if error is not None:
                        self.failures.append((started, error))
                    self.starts.append(started)
                    self.latencies.append(latency)
                if child.wait() != 0 and not self.stopped.is_set():
                    log.seek(0)
                    self.failures.append((time.monotonic(), f"the normal client's process ended with "
                                          f"{child.returncode}: {log.read()[-2000:]}"))

    def measure(self, seconds, min_calls=0, longest_s=30):
        """Latencies of the calls that end within the next `seconds`, or, until `longest_s`, as long
        as it takes for `min_calls` to end (a loaded host may first take seconds to connect)."""
        first, started = len(self.latencies), time.monotonic()
        time.sleep(seconds)
        while len(self.latencies) - first < min_calls and time.monotonic() - started < longest_s:
            time.sleep(0.1)
        return self.latencies[first:]

    def measure_from(self, since, seconds, min_calls):
        """Latencies of the calls that start at `since` or later: those ending within `seconds`, or
        as long as it takes (up to 30 s) for `min_calls` of them to end."""
        started = time.monotonic()
        time.sleep(seconds)
        while (sum(1 for start in self.starts[:] if start >= since) < min_calls
               and time.monotonic() - started < 30):
            time.sleep(0.1)
        return [latency for start, latency in zip(self.starts[:], self.latencies[:]) if start >= since]


class GrpcBoundsTest(server_fixture.ServerTestCase):
    @classmethod
    def start_bounded_server(cls, *flags, log_name):
        """A server of MODEL alone, so that it starts in seconds, with `flags`."""
        model_dir = server_fixture.copy_model(MODEL, server_fixture.scratch_dir(f"{log_name}_repository"))
        cls.start_server("--model-repository", str(model_dir.parent), *flags, log_name=log_name)

    def setUp(self):
        self.normal = NormalClient(self.server)
        self.normal.start()
        self.addCleanup(self.normal.join)
        self.addCleanup(self.normal.stopped.set)
        self.idle = self.normal.measure(2, min_calls=20)

    def assert_normal_client_unhurt(self, during, reclaimed_ok=False, since=0.0):
        """`reclaimed_ok`: while the memory budget is full, gRPC cancels streams of any connection to
        get back under it (RECLAIMED), a normal call's now and then (0 to 5 of 1,000 at a 16 MiB
        budget): at most 1% may fail so, and no other way. `since`: only calls started then or later
        count."""
        self.assertGreater(len(during), 10, f"{len(during)} normal calls ended while the attack held")
        idle_p99, during_p99 = p99(self.idle), p99(during)
        figures = (f"normal calls: idle p50/p99 {statistics.median(self.idle) * 1e3:.0f} / {idle_p99 * 1e3:.0f} ms "
                   f"({len(self.idle)} calls), under attack {statistics.median(during) * 1e3:.0f} / "
                   f"{during_p99 * 1e3:.0f} ms ({len(during)} calls)")
        print(figures, file=sys.stderr)
        failures = [message for start, message in self.normal.failures[:] if start >= since]
        reclaimed = [failure for failure in failures if RECLAIMED.search(failure)]
        print(f"normal calls cancelled by gRPC's reclaimer: {len(reclaimed)}", file=sys.stderr)
        self.assertEqual([failure for failure in failures if failure not in reclaimed], [])
        self.assertLessEqual(len(reclaimed), len(self.normal.latencies) // 100 if reclaimed_ok else 0)
        self.assertLess(during_p99, 2 * idle_p99 + NOISE_S, figures)

    def dropped_answers(self):
        return sum(server_fixture.metrics.values(self.server.metric_samples(), "graphserve_answers_dropped_total",
                                                 endpoint="grpc"))

    def cancelled_requests(self):
        return sum(server_fixture.metrics.values(self.server.metric_samples(), "graphserve_requests_total",
                                                 model=MODEL, code="cancelled"))


class IncompleteMessagesTest(GrpcBoundsTest):
    @classmethod
    def setUpClass(cls):
        cls.start_bounded_server("--grpc-memory-budget-bytes", str(BUDGET), "--grpc-max-connection-age-s", str(AGE_S),
                                 "--grpc-max-connection-age-grace-s", str(GRACE_S), log_name="grpc_bounds_incomplete")

    def test_incomplete_messages_are_cancelled_past_the_budget_and_closed_at_the_connection_age(self):
        pid = self.server.process.pid
        before = rss_bytes(pid)
        connection = RawH2(("127.0.0.1", self.server.grpc_port))
        opened = time.monotonic()
        self.addCleanup(connection.close)
        # Each message declares nearly the limit and stops 64 KiB short: about six budgets in all.
        declared = REQUEST_LIMIT - 1024
        payload = grpc_message_prefix(declared) + b"\x00" * (declared - 64 * 1024)
        streams = 6 * BUDGET // declared
        sent = 0
        # A stream that gRPC cancels gets no more window: its send gives up after a second.
        send_until = time.monotonic() + 10
        for _ in range(streams):
            sent += connection.send_data(connection.open_stream(GRPC_INFER), payload,
                                         deadline=min(send_until, time.monotonic() + 1))
        sent_at = time.monotonic()
        during = self.normal.measure(2)
        failed_during = len(self.normal.failures)
        time.sleep(max(0.0, sent_at + TRIM_S - time.monotonic()))
        self.assertFalse(connection.closed, f"closed {time.monotonic() - opened:.1f} s after it opened (sent in "
                         f"{sent_at - opened:.1f} s), before the attack's memory was read: raise AGE_S")
        cancelled = len(connection.reset_streams)
        held = rss_bytes(pid) - before
        print(f"{streams} streams, {sent / MIB:.0f} MiB sent: {cancelled} cancelled by the server, RSS "
              f"{before / MIB:.0f} MiB before, +{held / MIB:.0f} MiB held", file=sys.stderr)
        self.assertGreater(sent, 4 * BUDGET)
        # Past the budget gRPC cancels streams: what stays held is about the budget, not what was sent.
        self.assertGreater(cancelled, 0)
        self.assertLess(held, 3 * BUDGET)
        # Known open (docs/security.md, #43): while the stalled streams hold the budget, gRPC's
        # reclaimer may send the normal client's connections away (idle ones first) before they
        # carry a call, for seconds; in some CI runs a call waited out its 10 s deadline. Reported,
        # not asserted; what must hold is that the server recovers once the connection is gone.
        print(f"KNOWN OPEN: normal calls in the 2 s after the attack: {len(during)}, longest "
              f"{max(during, default=0) * 1e3:.0f} ms; calls failed meanwhile: {failed_during}", file=sys.stderr)
        # The messages left never complete: the connection's age and grace end them.
        self.assertTrue(connection.wait_for(lambda c: c.closed, AGE_S * 1.1 + GRACE_S + 10),
                        "the server did not close the stalled connection")
        closed_after = time.monotonic() - opened
        print(f"stalled connection closed {closed_after:.1f} s after it opened (age {AGE_S} s, grace "
              f"{GRACE_S} s)", file=sys.stderr)
        self.assertTrue(connection.goaway)
        self.assertGreater(closed_after, AGE_S * 0.9)
        self.assertTrue(self.client.is_server_ready())
        recovered_from = time.monotonic()
        self.assert_normal_client_unhurt(self.normal.measure_from(recovered_from, 2, min_calls=20),
                                         reclaimed_ok=True, since=recovered_from)


class UnreadAnswersTest(GrpcBoundsTest):
    @classmethod
    def setUpClass(cls):
        cls.start_bounded_server("--grpc-answer-write-timeout-s", "1", log_name="grpc_bounds_unread")

    @staticmethod
    def framed_request():
        """A valid ModelInferRequest for MODEL as a gRPC message: length prefix and bytes."""
        request = service_pb2.ModelInferRequest(model_name=MODEL)
        ids = np.full((1, 32), 7, dtype=np.int64)
        for name in ("input_ids", "attention_mask"):
            tensor = request.inputs.add(name=name, datatype="INT64")
            tensor.shape.extend(ids.shape)
            request.raw_input_contents.append(ids.tobytes())
        message = request.SerializeToString()
        return grpc_message_prefix(len(message)) + message

    def test_answers_not_read_within_the_timeout_are_dropped_and_counted(self):
        dropped_before, cancelled_before = self.dropped_answers(), self.cancelled_requests()
        message = self.framed_request()
        # A window of 0: the server can send an answer's headers, never its message.
        connection = RawH2(("127.0.0.1", self.server.grpc_port), receive_window=0)
        self.addCleanup(connection.close)
        calls = 16
        opened = [connection.open_stream(GRPC_INFER) for _ in range(calls)]
        for stream in opened:
            connection.send_data(stream, message, end_stream=True, deadline=time.monotonic() + 5)
        during = self.normal.measure(2)
        self.assertTrue(connection.wait_for(lambda c: len(c.reset_streams) == calls, 15),
                        f"{len(connection.reset_streams)} of {calls} unread calls cancelled")
        self.assertFalse(connection.closed)
        # Counted once gRPC fails each finish, which may be after the client saw its reset.
        self.server.wait_until(lambda _: self.dropped_answers() - dropped_before == calls, 10,
                               f"{calls} dropped answers counted")
        self.assert_normal_client_unhurt(during)
        # The normal client's answers, all read, were never dropped. The unread ones count as
        # cancelled, not as successes (the normal client's own cancellations, if any, add to it).
        self.assertEqual(self.dropped_answers() - dropped_before, calls)
        self.assertGreaterEqual(self.cancelled_requests() - cancelled_before, calls)


    def test_a_stream_whose_answers_are_not_read_is_cancelled_and_its_answers_counted(self):
        dropped_before, cancelled_before = self.dropped_answers(), self.cancelled_requests()
        connection = RawH2(("127.0.0.1", self.server.grpc_port), receive_window=0)
        self.addCleanup(connection.close)
        stream = connection.open_stream(GRPC_STREAM_INFER)
        requests = 4
        connection.send_data(stream, self.framed_request() * requests, deadline=time.monotonic() + 5)
        during = self.normal.measure(2)
        self.assertTrue(connection.wait_for(lambda c: stream in c.reset_streams, 15),
                        "the stream whose answers are not read was not cancelled")
        # Every answer was ready long before the timeout: the one being written and those behind it
        # (the one in flight is counted once gRPC fails its write, which may be after the reset).
        self.server.wait_until(lambda _: self.dropped_answers() - dropped_before == requests, 10,
                               f"{requests} dropped answers counted")
        self.assertGreaterEqual(self.cancelled_requests() - cancelled_before, requests)
        self.assert_normal_client_unhurt(during)


class ConnectionsPerClientTest(GrpcBoundsTest):
    """Idle connections from ATTACKER past its cap; the normal client calls from 127.0.0.1."""
    CAP = 8

    @classmethod
    def setUpClass(cls):
        cls.start_bounded_server("--grpc-max-connections-per-client", str(cls.CAP), log_name="grpc_bounds_per_client")

    def refused_past_cap(self):
        return sum(server_fixture.metrics.values(self.server.metric_samples(), "graphserve_connections_refused_total",
                                                 endpoint="grpc", reason="address_cap"))

    def held_after_a_second(self, count):
        """Of `count` idle connections to the gRPC port from ATTACKER, how many the server has not
        closed a second later; the connections stay open until the test ends."""
        sockets = open_sockets(self.server.grpc_port, count)
        self.addCleanup(close_all, sockets)
        self.assertEqual(len(sockets), count)
        time.sleep(1)
        return sockets, still_open(sockets)

    def test_one_address_holds_at_most_its_cap_and_other_addresses_are_served(self):
        refused_before = self.refused_past_cap()
        held, kept = self.held_after_a_second(self.CAP + 4)
        self.assertEqual(kept, self.CAP)
        self.assertEqual(self.refused_past_cap() - refused_before, 4)
        during = self.normal.measure(2, min_calls=20)
        self.assert_normal_client_unhurt(during)
        self.assertIn(f"gRPC: refusing a connection from {ATTACKER}", self.server.log())
        # The count follows closes that gRPC alone saw: once the held connections are gone, the
        # address gets its whole cap again.
        close_all(held)
        time.sleep(1)
        _, kept_again = self.held_after_a_second(self.CAP)
        self.assertEqual(kept_again, self.CAP)
        self.assertEqual(self.refused_past_cap() - refused_before, 4)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--normal-client"]:
        call_back_to_back(sys.argv[2])
    else:
        unittest.main()
