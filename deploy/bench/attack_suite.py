#!/usr/bin/env python3
"""Hostile and careless clients against the real server (issue #43): each attack runs against a fresh
graphserve serving the built-in encoder on the CPU while normal clients (tritonclient over REST and
gRPC, and a /metrics scraper) keep calling, and the table says what the attack did to them and to the
server's memory.

  attack_suite.py --build-dir build --out /tmp/attacks            # CI's scale, a few minutes
  attack_suite.py --build-dir build --out /tmp/attacks --full     # the issue's figures
  attack_suite.py ... --only rest_slowloris,sigterm_drain --scale 4

Columns: the normal clients' p50/p99 in ms during the attack (a call that failed counts at the time
it took to fail), the server's RSS before / peak / after in MiB (after: once the attack's connections
are gone and the heap's periodic trim has run), answers lost (normal calls that got no answer, or for
the drain, calls taken and then dropped), and a verdict:
  bounded         the attack stayed within the server's bounds at this scale
  known-open #43.N  it hurt, in the way issue #43's point N records and has not fixed yet
  FAIL            a crash, a lost answer where none may be lost, or a bound that exists today exceeded
The exit status is 1 when any row is FAIL, 0 otherwise: known, documented weaknesses do not fail it.
Writes OUT/attacks.md (the table) and OUT/attacks.json (every figure and failure message).
"""
import argparse
import http.client
import json
import os
import re
import resource
import signal
import socket
import stat
import sys
import threading
import time
import urllib.request
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_support import metrics as metrics_text  # noqa: E402
from bench_support.common import fail, log  # noqa: E402
from bench_support.hostile import Trickler, close_all, open_sockets, read_answer, still_open  # noqa: E402
from bench_support.raw_h2 import RawH2, grpc_message_prefix  # noqa: E402
from bench_support.repository import builtin_encoder_config, write_repository  # noqa: E402
from bench_support.server import Server  # noqa: E402

try:
    import tritonclient.grpc as grpcclient
    import tritonclient.grpc.service_pb2 as service_pb2
    import tritonclient.http as httpclient
except ImportError as missing:
    print(f"SKIPPED: {missing}; deploy/install-deps.sh installs tritonclient[grpc,http]")
    sys.exit(77)

MODEL = "encoder"
INFER_PATH = f"/v2/models/{MODEL}/infer"
GRPC_INFER = "/inference.GRPCInferenceService/ModelInfer"
MIB = 1 << 20
# The REST body limit and the gRPC message limit for the built-in encoder (docs/running.md, Limits):
# its largest request is far below the floors.
REST_BODY_LIMIT = 16 * MIB
# REST's default --http-max-buffered-bytes (server/include/graphserve/server/http/http_client_bounds.h).
REST_BUFFER_BUDGET = 1024 * MIB
GRPC_MESSAGE_LIMIT = 4 * MIB
# The /metrics endpoint's connection cap and REST's (server/src/observability/metrics_endpoint.cpp,
# server/include/graphserve/server/http/http_server.h).
METRICS_CONNECTION_CAP = 64
REST_CONNECTION_CAP = 1024
# Slower than this many times the idle p99 (plus a floor for a loaded machine's jitter) is damage.
SLOWDOWN_FACTOR = 2
JITTER_FLOOR_MS = 50
# The server hands free heap back every 5 s: "after" is read once that has run.
SETTLE_S = 6

# Rows of each unread call: its answer is rows x 512 x 256 floats (1 MiB for 2). More rows make
# each answer larger, but computing them on a busy CPU then outlasts the attack.
UNREAD_ANSWER_ROWS = 2

# Each attack's size: (CI default, --full), multiplied by --scale where it is a count.
SCALES = {
    "grpc_incomplete_streams": (16, 500),
    "rest_incomplete_bodies": (8, 200),
    "grpc_unread_answers": (16, 150),
    "rest_slowloris": (128, 1100),
    "rest_idle": (128, 5000),
    "rest_past_cap": (REST_CONNECTION_CAP + 16, REST_CONNECTION_CAP + 100),
    "metrics_slow": (4 * METRICS_CONNECTION_CAP, 5000),
    "metrics_idle": (4 * METRICS_CONNECTION_CAP, 5000),
    "transfer_encoding": (8, 64),
    "bad_requests": (2000, 20000),
    "gzip_bombs": (4, 64),
    "sigterm_runs": (3, 50),
    "descriptor_connections": (300, 1000),
    "grpc_descriptor_connections": (600, 5000),
}


def percentile(values, fraction):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def rss_mib(pid, field="VmRSS"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError):
        return None


def token_inputs(client_module):
    """A one-row request's input_ids and attention_mask as `client_module`'s (tritonclient.http's or
    .grpc's) InferInputs."""
    inputs = []
    for name in ("input_ids", "attention_mask"):
        tensor = client_module.InferInput(name, [1, 16], "INT64")
        tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.int64))
        inputs.append(tensor)
    return inputs


