#!/usr/bin/env python3
"""SIGTERM under mixed load loses nothing (issue #43): REST calls (raw HTTP/1.1 with JSON bodies, as
any client sends them), gRPC calls and ModelStreamInfer streams in flight when the signal comes are
all answered OK, the calls sent after it are answered or refused with a status that says the server
is shutting down, none hangs, and the process exits 0. Repeated over many fresh servers, since what
broke was a race: the REST endpoint's in-process gRPC channel closed at once on shutdown (every REST
call in flight failed "Transport closed"), the answer of a call cancelled that way then reached a
completion queue already shut down (SIGSEGV or a gRPC assertion), and a REST call's last reference to
that channel, dropped on gRPC's callback thread, could shut that thread's own queue down at exit.

The model is tiny_spin, whose request takes as long as its largest token id says: every request is
made to take about SPIN_MS, so that a queue of them is still draining when the signal comes."""
import http.client
import json
import os
import random
import signal
import subprocess
import threading
import time
import unittest

import numpy as np

import server_fixture
from server_fixture import InferenceServerException

MODEL = "tiny_spin"
OUTPUT = "spun"
# About how long one request runs; the model's one instance runs them one at a time.
SPIN_MS = 25
# Runs go on until this many seconds have passed, at least MIN_RUNS and at most MAX_RUNS of them;
# GRAPHSERVE_SHUTDOWN_RUNS asks for an exact number instead (e.g. 200 for a soak).
BUDGET_S = 90
MIN_RUNS = 20
MAX_RUNS = 50
# A call not answered by then counts as hung.
CALL_TIMEOUT_S = 60
# Requests each stream sends before the signal, and after it.
STREAM_HELD = 4
STREAM_LATE = 2
# Calls each unary caller sends after the signal, unless refused first.
LATE_CALLS = 3
# What a refusal during the drain must say.
SHUTTING_DOWN = "shutting down"
# What gRPC says of a call that could not reach the server at all, once it stopped listening: not
# accepted, so not lost.
NOT_CONNECTED = ("failed to connect", "Connection refused")
# What a client reads when its call reaches the server just as gRPC's shutdown begins: gRPC drops
# the call before graphserve sees it (a "zombie" in gRPC's server), resetting its stream. Only a
# call sent after the signal can meet it; it was never accepted.
DROPPED_BY_GRPC = ("StatusCode.CANCELLED", "CANCELLED")


def token_ids(spin):
    """One row whose largest id makes tiny_spin loop `spin` times."""
    ids = np.ones((1, 4), dtype=np.int64)
    ids[0, 0] = spin
    return ids


def grpc_inputs(spin):
    ids = token_ids(spin)
    return server_fixture.token_inputs(ids, np.ones_like(ids))


def rest_body(spin):
    ids = token_ids(spin)
    tensors = [{"name": name, "shape": list(ids.shape), "datatype": "INT64", "data": ids.flatten().tolist()}
               for name in ("input_ids", "attention_mask")]
    tensors[1]["data"] = [1] * ids.size
    return json.dumps({"inputs": tensors})


