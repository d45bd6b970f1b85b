#!/usr/bin/env python3
"""A REST call's deadline reaches the server (issue #43.4): Triton's `timeout` request parameter, as
tritonclient.http sends it, or else --http-infer-deadline-ms. A call that cannot meet it is refused at
once (504, counted `deadline_exceeded`) and its twin sent without a deadline, which takes its place in
the queue, shows that it really could not have been met; the server's deadline caps a client's and
leaves gRPC calls alone.

The model is test_statistics' slow one: one instance, one row a batch, a fixed chain of operations,
so that the work queued ahead of a call is a known number of whole runs, whatever the host's speed."""
import threading
import time
import unittest

import numpy as np
import torch
import tritonclient.http as httpclient

import server_fixture
from test_statistics import SLOW, SLOW_CONFIG, Slow


def slow_repository(name):
    repository = server_fixture.scratch_dir(name)
    slow_dir = repository / SLOW
    slow_dir.mkdir(parents=True, exist_ok=True)
    (slow_dir / "config.pbtxt").write_text(SLOW_CONFIG)
    torch.jit.script(Slow().eval()).save(str(slow_dir / "model.pt"))
    return repository


def rest_inputs():
    ids = np.arange(1, 5, dtype=np.int64).reshape(1, 4)
    return server_fixture.token_inputs(ids, np.ones_like(ids), module=httpclient)


class DeadlineTestCase(server_fixture.ServerTestCase):
    def requests_total(self, code):
        return sum(server_fixture.metrics.values(self.server.metric_samples(), "graphserve_requests_total",
                                                 model=SLOW, code=code))

    def in_flight(self):
        return sum(server_fixture.metrics.values(self.server.metric_samples(), "graphserve_requests_in_flight",
                                                 model=SLOW))

    def rest_infer(self, **kwargs):
        """One REST infer call on its own connection; (HTTP status as a string, message, seconds)."""
        client = self.server.http_client(network_timeout=300)
        started = time.monotonic()
        try:
            client.infer(SLOW, rest_inputs(), **kwargs)
            return "200", "", time.monotonic() - started
        except server_fixture.InferenceServerException as error:
            return error.status(), error.message(), time.monotonic() - started
        finally:
            client.close()


class RestDeadlineTest(DeadlineTestCase):
    @classmethod
    def setUpClass(cls):
        cls.start_server("--model-repository", str(slow_repository("rest_deadline_repository")),
                         log_name="rest_deadline")

    def test_a_deadline_that_cannot_be_met_is_refused_at_once_and_really_could_not_be_met(self):
        # Three runs settle the slow bucket's estimate (admission then trusts it) and time one run.
        run_s = min(self.rest_infer()[2] for _ in range(3))
        deadline_us = int(run_s * 1e6)
        # The model's instance busy with one call and more queued behind it. Twelve are sent so that
        # four or more stay in flight for several runs: on a loaded host the first calls may finish
        # before the last threads send theirs, and a scrape must still catch four at once.
        ahead = [threading.Thread(target=self.rest_infer) for _ in range(12)]
        for thread in ahead:
            thread.start()
        self.server.wait_until(lambda _: self.in_flight() >= 4, 60, "four slow calls in flight")
        refused_before = self.requests_total("deadline_exceeded")

        status, message, refused_s = self.rest_infer(timeout=deadline_us)
        self.assertEqual(status, "504", message)
        self.assertIn("deadline", message)
        # Refused on arrival, not after waiting: well within one run of the model.
        self.assertLess(refused_s, run_s / 2, message)
        # Its twin, without a deadline, takes the place in the queue the refused call would have:
        # its answer comes after the refused deadline, so that deadline really could not be met.
        status, message, twin_s = self.rest_infer()
        self.assertEqual(status, "200", message)
        self.assertGreater(twin_s, deadline_us / 1e6)
        for thread in ahead:
            thread.join()
        self.assertEqual(self.requests_total("deadline_exceeded") - refused_before, 1)

    def test_a_deadline_that_can_be_met_is_served(self):
        status, message, _ = self.rest_infer(timeout=60_000_000)
        self.assertEqual(status, "200", message)


class ServerDeadlineTest(DeadlineTestCase):
    """--http-infer-deadline-ms 20: no run of the slow model fits, so every REST call fails for its
    deadline, the one sending a longer `timeout` too (capped); gRPC calls have no such deadline.
    20 ms rather than less: long enough for the in-process hop to the model, so that the model
    counts each call (a deadline gone before the call reaches it is answered 504 uncounted)."""

    DEADLINE_MS = 20

    @classmethod
    def setUpClass(cls):
        cls.start_server("--model-repository", str(slow_repository("server_deadline_repository")),
                         "--http-infer-deadline-ms", str(cls.DEADLINE_MS), log_name="server_deadline")

    def test_the_servers_rest_deadline_applies_and_caps_the_clients(self):
        # The premise: a run of the slow model takes longer than the deadline on this host.
        run_s = min(server_fixture.metrics.values(self.server.metric_samples(),
                                                  "graphserve_bucket_cost_estimate_seconds", model=SLOW))
        self.assertGreater(run_s, self.DEADLINE_MS / 1000)
        for kwargs in ({}, {"timeout": 60_000_000}):
            status, message, _ = self.rest_infer(**kwargs)
            self.assertEqual(status, "504", f"{kwargs}: {message}")
        self.server.wait_until(lambda _: self.requests_total("deadline_exceeded") >= 2, 60,
                               "both REST calls counted in /metrics")
        self.assertEqual(self.requests_total("deadline_exceeded"), 2)
        self.assertEqual(self.requests_total("success"), 0)
        self.client.infer(SLOW, server_fixture.token_inputs(np.ones((1, 4), np.int64), np.ones((1, 4), np.int64)))
        # Counted once written, which its client may see first.
        self.server.wait_until(lambda _: self.requests_total("success") == 1, 10, "the gRPC call's success")


if __name__ == "__main__":
    unittest.main()