class RssSampler(threading.Thread):
    """The server's VmRSS every 50 ms; peak is the largest seen."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = rss_mib(pid) or 0
        self._halt = threading.Event()

    def run(self):
        while not self._halt.wait(0.05):
            value = rss_mib(self.pid)
            if value is not None:
                self.peak = max(self.peak, value)

    def stop(self):
        self._halt.set()
        self.join()
        return self.peak


class NormalCaller(threading.Thread):
    """A well-behaved client calling in a loop until stopped, timing every call; a failed call is
    timed too and its error kept."""

    def __init__(self, make_call, stopped, pause_s=0.02):
        super().__init__(daemon=True)
        self.make_call, self.stopped, self.pause_s = make_call, stopped, pause_s
        self.latencies_ms, self.errors = [], []

    def run(self):
        call = None
        while not self.stopped.is_set():
            started = time.monotonic()
            try:
                if call is None:
                    call = self.make_call()
                call()
                self.latencies_ms.append((time.monotonic() - started) * 1000)
            except Exception as error:  # noqa: BLE001  (every failure is a figure of the table)
                self.latencies_ms.append((time.monotonic() - started) * 1000)
                self.errors.append(f"{type(error).__name__}: {str(error)[:160]}")
                call = None  # a fresh client: the old one's connection may be what hung
                self.stopped.wait(0.1)
            self.stopped.wait(self.pause_s)


class NormalClients:
    """One REST, one gRPC and one /metrics caller against `server`, each call bounded by timeout_s."""

    def __init__(self, server, timeout_s):
        self.stopped = threading.Event()

        def rest():
            client = httpclient.InferenceServerClient(server.http, connection_timeout=timeout_s,
                                                      network_timeout=timeout_s)
            inputs = token_inputs(httpclient)
            outputs = [httpclient.InferRequestedOutput("pooler_output")]
            return lambda: client.infer(MODEL, inputs, outputs=outputs)

        def grpc():
            client = grpcclient.InferenceServerClient(server.grpc)
            inputs = token_inputs(grpcclient)
            outputs = [grpcclient.InferRequestedOutput("pooler_output")]
            return lambda: client.infer(MODEL, inputs, outputs=outputs, client_timeout=timeout_s)

        def scrape():
            def once():
                with urllib.request.urlopen(server.metrics_url, timeout=timeout_s) as answer:
                    answer.read()
            return once

        self.callers = {"rest": NormalCaller(rest, self.stopped), "grpc": NormalCaller(grpc, self.stopped),
                        "scrape": NormalCaller(scrape, self.stopped, pause_s=0.25)}

    def run_for(self, seconds):
        for caller in self.callers.values():
            caller.start()
        time.sleep(seconds)
        return self.stop()

    def start(self):
        for caller in self.callers.values():
            caller.start()

    def stop(self):
        self.stopped.set()
        for caller in self.callers.values():
            caller.join()
        return {name: {"p50_ms": percentile(c.latencies_ms, 0.5), "p99_ms": percentile(c.latencies_ms, 0.99),
                       "calls": len(c.latencies_ms), "failed": len(c.errors), "errors": sorted(set(c.errors))[:5]}
                for name, c in self.callers.items()}


# Connections each address opens where an attack stands for many clients: within gRPC's cap per
# address under `ulimit -n 256` (21), so that only the descriptors run out.
GRPC_CONNECTIONS_PER_SOURCE = 16
def loopback_sources(block, count):
    """`count` distinct loopback addresses, 127.`block`.x.y, to call from as that many hosts (all of
    127/8 reaches this host). One octet holds only 255 of them: 5,000 connections 16 to an address
    need 313, and 127.0.3.256 ended --full's attack at 255 connections."""
    return [f"127.{block}.{i // 250}.{1 + i % 250}" for i in range(count)]


# What an HTTP/2 client sends first on a connection (RFC 9113, 3.4).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def read_status(sock, timeout_s):
    """The HTTP status code the server answered on `sock` within timeout_s, or None."""
    return read_answer(sock, timeout_s)[0]


