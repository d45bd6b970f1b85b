#!/usr/bin/env python3
"""A REST client that leaves before its answer: its requests are cancelled as a gRPC client's are
(out of the queue, counted `cancelled` in /metrics), not run and counted as successes for nobody
(issue #43: answers whose client stopped reading)."""
import json
import socket
import time
import unittest

import torch

import server_fixture
from test_statistics import SLOW, SLOW_CONFIG, Slow

REQUESTS = 6


def infer_body():
    ids = list(range(1, 9))
    return json.dumps({"inputs": [
        {"name": "input_ids", "datatype": "INT64", "shape": [1, 8], "data": ids},
        {"name": "attention_mask", "datatype": "INT64", "shape": [1, 8], "data": [1] * 8}]}).encode()


class RestClientGoneTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        repository = server_fixture.scratch_dir("rest_client_gone_repository")
        slow_dir = repository / SLOW
        slow_dir.mkdir(parents=True, exist_ok=True)
        (slow_dir / "config.pbtxt").write_text(SLOW_CONFIG)
        torch.jit.script(Slow().eval()).save(str(slow_dir / "model.pt"))
        cls.start_server("--model-repository", str(repository), log_name="rest_client_gone")

    def requests_total(self, code):
        return sum(value for name, labels, value in self.server.metric_samples()
                   if name == "graphserve_requests_total" and labels.get("model") == SLOW
                   and labels.get("code") == code)

    def test_requests_of_a_client_that_left_are_cancelled_not_run(self):
        host, port = self.server.http_url.split(":")
        body = infer_body()
        head = (f"POST /v2/models/{SLOW}/infer HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        # One instance, one row a batch: the first runs, the others queue behind it.
        clients = [socket.create_connection((host, int(port))) for _ in range(REQUESTS)]
        for client in clients:
            client.sendall(head + body)
        time.sleep(0.05)
        for client in clients:
            client.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            cancelled, succeeded = self.requests_total("cancelled"), self.requests_total("success")
            if cancelled + succeeded >= REQUESTS:
                break
            time.sleep(0.1)
        # The queued ones leave the queue unrun; one may have started, and finish, before the
        # watcher (every 100 ms) saw its client go.
        self.assertGreaterEqual(cancelled, REQUESTS - 2, (cancelled, succeeded))
        self.assertEqual(cancelled + succeeded, REQUESTS)
        # The server still serves a client that stays.
        client = self.server.http_client()
        self.assertTrue(client.is_server_ready())


if __name__ == "__main__":
    unittest.main()