def rest_infer(connection, body):
    """One REST infer call on a keep-alive connection: (HTTP status, body)."""
    connection.request("POST", f"/v2/models/{MODEL}/infer", body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    return response.status, response.read().decode(errors="replace")


def held_requests(server):
    """Requests the server holds or has answered: every ModelInfer (and stream request) it took."""
    return sum(value for name, _, value in server.metric_samples()
               if name in ("graphserve_requests_in_flight", "graphserve_requests_total"))


def wait_until_held(server, count):
    """Polls /metrics until the server holds (or has answered) `count` requests; false after 30 s."""
    give_up = time.monotonic() + 30
    while held_requests(server) < count:
        if time.monotonic() > give_up:
            return False
        time.sleep(0.002)
    return True


class Outcomes:
    """What every call of one run came to, from the callers' threads."""

    def __init__(self, reference):
        self.reference = reference
        self.problems = []
        self.counts = {"held_ok": 0, "late_ok": 0, "late_refused": 0, "late_not_connected": 0,
                       "late_dropped_by_grpc": 0}
        self._lock = threading.Lock()

    def count(self, what):
        with self._lock:
            self.counts[what] += 1

    def problem(self, text):
        with self._lock:
            self.problems.append(text)

    def check_answer(self, what, held, answer):
        if answer.shape != self.reference.shape or not np.allclose(answer, self.reference, rtol=1e-5, atol=1e-6):
            self.problem(f"{what}: a wrong answer {answer.flatten()[:4]}")
        else:
            self.count("held_ok" if held else "late_ok")


class Caller(threading.Thread):
    """A thread of calls whose every failure, an unexpected exception included, is a problem of the
    run."""

    def __init__(self, name, signalled, outcomes):
        super().__init__(name=name, daemon=True)
        self.signalled, self.outcomes = signalled, outcomes

    def run(self):
        try:
            self.calls()
        except Exception as error:  # noqa: BLE001  (reported, not swallowed)
            self.outcomes.problem(f"{self.name}: {error!r}")

    def rounds(self):
        """(held, what) for each call: the first before the signal, up to LATE_CALLS after it."""
        for index in range(1 + LATE_CALLS):
            held = index == 0
            if not held:
                self.signalled.wait()
            yield held, f"{self.name} {'held' if held else 'late'} call {index}"


class RestCaller(Caller):
    """One keep-alive connection: a call before the signal, then up to LATE_CALLS after it."""

    def __init__(self, name, port, body, signalled, outcomes):
        super().__init__(name, signalled, outcomes)
        self.port, self.body = port, body

    def calls(self):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=CALL_TIMEOUT_S)
        try:
            for held, what in self.rounds():
                try:
                    status, body = rest_infer(connection, self.body)
                except TimeoutError:
                    self.outcomes.problem(f"{what}: no answer within {CALL_TIMEOUT_S} s")
                    return
                except (OSError, http.client.HTTPException) as error:
                    # The server stopped listening, or closed the connection as it exited: a call
                    # it never took. One it had taken must have been answered.
                    if held:
                        self.outcomes.problem(f"{what}: connection lost: {error!r}")
                    else:
                        self.outcomes.count("late_not_connected")
                    return
                if status == 200:
                    answer = json.loads(body)["outputs"][0]
                    self.outcomes.check_answer(what, held, np.array(answer["data"], dtype=np.float32)
                                               .reshape(answer["shape"]))
                    continue
                if not held and status == 503 and SHUTTING_DOWN in body:
                    self.outcomes.count("late_refused")
                else:
                    self.outcomes.problem(f"{what}: HTTP {status} {body}")
                return
        finally:
            connection.close()


class GrpcCaller(Caller):
    """One client: a ModelInfer call before the signal, then up to LATE_CALLS after it."""

    def __init__(self, name, url, spin, signalled, outcomes):
        super().__init__(name, signalled, outcomes)
        self.url, self.spin = url, spin

    def calls(self):
        with server_fixture.grpcclient.InferenceServerClient(self.url) as client:
            for held, what in self.rounds():
                try:
                    result = client.infer(MODEL, grpc_inputs(self.spin), client_timeout=CALL_TIMEOUT_S)
                except InferenceServerException as error:
                    status, message = error.status(), error.message()
                    unavailable = not held and status == "StatusCode.UNAVAILABLE"
                    if unavailable and SHUTTING_DOWN in message:
                        self.outcomes.count("late_refused")
                    elif unavailable and any(text in message for text in NOT_CONNECTED):
                        self.outcomes.count("late_not_connected")
                    elif not held and (status, message) == DROPPED_BY_GRPC:
                        self.outcomes.count("late_dropped_by_grpc")
                    else:
                        self.outcomes.problem(f"{what}: {status} {message}")
                    return
                self.outcomes.check_answer(what, held, result.as_numpy(OUTPUT))