def rest_headers(port, content_length=None, extra=""):
    length = "" if content_length is None else f"Content-Length: {content_length}\r\n"
    return (f"POST {INFER_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"{length}{extra}\r\n").encode()


def grpc_request(rows, length=512, outputs=("last_hidden_state",)):
    """A serialized, valid ModelInferRequest for the encoder."""
    request = service_pb2.ModelInferRequest(model_name=MODEL)
    for name in ("input_ids", "attention_mask"):
        tensor = request.inputs.add(name=name, datatype="INT64")
        tensor.shape.extend([rows, length])
        request.raw_input_contents.append(np.ones((rows, length), dtype=np.int64).tobytes())
    for name in outputs:
        request.outputs.add(name=name)
    return request.SerializeToString()


class Context:
    """What a case gets: the server, the suite's options and a way to measure the normal clients for
    the attack's duration."""

    def __init__(self, args, server, ports):
        self.args, self.server, self.ports = args, server, ports
        self.notes, self.violations = [], []
        self.normal = None
        self.lost = 0
        self.held_mib = None  # what the attacker made the server hold, where a case knows it
        self.rss_held = None

    def size(self, name):
        ci, full = SCALES[name]
        return full if self.args.full else ci

    def count(self, name):
        return max(1, int(self.size(name) * self.args.scale))

    def measure(self, seconds=None):
        """Normal clients for `seconds` (--hold-s), while the attack holds."""
        clients = NormalClients(self.server, self.args.call_timeout_s)
        hold_s = self.args.hold_s if seconds is None else seconds
        self.normal = clients.run_for(hold_s)
        # What the server holds while the attack still does, without the peak of computing it: once
        # the server's periodic heap trim has run, so that memory it freed is not counted as held.
        if self.held_mib is not None:
            time.sleep(max(0.0, SETTLE_S - hold_s))
        self.rss_held = rss_mib(self.server.process.pid)
        self.lost += sum(figures["failed"] for figures in self.normal.values())


# The cases. Each sets up its hostile clients, calls ctx.measure() while they hold, and tears them
# down; ctx.violations makes the row FAIL (a bound that exists today, exceeded).

# The gRPC transport's memory budget the grpc_incomplete_messages case runs with: half of what CI's
# scale sends.
GRPC_CASE_BUDGET = 32 * MIB


def grpc_incomplete_messages(ctx):
    """HTTP/2 streams whose gRPC message declares (almost) the limit and never gets its last bytes."""
    streams = ctx.count("grpc_incomplete_streams")
    declared = GRPC_MESSAGE_LIMIT - 1024
    payload = grpc_message_prefix(declared) + b"\x00" * (declared - 64 * 1024)
    connection = RawH2(("127.0.0.1", ctx.ports["grpc"]))
    deadline = time.monotonic() + ctx.args.send_budget_s
    sent_on = {}
    for _ in range(streams):
        if (connection.peer_max_streams or streams) <= len(connection.stream_windows) or connection.closed:
            break
        stream = connection.open_stream(GRPC_INFER)
        sent_on[stream] = connection.send_data(stream, payload, deadline=deadline)
        if time.monotonic() > deadline:
            break
    sent = sum(sent_on.values())
    ctx.held_mib = sent / MIB
    ctx.notes.append(f"{len(connection.stream_windows)} streams, {sent / MIB:.0f} MiB sent")
    ctx.measure()
    # What the server cancelled (--grpc-memory-budget-bytes) it no longer holds for the attacker; what
    # it still holds is bounded by the budget, and must stay within it (plus what is in flight).
    ctx.memory_budget_mib = GRPC_CASE_BUDGET / MIB
    ctx.memory_bound_mib = 2 * GRPC_CASE_BUDGET / MIB
    ctx.held_mib = sum(count for stream, count in sent_on.items()
                       if stream not in connection.reset_streams and stream not in connection.ended_streams) / MIB
    ended = len(connection.reset_streams) + len(connection.ended_streams)
    ctx.notes.append(f"{ended} streams ended by the server, connection {'closed' if connection.closed else 'open'}")
    connection.close()


def rest_incomplete_bodies(ctx):
    """REST bodies that declare the body limit and stop short of it."""
    count = ctx.count("rest_incomplete_bodies")
    body_bytes = REST_BODY_LIMIT - 4096 if ctx.args.full else 8 * MIB
    chunk = b" " * MIB
    sockets = open_sockets(ctx.ports["http"], count, rest_headers(ctx.ports["http"], REST_BODY_LIMIT))
    deadline = time.monotonic() + ctx.args.send_budget_s
    sent = 0
    for s in sockets:
        try:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            for _ in range(body_bytes // MIB):
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
        if time.monotonic() > deadline:
            break
    ctx.held_mib = sent / MIB
    # REST holds bodies against its buffer budget (--http-max-buffered-bytes): past it they are
    # answered 503 unread, so the server's growth is bounded by the budget, not by the attacker.
    ctx.memory_bound_mib = REST_BUFFER_BUDGET / MIB + 128
    ctx.notes.append(f"{len(sockets)} bodies, {sent / MIB:.0f} MiB sent")
    ctx.measure()
    ctx.notes.append(f"{still_open(sockets)}/{len(sockets)} not closed by the server")
    close_all(sockets)


def grpc_unread_answers(ctx):
    """Complete ModelInfer calls for the large output from a client whose window is 0: the server can
    never send the answers' bodies."""
    streams = ctx.count("grpc_unread_answers")
    rows = UNREAD_ANSWER_ROWS
    message = grpc_request(rows)
    connection = RawH2(("127.0.0.1", ctx.ports["grpc"]), receive_window=0)
    deadline = time.monotonic() + ctx.args.send_budget_s
    for _ in range(streams):
        stream = connection.open_stream(GRPC_INFER)
        connection.send_data(stream, grpc_message_prefix(len(message)) + message, end_stream=True, deadline=deadline)
    # The normal clients are measured once every answer is waiting, so that what they see is the
    # held answers' cost, not the queue of the attacker's computation.
    answered = connection.wait_for(lambda c: len(c.answered_streams) >= streams, 2 * ctx.args.send_budget_s)
    answer_mib = rows * 512 * 256 * 4 / MIB
    ctx.held_mib = len(connection.answered_streams) * answer_mib
    ctx.notes.append(f"{streams} calls of {answer_mib:.0f} MiB answers, {len(connection.answered_streams)} "
                     f"answered{'' if answered else ' (not all in time)'}, none read")
    ctx.measure()
    # A call the server cancelled (--grpc-answer-write-timeout-s) has dropped its answer: what the
    # attacker still holds is the answers of the others.
    dropped = len(connection.reset_streams)
    ctx.held_mib = max(0, len(connection.answered_streams) - dropped) * answer_mib
    ctx.notes.append(f"{dropped} calls cancelled by the server, their answers dropped")
    connection.close()


def hold_trickling(ctx, port, count, request_start, header_line):
    """`count` connections to `port` that send `request_start` and then `header_line` a byte a
    second, held while the normal clients are measured; returns them, still open."""
    sockets = open_sockets(port, count, request_start)
    trickler = Trickler(sockets, header_line)
    trickler.start()
    ctx.notes.append(f"{len(sockets)} connections")
    ctx.measure()
    trickler.stopped.set()
    trickler.join()
    return sockets


def rest_slowloris(ctx):
    """REST connections that trickle their headers one byte a second."""
    sockets = hold_trickling(ctx, ctx.ports["http"], ctx.count("rest_slowloris"),
                             b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n",
                             b"X-Slow-Header-Name-That-Never-Ends: " + b"a" * 4000)
    ctx.notes.append(f"{still_open(sockets)}/{len(sockets)} not closed by the server")
    close_all(sockets)


def rest_idle(ctx):
    """REST connections that send nothing at all."""
    sockets = open_sockets(ctx.ports["http"], ctx.count("rest_idle"))
    ctx.notes.append(f"{len(sockets)} connections")
    ctx.measure()
    ctx.notes.append(f"{still_open(sockets)}/{len(sockets)} not closed by the server")
    close_all(sockets)


def rest_past_cap(ctx):
    """More REST connections than the cap, idle, from as many addresses as the cap per address
    needs: are the ones past it refused, or left hanging?"""
    wanted = ctx.count("rest_past_cap")
    sources = loopback_sources(1, 1 + wanted // 200)
    sockets = open_sockets(ctx.ports["http"], wanted, sources=sources)
    ctx.notes.append(f"{len(sockets)} connections" + ("" if len(sockets) == wanted else f" of {wanted} (descriptors)"))
    # One more, from an address of its own: closed at once, or left waiting in the backlog?
    knocked = time.monotonic()
    late = socket.create_connection(("127.0.0.1", ctx.ports["http"]), timeout=5, source_address=("127.0.2.1", 0))
    try:
        closed = late.recv(1) == b""
    except OSError as error:
        closed = not isinstance(error, socket.timeout)  # reset: refused; timed out: hanging
    late.close()
    waited_ms = (time.monotonic() - knocked) * 1000
    if closed:
        ctx.notes.append(f"one past the cap closed in {waited_ms:.0f} ms")
    else:
        ctx.violations.append(f"a connection past the cap was left hanging ({waited_ms:.0f} ms)")
    # With every slot taken, a normal call is refused at once too, until the header timeout frees
    # slots: what a cap can do against many addresses. Slow or hanging calls still count.
    ctx.refused_at_once = {"rest"}
    ctx.measure()
    ctx.notes.append(f"{still_open(sockets)}/{len(sockets)} not closed by the server")
    close_all(sockets)


def metrics_slow_readers(ctx):
    """Connections to /metrics that trickle their request, four times the endpoint's cap."""
    sockets = hold_trickling(ctx, ctx.ports["metrics"], ctx.count("metrics_slow"), b"GET /metrics HTTP/1.1\r\n",
                             b"X-Slow: " + b"a" * 4000)
    ctx.notes.append(f"{still_open(sockets)}/{len(sockets)} not closed by the server")
    close_all(sockets)


def metrics_idle(ctx):
    """/metrics connections that send nothing, or half a request line and then nothing."""
    count = ctx.count("metrics_idle")
    sockets = open_sockets(ctx.ports["metrics"], count // 2) + open_sockets(ctx.ports["metrics"], count - count // 2,
                                                                              b"GET /met")
    ctx.notes.append(f"{len(sockets)} connections")
    ctx.measure()
    ctx.notes.append(f"{still_open(sockets)}/{len(sockets)} not closed by the server")
    close_all(sockets)


def transfer_encoding(ctx):
    """Bodies framed with a transfer coding other than exactly `chunked`: each must be answered with a
    4xx/501 at once (issue #43 point 5, done), not left holding the connection."""
    port = ctx.ports["http"]
    codings = ["gzip", "identity", "deflate", "gzip, chunked", "chunked, gzip", "x-custom"]
    count = ctx.count("transfer_encoding")
    sockets = open_sockets(port, count)
    answers = {}
    for index, s in enumerate(sockets):
        coding = codings[index % len(codings)]
        try:
            s.sendall(rest_headers(port, extra=f"Transfer-Encoding: {coding}\r\n") + b"5\r\nhello\r\n")
        except OSError:
            pass
    ctx.measure(2)
    for index, s in enumerate(sockets):
        coding = codings[index % len(codings)]
        status = read_status(s, 3)
        answers.setdefault(status, 0)
        answers[status] += 1
        if status is None or not 400 <= status < 600:
            ctx.violations.append(f"Transfer-Encoding '{coding}' answered {status} (want 400 or 501 at once)")
    ctx.notes.append("answers " + ", ".join(f"{k}: {v}" for k, v in sorted(answers.items(), key=str)))
    close_all(sockets)


def bad_request_flood(ctx):
    """Requests that each make a library write a line (malformed HTTP, a model name that is not UTF-8
    over gRPC): the log may grow by the rate limit's allowance, not a line a request."""
    total = ctx.count("bad_requests")
    log_before = os.path.getsize(ctx.server.log_path)
    lines_before = ctx.server.log().count("\n")
    clients = NormalClients(ctx.server, ctx.args.call_timeout_s)
    clients.start()
    started = time.monotonic()
    sent = 0
    connection = RawH2(("127.0.0.1", ctx.ports["grpc"]))
    bad_name = service_pb2.ModelInferRequest(model_name="x").SerializeToString().replace(b"x", b"\xff")
    while sent < total:
        if sent % 2 == 0:
            for s in open_sockets(ctx.ports["http"], 1, b"GARBAGE \x01\x02 NOT-HTTP\r\n\r\n"):
                read_status(s, 2)
                s.close()
        else:
            if connection.closed or len(connection.stream_windows) >= 1000:
                connection.close()
                connection = RawH2(("127.0.0.1", ctx.ports["grpc"]))
            stream = connection.open_stream(GRPC_INFER)
            connection.send_data(stream, grpc_message_prefix(len(bad_name)) + bad_name, end_stream=True,
                                 deadline=time.monotonic() + 2)
        sent += 1
    connection.wait_for(lambda c: len(c.ended_streams) + len(c.reset_streams) >= len(c.stream_windows), 5)
    connection.close()
    ctx.normal = clients.stop()
    ctx.lost += sum(figures["failed"] for figures in ctx.normal.values())
    took = time.monotonic() - started
    time.sleep(0.5)
    grown = os.path.getsize(ctx.server.log_path) - log_before
    lines = ctx.server.log().count("\n") - lines_before
    # The allowance: --log-rate-limit (10) lines per kind and message per 10 s window, and one line
    # saying what was dropped; two kinds here, a few messages each.
    windows = int(took // 10) + 2
    allowed_lines = 2 * 4 * windows * (10 + 1)
    ctx.notes.append(f"{sent} bad requests in {took:.1f} s: log +{grown / 1024:.0f} KiB, {lines} lines "
                     f"(allowed {allowed_lines})")
    if lines > allowed_lines:
        ctx.violations.append(f"log grew by {lines} lines for {sent} bad requests, over the rate limit's "
                              f"{allowed_lines}")


GZIP_BOMB_INFLATED = 1 << 30


def gzip_bomb():
    """1 GiB of zeros, gzip-compressed (about 1 MiB)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\x00" * (16 * MIB)
    parts = [compressor.compress(block) for _ in range(GZIP_BOMB_INFLATED // len(block))]
    return b"".join(parts) + compressor.flush()


def gzip_bombs(ctx):
    """REST bodies that inflate to 1 GiB, sent at once from one address: each must get 413 (past the
    body limit) or 503 (past the client's share of the buffer budget first), and the server may hold
    no more than the body limit for each while inflating."""
    count = ctx.count("gzip_bombs")
    bomb = gzip_bomb()
    port = ctx.ports["http"]
    sockets = open_sockets(port, count)
    headers = rest_headers(port, len(bomb), "Content-Encoding: gzip\r\n")
    senders = []
    for s in sockets:
        sender = threading.Thread(target=lambda s=s: s.sendall(headers + bomb), daemon=True)
        sender.start()
        senders.append(sender)
    clients = NormalClients(ctx.server, ctx.args.call_timeout_s)
    clients.start()
    statuses = {}
    for s in sockets:
        status = read_status(s, 30)
        statuses[status] = statuses.get(status, 0) + 1
        if status not in (413, 503):
            ctx.violations.append(f"a gzip bomb was answered {status}, not 413 or 503")
    ctx.normal = clients.stop()
    ctx.lost += sum(figures["failed"] for figures in ctx.normal.values())
    close_all(sockets)
    ctx.notes.append(f"{len(sockets)} bombs of {len(bomb) / MIB:.1f} MiB inflating to 1 GiB: answers "
                     + ", ".join(f"{k}: {v}" for k, v in statuses.items()))
    # What the server may hold for them: one body limit each, twice over for the inflater's output
    # buffer growing, and room for the normal clients. (The client's share of the buffer budget
    # bounds it too, but a piece is inflated before it is held, so it may pass the share by a piece.)
    ctx.memory_bound_mib = count * 2 * REST_BODY_LIMIT / MIB + 128


def grpc_gzip_bomb():
    """A ModelInfer message of 1 GiB of zeros in raw_input_contents, gzip-compressed (about 1 MiB,
    within the gRPC limit on the wire)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    header = b"\x0a\x07encoder"  # model_name (field 1)
    length = GZIP_BOMB_INFLATED
    varint = b""
    while length >= 0x80:
        varint += bytes([length & 0x7F | 0x80])
        length >>= 7
    header += b"\x3a" + varint + bytes([length])  # raw_input_contents (field 7), its length
    block = b"\x00" * (16 * MIB)
    parts = [compressor.compress(header)]
    parts += [compressor.compress(block) for _ in range(GZIP_BOMB_INFLATED // len(block))]
    return b"".join(parts) + compressor.flush()


def grpc_gzip_bombs(ctx):
    """ModelInfer messages that inflate to 1 GiB (gRPC's own compression, grpc-encoding gzip), one
    connection each, sent at once: each must be answered RESOURCE_EXHAUSTED, and the server may hold
    no more than the request limit for each while inflating."""
    count = ctx.count("gzip_bombs")
    compressed = grpc_gzip_bomb()
    bomb = grpc_message_prefix(len(compressed), compressed=True) + compressed
    connections = [RawH2(("127.0.0.1", ctx.ports["grpc"]), timeout_s=30) for _ in range(count)]
    streams = [connection.open_stream(GRPC_INFER, headers=(("grpc-encoding", "gzip"),))
               for connection in connections]
    senders = [threading.Thread(target=connection.send_data, args=(stream, bomb, True), daemon=True)
               for connection, stream in zip(connections, streams)]
    for sender in senders:
        sender.start()
    clients = NormalClients(ctx.server, ctx.args.call_timeout_s)
    clients.start()
    outcomes = {}
    for connection, stream in zip(connections, streams):
        connection.wait_for(lambda c, stream=stream: stream in c.ended_streams or stream in c.reset_streams, 60)
        # The trailers' grpc-status, a plain literal on a fresh connection (raw_h2.RawH2.header_blocks).
        trailers = connection.header_blocks.get(stream, b"")
        outcome = ("RESOURCE_EXHAUSTED" if b"grpc-status\x018" in trailers and b"inflates" in trailers
                   else "reset" if stream in connection.reset_streams else "other")
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcome != "RESOURCE_EXHAUSTED":
            ctx.violations.append(f"a gRPC gzip bomb was answered {outcome}, not RESOURCE_EXHAUSTED")
    ctx.normal = clients.stop()
    ctx.lost += sum(figures["failed"] for figures in ctx.normal.values())
    for connection in connections:
        connection.close()
    ctx.notes.append(f"{count} bombs of {len(bomb) / MIB:.1f} MiB inflating to 1 GiB: answers "
                     + ", ".join(f"{k}: {v}" for k, v in outcomes.items()))
    # One request limit each, twice over for the inflater's output growing and the parsed message,
    # and room for the normal clients.
    ctx.memory_bound_mib = count * 2 * GRPC_MESSAGE_LIMIT / MIB + 128


def descriptor_exhaustion(ctx):
    """Under `ulimit -n 256`, idle REST connections take the descriptors: do gRPC and /metrics still
    serve, and does the gRPC accept loop spin a core?"""
    sockets = open_sockets(ctx.ports["http"], ctx.count("descriptor_connections"))
    before = cpu_seconds(ctx.server.process.pid)
    started = time.monotonic()
    ctx.measure()
    # Each refused gRPC connection must cost the server little; the normal clients' own calls cost
    # some CPU too.
    used = (cpu_seconds(ctx.server.process.pid) - before) / (time.monotonic() - started)
    ctx.notes.append(f"{len(sockets)} REST connections; server CPU {used:.0%} of a core during it")
    ctx.spin = used > 0.8
    close_all(sockets)


def grpc_refused(ctx, **labels):
    """graphserve_connections_refused_total of the gRPC port, all reasons together or those of `labels`."""
    url = f"http://127.0.0.1:{ctx.ports['metrics']}/metrics"
    return sum(metrics_text.values(metrics_text.samples(metrics_text.fetch(url, timeout_s=5)),
                                   "graphserve_connections_refused_total", endpoint="grpc", **labels))


def grpc_descriptor_exhaustion(ctx):
    """Under `ulimit -n 256`, idle gRPC connections from many addresses (each within its cap per
    address) take gRPC's descriptors: does its accept loop spin (the refusal count climbing by
    millions, a core busy) once they are gone, and do the normal gRPC calls get through (the
    acceptor shutting the oldest silent connections down to make room for theirs)?"""
    wanted = ctx.count("grpc_descriptor_connections")
    sources = loopback_sources(3, 1 + wanted // GRPC_CONNECTIONS_PER_SOURCE)
    sockets = open_sockets(ctx.ports["grpc"], wanted, sources=sources)
    time.sleep(1)
    refused_before = grpc_refused(ctx)
    before = cpu_seconds(ctx.server.process.pid)
    started = time.monotonic()
    ctx.measure()
    used = (cpu_seconds(ctx.server.process.pid) - before) / (time.monotonic() - started)
    refused_after = grpc_refused(ctx)
    ctx.notes.append(f"{len(sockets)} gRPC connections, {still_open(sockets)} kept; {refused_before:.0f} refused "
                     f"once they were in, {refused_after - refused_before:.0f} more while held "
                     f"({grpc_refused(ctx, reason='silent'):.0f} silent ones shut to make room); server CPU "
                     f"{used:.0%} of a core")
    # Each refusal is one connection closed on arrival: more than the attacker opened is a spin.
    if refused_after > wanted:
        ctx.violations.append(f"{refused_after:.0f} gRPC refusals for {wanted} connections: the accept loop spins")
    ctx.spin = used > 0.8
    close_all(sockets)


def grpc_slowloris(ctx):
    """Under `ulimit -n 256`, gRPC connections from many addresses (each within its cap per address)
    trickling HTTP/2's connection preface a byte a second, which gRPC would hold until its handshake
    timeout: do they keep the normal gRPC calls out, or does the acceptor shut down those that had
    not sent their opening a second after they came, to make room?"""
    wanted = ctx.count("grpc_descriptor_connections")
    sources = loopback_sources(4, 1 + wanted // GRPC_CONNECTIONS_PER_SOURCE)
    sockets = open_sockets(ctx.ports["grpc"], wanted, sources=sources)
    trickler = Trickler(sockets, HTTP2_PREFACE)
    trickler.start()
    time.sleep(1)
    ctx.measure()
    trickler.stop()
    ctx.notes.append(f"{len(sockets)} gRPC connections trickling the preface, {still_open(sockets)} not closed by the "
                     f"server; {grpc_refused(ctx, reason='silent'):.0f} shut to make room")
    close_all(sockets)


def grpc_one_address_flood(ctx):
    """Under `ulimit -n 256`, more idle gRPC connections from one address than its cap per address:
    are the ones past it closed on arrival, leaving gRPC's descriptors to the other clients?"""
    wanted = ctx.count("grpc_descriptor_connections")
    refused_before = grpc_refused(ctx)
    sockets = open_sockets(ctx.ports["grpc"], wanted)
    time.sleep(1)
    ctx.notes.append(f"{len(sockets)} gRPC connections from one address: {still_open(sockets)} kept, "
                     f"{grpc_refused(ctx) - refused_before:.0f} refused on arrival")
    ctx.measure()
    close_all(sockets)


class Case:
    """An attack: `run(ctx)`, the point of issue #43 that will fix the damage it does (None: one that
    a bound of today must contain), the server's descriptor limit where the attack needs one, and
    whether the server's memory against what the attacker holds is its figure (its row then waits
    for the heap's trim before "after"), and flags that bring the server's bounds within the case's
    scale and hold (named in the row's notes)."""

    def __init__(self, name, run, issue_point, descriptor_limit=None, check_memory=False, server_args=()):
        self.name, self.run, self.issue_point = name, run, issue_point
        self.descriptor_limit, self.check_memory = descriptor_limit, check_memory
        self.server_args = list(server_args)
        self.settle_s = SETTLE_S if check_memory else 1


CASES = [
    # The defaults (a 1 GiB budget, 600 s of age and 300 of grace) act past this scale and hold; an
    # age shorter than the time to send --full's streams would end the attack before it is built.
    Case("grpc_incomplete_messages", grpc_incomplete_messages, 2, check_memory=True,
         server_args=["--grpc-memory-budget-bytes", str(GRPC_CASE_BUDGET), "--grpc-max-connection-age-s", "10",
                      "--grpc-max-connection-age-grace-s", "1"]),
    Case("rest_incomplete_bodies", rest_incomplete_bodies, 2, check_memory=True),
    Case("grpc_unread_answers", grpc_unread_answers, 2, check_memory=True,
         server_args=["--grpc-answer-write-timeout-s", "2"]),
    Case("rest_slowloris", rest_slowloris, 3),
    Case("rest_idle_connections", rest_idle, 3),
    Case("rest_past_connection_cap", rest_past_cap, 3),
    Case("metrics_slow_readers", metrics_slow_readers, 3),
    Case("metrics_idle_connections", metrics_idle, 3),
    Case("descriptor_exhaustion", descriptor_exhaustion, 3, descriptor_limit=256),
    Case("grpc_descriptor_exhaustion", grpc_descriptor_exhaustion, 3, descriptor_limit=256),
    Case("grpc_slowloris", grpc_slowloris, 3, descriptor_limit=256),
    Case("grpc_one_address_flood", grpc_one_address_flood, 3, descriptor_limit=256),
    Case("transfer_encoding_not_chunked", transfer_encoding, None),
    Case("bad_request_log_flood", bad_request_flood, None),
    Case("rest_gzip_bombs", gzip_bombs, None, check_memory=True),
    Case("grpc_gzip_bombs", grpc_gzip_bombs, None, check_memory=True),
]


def small_grid_config():
    """The built-in encoder with a four-bucket grid up to 8 rows: the default grid's hundreds of
    buckets take minutes to warm up on a busy CPU, once per case's fresh server."""
    config = re.sub(r"max_batch_size: \d+", "max_batch_size: 8", builtin_encoder_config(), count=1)
    return config + "buckets { batch_sizes: [ 1, 8 ] sequence_lengths: [ 16, 512 ] max_batch_tokens: 0 }\n"


def start_server(args, repository, name, descriptor_limit=None, case_args=()):
    if descriptor_limit:
        # A shell that lowers both limits before it becomes graphserve: the server raises its soft
        # limit to the hard one, so the hard one is what counts.
        wrapper = os.path.join(args.out, f"graphserve_ulimit_{descriptor_limit}.sh")
        with open(wrapper, "w") as f:
            f.write(f'#!/bin/sh\nulimit -n {descriptor_limit} || exit 3\nexec "{args.graphserve_binary}" "$@"\n')
        os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
        args.graphserve = wrapper
    else:
        args.graphserve = args.graphserve_binary
    server = Server(argparse.Namespace(**{**vars(args), "server_args": args.server_args + list(case_args)}),
                    repository, MODEL, os.path.join(args.out, "logs", f"{name}.log"))
    try:
        server.wait_ready(args.start_timeout_s)
    except SystemExit:
        raise
    ports = {"grpc": int(server.grpc.rsplit(":", 1)[1]), "http": int(server.http.rsplit(":", 1)[1]),
             "metrics": int(server.metrics_url.split(":")[2].split("/")[0])}
    return server, ports


def slow(during, idle):
    """Whether a p99 during the attack is past SLOWDOWN_FACTOR times idle (plus the jitter floor)."""
    if during is None:
        return True
    return during > SLOWDOWN_FACTOR * (idle or 0) + JITTER_FLOOR_MS


def run_case(args, repository, case):
    log(f"--- {case.name}")
    server, ports = start_server(args, repository, case.name, case.descriptor_limit, case.server_args)
    row = {"attack": case.name, "violations": [], "notes": []}
    try:
        ctx = Context(args, server, ports)
        idle = NormalClients(server, args.call_timeout_s).run_for(args.idle_s)
        pid = server.process.pid
        before = rss_mib(pid)
        sampler = RssSampler(pid)
        sampler.start()
        try:
            case.run(ctx)
        except Exception as error:  # noqa: BLE001  (the suite's own failure is a row's failure)
            ctx.violations.append(f"the attack itself failed: {type(error).__name__}: {error}")
        alive = server.running()
        settle_until = time.monotonic() + case.settle_s
        while alive and time.monotonic() < settle_until:
            time.sleep(0.25)
        peak = sampler.stop()
        after = rss_mib(pid) if server.running() else None
        if case.server_args:
            ctx.notes.insert(0, " ".join(case.server_args))
        row.update(idle=idle, normal=ctx.normal or {}, rss_mib=[before, peak, after], lost=ctx.lost,
                   notes=ctx.notes, violations=list(ctx.violations), held_mib=ctx.held_mib)
        if not server.running():
            row["violations"].append(f"the server died (status {server.process.returncode}); log "
                                     f"{server.log_path}:\n{server.log_tail(20)}")
        damage = []
        for kind in ("rest", "grpc", "scrape"):
            during, quiet = (ctx.normal or {}).get(kind, {}), idle.get(kind, {})
            if (during.get("failed") and kind in getattr(ctx, "refused_at_once", ())
                    and not slow(during.get("p99_ms"), quiet.get("p99_ms"))):
                row["notes"].append(f"{kind}: {during['failed']}/{during['calls']} calls refused at once")
            elif during.get("failed"):
                damage.append(f"{kind}: {during['failed']}/{during['calls']} calls failed")
            elif slow(during.get("p99_ms"), quiet.get("p99_ms")):
                damage.append(f"{kind} p99 {during.get('p99_ms') or 0:.0f} ms against "
                              f"{quiet.get('p99_ms') or 0:.0f} idle")
        grown = (peak or 0) - (before or 0)
        held_growth = (ctx.rss_held or 0) - (before or 0)
        within_budget = held_growth <= getattr(ctx, "memory_budget_mib", 0)
        bound = getattr(ctx, "memory_bound_mib", None)
        # A case with a bound of its own is judged by it (below), not by what the attacker sent.
        if (case.check_memory and ctx.held_mib and bound is None and held_growth > 0.5 * ctx.held_mib
                and not within_budget):
            damage.append(f"RSS +{held_growth:.0f} MiB while the attacker holds {ctx.held_mib:.0f} MiB")
        if bound is not None and grown > bound:
            row["violations"].append(f"RSS grew {grown:.0f} MiB, over the {bound:.0f} MiB a bounded server holds")
        if getattr(ctx, "spin", False):
            damage.append("the server spun a core")
        row["damage"] = damage
    finally:
        status = server.stop(timeout_s=30)
        if status != 0 and not row["violations"]:
            row["violations"].append(f"graphserve exited {status} when stopped after the attack")
    row["verdict"] = verdict(case.issue_point, row)
    return row


def verdict(issue_point, row):
    if row["violations"]:
        return "FAIL"
    if row["damage"]:
        if issue_point is None:
            return "bounded (slowed)"  # hurt latency on a busy machine, no bound broken
        return f"known-open #43.{issue_point}"
    return "bounded"


class DrainCaller(threading.Thread):
    """Calls in a loop until the server refuses or is gone; records each call's fate. A call begun
    before the signal must be answered (or refused naming the shutdown); one begun after may also
    find no server."""

    def __init__(self, kind, server, signalled):
        super().__init__(daemon=True)
        self.kind, self.server, self.signalled = kind, server, signalled
        self.latencies_ms, self.lost, self.fates = [], [], {}

    def fate(self, what):
        self.fates[what] = self.fates.get(what, 0) + 1

    def run(self):
        if self.kind == "rest":
            # Raw HTTP/1.1 with a JSON body, as most REST clients send it.
            body = json.dumps({"inputs": [{"name": name, "shape": [1, 16], "datatype": "INT64", "data": [1] * 16}
                                          for name in ("input_ids", "attention_mask")],
                               "outputs": [{"name": "pooler_output"}]})
            port = int(self.server.http.rsplit(":", 1)[1])
            connection = None
        else:
            client = grpcclient.InferenceServerClient(self.server.grpc)
            inputs = token_inputs(grpcclient)
        while True:
            before_signal = not self.signalled.is_set()
            started = time.monotonic()
            try:
                if self.kind == "rest":
                    if connection is None:
                        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                    connection.request("POST", INFER_PATH, body, {"Content-Type": "application/json"})
                    answer = connection.getresponse()
                    text = answer.read().decode(errors="replace")
                    if answer.status == 200:
                        self.fate("answered")
                    elif answer.status == 503 and "shutting down" in text:
                        self.fate("refused (shutting down)")
                        return
                    else:
                        self.lost.append(f"REST {answer.status} {text[:120]}")
                        return
                else:
                    client.infer(MODEL, inputs, client_timeout=60)
                    self.fate("answered")
            except grpcclient.InferenceServerException as error:
                status, message = error.status(), error.message() or ""
                if status == "StatusCode.UNAVAILABLE" and "shutting down" in message:
                    self.fate("refused (shutting down)")
                elif not before_signal and status == "StatusCode.UNAVAILABLE" and (
                        "failed to connect" in message or "Connection refused" in message):
                    self.fate("not connected (after exit)")
                elif not before_signal and status == "StatusCode.CANCELLED":
                    self.fate("dropped by gRPC before accepted")
                else:
                    self.lost.append(f"gRPC {status} {message[:120]}")
                return
            except (OSError, http.client.HTTPException) as error:
                if before_signal:
                    self.lost.append(f"REST call begun before the signal: {error!r}")
                else:
                    self.fate("not connected (after exit)")
                return
            finally:
                self.latencies_ms.append((time.monotonic() - started) * 1000)


class DrainStream(threading.Thread):
    """A ModelStreamInfer stream sending a request every 20 ms until the signal, two more after it,
    then half-closing: every request must get its answer or a refusal naming the shutdown."""

    def __init__(self, server, signalled):
        super().__init__(daemon=True)
        self.kind, self.server, self.signalled = "stream", server, signalled
        self.latencies_ms, self.lost, self.fates = [], [], {}

    def run(self):
        answers, sent_at = [], {}
        try:
            with grpcclient.InferenceServerClient(self.server.grpc) as client:
                client.start_stream(callback=lambda result, error: answers.append((time.monotonic(), result, error)))
                inputs = token_inputs(grpcclient)
                late = 0
                while late < 2:
                    if self.signalled.is_set():
                        late += 1
                    request_id = str(len(sent_at))
                    sent_at[request_id] = time.monotonic()
                    client.async_stream_infer(MODEL, inputs, request_id=request_id)
                    time.sleep(0.02)
                client.stop_stream()  # returns once the server has finished the stream
        except Exception as error:  # noqa: BLE001  (a stream that broke lost what it had sent)
            self.lost.append(f"stream broke: {type(error).__name__}: {str(error)[:120]}")
        for answered_at, result, error in answers:
            if error is None:
                self.fates["answered"] = self.fates.get("answered", 0) + 1
                request_id = result.get_response().id
                self.latencies_ms.append((answered_at - sent_at.get(request_id, answered_at)) * 1000)
            elif "shutting down" in (error.message() or ""):
                self.fates["refused (shutting down)"] = self.fates.get("refused (shutting down)", 0) + 1
            else:
                self.lost.append(f"stream: {error.status()} {(error.message() or '')[:120]}")
        if len(answers) < len(sent_at):
            self.lost.append(f"stream: {len(sent_at) - len(answers)} of {len(sent_at)} requests never answered")


def sigterm_drain(args, repository):
    """SIGTERM while REST and gRPC clients and a stream call without pause, over fresh servers: every call is
    answered or refused naming the shutdown, and the process exits 0 (issue #43 point 1, done)."""
    runs = max(1, int(SCALES["sigterm_runs"][1 if args.full else 0] * args.scale))
    log(f"--- sigterm_drain ({runs} runs)")
    row = {"attack": "sigterm_drain", "violations": [], "notes": [], "damage": [], "lost": 0}
    fates, latencies = {}, {"rest": [], "grpc": [], "stream": []}
    rss = [None, 0, None]
    for run in range(runs):
        server, _ = start_server(args, repository, f"sigterm_drain_{run}")
        pid = server.process.pid
        rss[0] = rss[0] or rss_mib(pid)
        sampler = RssSampler(pid)
        sampler.start()
        signalled = threading.Event()
        callers = [DrainCaller("rest", server, signalled) for _ in range(6)]
        callers += [DrainCaller("grpc", server, signalled) for _ in range(4)]
        callers.append(DrainStream(server, signalled))
        for caller in callers:
            caller.start()
        time.sleep(1.0 + (0.3 * run) % 1.0)  # the signal at a different moment of the load each run
        server.process.send_signal(signal.SIGTERM)
        signalled.set()
        try:
            status = server.process.wait(timeout=60)
        except Exception:  # noqa: BLE001  (a hang is a failure of the row, not of the suite)
            status = "no exit within 60 s"
        rss[1] = max(rss[1], sampler.stop())
        server.stop()
        for caller in callers:
            caller.join(70)
            if caller.is_alive():
                row["violations"].append(f"run {run}: a {caller.kind} call still waiting 70 s after the signal")
            for what, count in caller.fates.items():
                fates[what] = fates.get(what, 0) + count
            latencies[caller.kind] += caller.latencies_ms
            row["lost"] += len(caller.lost)
            row["violations"] += [f"run {run}: lost {text}" for text in caller.lost]
        if status != 0:
            row["violations"].append(f"run {run}: exit status {status}; log {server.log_path}")
    row["normal"] = {kind: {"p50_ms": percentile(values, 0.5), "p99_ms": percentile(values, 0.99),
                            "calls": len(values), "failed": 0} for kind, values in latencies.items()}
    row["idle"] = {}
    row["rss_mib"] = rss
    row["notes"].append(f"{runs} runs: " + ", ".join(f"{k} {v}" for k, v in sorted(fates.items())))
    stream = row["normal"]["stream"]
    row["notes"].append(f"the streams' p50/p99 {figure(stream['p50_ms'])} / {figure(stream['p99_ms'])} ms")
    row["verdict"] = "FAIL" if row["violations"] else "bounded"
    return row


def figure(value, digits=0):
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(rows, args):
    lines = ["| attack | REST p50/p99 ms | gRPC p50/p99 ms | /metrics p50/p99 ms | RSS MiB before/peak/after "
             "| answers lost | verdict | what happened |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        cells = [row["attack"]]
        for kind in ("rest", "grpc", "scrape"):
            during = row.get("normal", {}).get(kind)
            idle = row.get("idle", {}).get(kind)
            if not during:
                cells.append("-")
                continue
            text = f"{figure(during['p50_ms'])} / {figure(during['p99_ms'])}"
            if idle:
                text += f" (idle {figure(idle['p99_ms'])})"
            if during.get("failed"):
                text += f", {during['failed']}/{during['calls']} failed"
            cells.append(text)
        cells.append(" / ".join(figure(value) for value in row.get("rss_mib", [None] * 3)))
        cells.append(str(row.get("lost", 0)))
        cells.append(row["verdict"])
        cells.append("; ".join(row["notes"] + row.get("damage", []) + row["violations"][:3]).replace("\n", " ")
                     .replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--server-binary", help="graphserve to attack (default: BUILD_DIR/server/graphserve)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--full", action="store_true", help="the issue's connection counts and sizes")
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every count (connections, streams)")
    parser.add_argument("--only", default="", help="comma-separated attacks to run (default: all)")
    parser.add_argument("--hold-s", type=float, default=None, help="how long each attack holds (default 4, full 20)")
    parser.add_argument("--idle-s", type=float, default=1.5, help="normal clients alone before each attack")
    parser.add_argument("--send-budget-s", type=float, default=None,
                        help="the most a case spends sending its bytes (default 10, full 30)")
    parser.add_argument("--call-timeout-s", type=float, default=5.0, help="a normal call's timeout")
    parser.add_argument("--start-timeout-s", type=float, default=120)
    parser.add_argument("--server-arg", action="append", default=[],
                        help="one more graphserve argument (repeat it), e.g. --server-arg=--drain-timeout-s=5")
    args = parser.parse_args()
    args.hold_s = args.hold_s or (20 if args.full else 4)
    args.send_budget_s = args.send_budget_s or (30 if args.full else 10)
    args.out = os.path.abspath(args.out)
    args.graphserve_binary = os.path.abspath(args.server_binary or os.path.join(args.build_dir, "server", "graphserve"))
    if not os.path.exists(args.graphserve_binary):
        fail(f"no graphserve at {args.graphserve_binary}; build it first (cmake --build build --target graphserve)")
    args.device = "cpu"
    args.server_args = ["--drain-timeout-s", "10"] + args.server_arg
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    # The hostile clients hold many sockets: this process's soft limit up to its hard one.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    repository = write_repository(args, MODEL, "attacks", small_grid_config(), None)
    only = {name for name in args.only.split(",") if name}
    known = {case.name for case in CASES} | {"sigterm_drain"}
    if only - known:
        fail(f"unknown attacks {sorted(only - known)}; known: {sorted(known)}")
    started = time.monotonic()
    rows = []
    for case in CASES:
        if not only or case.name in only:
            rows.append(run_case(args, repository, case))
            log(f"{case.name}: {rows[-1]['verdict']}; {'; '.join(rows[-1]['notes'] + rows[-1]['damage'])}")
    if not only or "sigterm_drain" in only:
        rows.append(sigterm_drain(args, repository))
        log(f"sigterm_drain: {rows[-1]['verdict']}; {'; '.join(rows[-1]['notes'])}")
    table = markdown(rows, args)
    scale = "full" if args.full else "CI"
    header = (f"Attack suite, {scale} scale (x{args.scale:g}), {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.1f} at the end, {time.monotonic() - started:.0f} s\n\n")
    with open(os.path.join(args.out, "attacks.md"), "w") as f:
        f.write(header + table)
    with open(os.path.join(args.out, "attacks.json"), "w") as f:
        json.dump({"full": args.full, "scale": args.scale, "rows": rows}, f, indent=1, default=str)
    print("\n" + header + table)
    failed = [row for row in rows if row["verdict"] == "FAIL"]
    for row in failed:
        print(f"FAIL {row['attack']}:\n  " + "\n  ".join(row["violations"]), file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
