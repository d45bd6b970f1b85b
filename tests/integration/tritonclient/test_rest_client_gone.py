#!/usr/bin/env python3
"""A REST client that leaves before its answer: its requests are cancelled as a gRPC client's are
(out of the queue, counted `cancelled` in /metrics), not run and counted as successes for nobody
(issue #43: answers whose client stopped reading)."""
import json
import random
import socket
import threading
import time
import unittest

import torch

import server_fixture
from test_statistics import SLOW, SLOW_CONFIG, Slow

REQUESTS = 6
QUICK = "quick"
# Clients that leave just as their answer comes, each request counted under exactly one code.
RACING_REQUESTS = 240


class Quick(torch.nn.Module):
    """Answers in about a millisecond: its answers come while clients are leaving."""

    def forward(self, input_ids, attention_mask):
        return attention_mask.to(torch.float32) * 0.5 + 0.5


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
        quick_dir = repository / QUICK
        quick_dir.mkdir(parents=True, exist_ok=True)
        (quick_dir / "config.pbtxt").write_text(SLOW_CONFIG.replace(f'name: "{SLOW}"', f'name: "{QUICK}"'))
        torch.jit.script(Quick().eval()).save(str(quick_dir / "model.pt"))
        cls.start_server("--model-repository", str(repository), log_name="rest_client_gone")

    def requests_total(self, code, model=SLOW):
        return sum(value for name, labels, value in self.server.metric_samples()
                   if name == "graphserve_requests_total" and labels.get("model") == model
                   and (code is None or labels.get("code") == code))

    def request_head(self, model, body):
        host, _ = self.server.http_url.split(":")
        return (f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()

    def test_requests_of_a_client_that_left_are_cancelled_not_run(self):
        host, port = self.server.http_url.split(":")
        body = infer_body()
        head = self.request_head(SLOW, body)
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

    def test_a_client_leaving_as_its_answer_comes_is_counted_once(self):
        """Each REST call of a client that closes its connection at a random moment around its
        answer is counted under exactly one code: delivered (success), or cancelled (left the
        queue, or its answer was dropped), also when REST gives its call up just as the gRPC
        service hands the answer over (AnswerHandover)."""
        host, port = self.server.http_url.split(":")
        body = infer_body()
        request = self.request_head(QUICK, body) + body
        before = self.requests_total(None, QUICK)

        def leave_at_random(seed):
            rng = random.Random(seed)
            for _ in range(RACING_REQUESTS // 8):
                with socket.create_connection((host, int(port))) as client:
                    client.sendall(request)
                    # A plain close: the request was sent whole, so the server has it (a reset
                    # could discard it unread, and then there is nothing to count).
                    time.sleep(rng.uniform(0, 0.004))

        threads = [threading.Thread(target=leave_at_random, args=(seed,)) for seed in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        deadline = time.monotonic() + 30
        counted = 0
        while time.monotonic() < deadline:
            counted = self.requests_total(None, QUICK) - before
            if counted >= RACING_REQUESTS:
                break
            time.sleep(0.1)
        time.sleep(0.5)  # a second count of any of them would come by now
        counted = self.requests_total(None, QUICK) - before
        print(f"{RACING_REQUESTS} racing calls: success {self.requests_total('success', QUICK):.0f}, "
              f"cancelled {self.requests_total('cancelled', QUICK):.0f}")
        self.assertEqual(counted, RACING_REQUESTS)


if __name__ == "__main__":
    unittest.main()