class StreamCaller(Caller):
    """One ModelStreamInfer stream: STREAM_HELD requests before the signal, STREAM_LATE after it,
    then a half-close, after which the server finishes the stream once everything is answered."""

    def __init__(self, name, url, spin, signalled, outcomes):
        super().__init__(name, signalled, outcomes)
        self.url, self.spin = url, spin
        self.answers = []

    def calls(self):
        with server_fixture.grpcclient.InferenceServerClient(self.url) as client:
            client.start_stream(callback=lambda result, error: self.answers.append((result, error)))
            for index in range(STREAM_HELD):
                client.async_stream_infer(MODEL, grpc_inputs(self.spin), request_id=f"held-{index}")
            self.signalled.wait()
            for index in range(STREAM_LATE):
                client.async_stream_infer(MODEL, grpc_inputs(self.spin), request_id=f"late-{index}")
            client.stop_stream()  # returns once the server has finished the stream
        answered = set()
        for result, error in self.answers:
            if error is not None:
                # A request's own failure carries no status; the stream's does.
                if error.status() is None and SHUTTING_DOWN in error.message():
                    self.outcomes.count("late_refused")
                    answered.add("late")
                else:
                    self.outcomes.problem(f"{self.name}: {error.status()} {error.message()}")
                continue
            request_id = result.get_response().id
            answered.add(request_id)
            self.outcomes.check_answer(f"{self.name} {request_id}", request_id.startswith("held"),
                                       result.as_numpy(OUTPUT))
        missing = [f"held-{index}" for index in range(STREAM_HELD) if f"held-{index}" not in answered]
        if missing or len(self.answers) != STREAM_HELD + STREAM_LATE:
            self.outcomes.problem(f"{self.name}: {len(self.answers)} answers for {STREAM_HELD + STREAM_LATE} "
                                  f"requests, held ones missing: {missing}")


class ShutdownTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repository = server_fixture.scratch_dir("shutdown_repository")
        server_fixture.copy_model(MODEL, cls.repository)
        cls.spin = None

    def serve(self, log_name, *args):
        return server_fixture.Server("--model-repository", str(self.repository), *args, log_name=log_name)

    def spin_for(self, server, milliseconds):
        """The token id that makes one request run about `milliseconds`, measured on this machine."""
        probe = 20000
        took_ms = []
        with server.client() as client:
            client.infer(MODEL, grpc_inputs(1))
            for _ in range(2):  # the quicker, since a busy machine only ever slows a probe down
                started = time.monotonic()
                client.infer(MODEL, grpc_inputs(probe))
                took_ms.append((time.monotonic() - started) * 1000)
        return max(1, int(probe * milliseconds / min(took_ms)))

    def run_once(self, run, rng):
        """One server, one signal under load: (exit status, Outcomes, the server's log)."""
        with self.serve(f"shutdown_run{run}") as server:
            if self.__class__.spin is None:
                self.__class__.spin = self.spin_for(server, SPIN_MS)
            with server.client() as client:
                reference = client.infer(MODEL, grpc_inputs(self.spin)).as_numpy(OUTPUT)
            outcomes = Outcomes(reference)
            signalled = threading.Event()
            # Every run has REST calls in flight (what crashed); gRPC calls and streams each come in
            # half of the runs, since a drain with REST calls alone reached the shut-down queues
            # soonest.
            callers = [RestCaller(f"rest{i}", server.http_port, rest_body(self.spin), signalled, outcomes)
                       for i in range(rng.randint(4, 16))]
            callers += [GrpcCaller(f"grpc{i}", server.url, self.spin, signalled, outcomes)
                        for i in range(rng.randint(1, 12) if rng.random() < 0.5 else 0)]
            streams = rng.randint(1, 2) if rng.random() < 0.5 else 0
            callers += [StreamCaller(f"stream{i}", server.url, self.spin, signalled, outcomes)
                        for i in range(streams)]
            held_before = held_requests(server)
            to_hold = len(callers) - streams + streams * STREAM_HELD
            for caller in callers:
                caller.start()
            # The signal goes once the server holds every call sent so far, so each must be
            # answered; a random moment later, so that it finds the queue at different depths.
            self.assertTrue(wait_until_held(server, held_before + to_hold), server.log()[-4000:])
            time.sleep(rng.uniform(0, to_hold * SPIN_MS / 1000 / 2))
            server.process.send_signal(signal.SIGTERM)
            signalled.set()
            for caller in callers:
                caller.join(CALL_TIMEOUT_S + 10)
                if caller.is_alive():
                    outcomes.problem(f"{caller.name}: still waiting {CALL_TIMEOUT_S + 10} s after the signal")
            try:
                status = server.process.wait(timeout=60)
            except subprocess.TimeoutExpired:  # __exit__ kills it
                status = "still running 60 s after the signal"
            return status, outcomes, server.log()

    def test_sigterm_under_mixed_rest_grpc_and_stream_load_loses_nothing(self):
        runs = int(os.environ.get("GRAPHSERVE_SHUTDOWN_RUNS", "0"))
        started = time.monotonic()
        totals = {}
        failed_runs = []
        run = 0
        while (run < runs) if runs else (run < MIN_RUNS or (run < MAX_RUNS and time.monotonic() - started < BUDGET_S)):
            status, outcomes, log = self.run_once(run, random.Random(run))
            for key, value in outcomes.counts.items():
                totals[key] = totals.get(key, 0) + value
            if status != 0 or outcomes.problems:
                failed_runs.append((run, status, outcomes.problems, log))
            run += 1
        crashed = [f"run {number}: exit status {status}" for number, status, _, _ in failed_runs if status != 0]
        lost = [f"run {number}: {problem}" for number, _, problems, _ in failed_runs for problem in problems]
        summary = (f"{run} runs in {time.monotonic() - started:.0f} s: {len(crashed)} did not exit 0, "
                   f"{len(lost)} calls lost or answered wrongly; {totals}")
        print(summary)
        if failed_runs:
            first_log = failed_runs[0][3]
            self.fail("\n".join([summary, *crashed, *lost[:40], "first failed run's log:", first_log[-6000:]]))
        self.assertGreater(totals["held_ok"], 0)

    def test_calls_still_running_at_the_drain_timeout_are_refused_clearly_and_the_exit_is_clean(self):
        """A REST and a gRPC call whose requests run past a 1 s drain timeout: the REST call is
        answered 503 naming the drain timeout (not "Transport closed"), the gRPC call is cancelled
        by gRPC (UNAVAILABLE), and once the batch running then ends and its answer reaches its
        cancelled call, the process exits 0."""
        with self.serve("shutdown_drain_timeout", "--drain-timeout-s", "1") as server:
            if self.__class__.spin is None:
                self.__class__.spin = self.spin_for(server, SPIN_MS)
            # About 3 s each, run one after the other: the one running and the one queued behind it
            # are both still open at the 1 s deadline even if the estimate is 3 times too long, and
            # the running one ends well within the 10 s grace even if it is 3 times too short.
            long_spin = self.spin * 3000 // SPIN_MS
            outcomes = {}

            def rest():
                connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=CALL_TIMEOUT_S)
                try:
                    outcomes["rest"] = rest_infer(connection, rest_body(long_spin))
                finally:
                    connection.close()

            def grpc():
                with server.client() as client:
                    try:
                        client.infer(MODEL, grpc_inputs(long_spin), client_timeout=CALL_TIMEOUT_S)
                        outcomes["grpc"] = ("OK", "")
                    except InferenceServerException as error:
                        outcomes["grpc"] = (error.status(), error.message())

            held_before = held_requests(server)
            callers = [threading.Thread(target=rest, daemon=True), threading.Thread(target=grpc, daemon=True)]
            for caller in callers:
                caller.start()
            self.assertTrue(wait_until_held(server, held_before + 2), server.log()[-4000:])
            server.process.send_signal(signal.SIGTERM)
            for caller in callers:
                caller.join(CALL_TIMEOUT_S)
            status = server.process.wait(timeout=60)
            log = server.log()[-4000:]
        self.assertEqual(status, 0, log)
        rest_status, rest_body_text = outcomes["rest"]
        self.assertEqual(rest_status, 503, rest_body_text)
        self.assertIn("drain timeout", rest_body_text)
        self.assertEqual(outcomes["grpc"][0], "StatusCode.UNAVAILABLE", outcomes["grpc"])
        self.assertIn("drain timeout: the REST requests still unanswered are cancelled", log)


if __name__ == "__main__":
    unittest.main()
