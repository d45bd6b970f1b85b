#!/usr/bin/env python3
"""gRPC's per-message compression through Triton's own client (tritonclient[grpc], unmodified):
requests sent with compression_algorithm="gzip" or "deflate", unary and streamed, are answered
exactly as the same requests sent plain; the other RPCs take compressed requests too; a gzip bomb is
refused naming the limit, on a unary call and on a stream that goes on serving; and with Triton's
--grpc-infer-response-compression-level the answers travel compressed (read off the wire through a
relay that parses the HTTP/2 frames)."""
import gzip
import queue
import socket
import struct
import threading
import unittest

import grpc
import numpy as np

import server_fixture
from server_fixture import InferenceServerException
from tritonclient.grpc import service_pb2, service_pb2_grpc

MODEL = "tiny_scripted"
MIB = 1024 * 1024
ALGORITHMS = ("gzip", "deflate")


def token_inputs(rows, length, seed):
    generator = np.random.default_rng(seed)
    ids = generator.integers(1, 999, size=(rows, length), dtype=np.int64)
    return server_fixture.token_inputs(ids, np.ones_like(ids))


def outputs_of(result):
    return {name: result.as_numpy(name) for name in ("hidden", "pooled")}


def zeros_inputs(elements):
    """input_ids and attention_mask of one row of `elements` zeros: 2 x 8 bytes each, a few hundred
    KiB once compressed."""
    ids = np.zeros((1, elements), dtype=np.int64)
    return server_fixture.token_inputs(ids, ids.copy())


class WireRelay:
    """Relays one port to the server's gRPC port and reads the server's HTTP/2 frames as they pass:
    each DATA frame that starts a gRPC message says in its first byte whether the message is
    compressed (the gRPC wire format: flag, 4-byte length, message)."""

    def __init__(self, target):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.compressed_flags = []  # of the answers' messages, in order
        self.header_blocks = b""  # the server's HEADERS frames, HPACK as sent
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        client, _ = self.listener.accept()
        host, port = self.target.split(":")
        upstream = socket.create_connection((host, int(port)))
        threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
        frames = self._read_frames()
        next(frames)  # to its first yield
        self._pipe(upstream, client, frames)

    @staticmethod
    def _pipe(source, sink, reader=None):
        """Copies until either side closes; `reader` sees each piece before it is passed on, so that
        a frame is recorded before the client can act on it."""
        with source, sink:
            try:
                while data := source.recv(65536):
                    if reader:
                        reader.send(data)
                    sink.sendall(data)
            except OSError:
                pass  # the other side closed

    def _read_frames(self):
        """A generator fed the server's bytes (send()), recording the messages' compressed flags."""
        pending = b""
        message_left = {}  # stream id -> bytes of the current message still to come
        while True:
            pending += yield
            while len(pending) >= 9:
                length = int.from_bytes(pending[:3], "big")
                if len(pending) < 9 + length:
                    break
                kind, flags = pending[3], pending[4]
                stream = struct.unpack(">I", pending[5:9])[0] & 0x7FFFFFFF
                payload = pending[9:9 + length]
                pending = pending[9 + length:]
                if kind == 1:  # HEADERS: a name or value new to the connection comes as a plain literal
                    self.header_blocks += payload
                if kind != 0 or not payload:  # DATA frames only
                    continue
                if flags & 0x8:  # PADDED
                    payload = payload[1:len(payload) - payload[0]]
                while payload:
                    left = message_left.get(stream, 0)
                    if left == 0:
                        self.compressed_flags.append(payload[0])
                        left = 5 + int.from_bytes(payload[1:5], "big")
                    taken = min(left, len(payload))
                    message_left[stream] = left - taken
                    payload = payload[taken:]


class GrpcCompressionTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        cls.serve_model_copy(MODEL, "grpc_compression", "--grpc-infer-response-compression-level", "low")

    def assert_same_outputs(self, got, want):
        """Equal but for the rounding of batching with other requests (test_streaming.py's bound)."""
        self.assertEqual(sorted(got), sorted(want))
        for key in want:
            for name in ("hidden", "pooled"):
                np.testing.assert_allclose(got[key][name], want[key][name], rtol=1e-4, atol=1e-5,
                                           err_msg=f"{name} of {key}")

    def test_compressed_unary_requests_are_answered_as_plain_ones(self):
        for seed, (rows, length) in enumerate([(1, 5), (2, 16), (4, 32)]):
            generator = np.random.default_rng(seed)
            ids = generator.integers(1, 999, size=(rows, length), dtype=np.int64)
            inputs = server_fixture.token_inputs(ids, np.ones_like(ids))
            plain = outputs_of(self.client.infer(MODEL, inputs))
            _, pooled = self.expected(ids, np.ones_like(ids))
            np.testing.assert_allclose(plain["pooled"], pooled, rtol=1e-4, atol=1e-5)
            for algorithm in ALGORITHMS:
                with self.subTest(algorithm=algorithm, rows=rows, length=length):
                    compressed = self.client.infer(MODEL, inputs, compression_algorithm=algorithm)
                    self.assert_same_outputs({"answer": outputs_of(compressed)}, {"answer": plain})

    def test_compressed_stream_requests_are_answered_as_plain_ones(self):
        requests = {f"r{i}": token_inputs(1 + i % 4, 1 + (5 * i) % 32, seed=i) for i in range(12)}
        expected = {request_id: outputs_of(self.client.infer(MODEL, inputs)) for request_id, inputs in requests.items()}
        for algorithm in ALGORITHMS:
            with self.subTest(algorithm=algorithm):
                answers = queue.Queue()
                client = self.server.client()
                client.start_stream(callback=lambda result, error: answers.put((result, error)),
                                    compression_algorithm=algorithm)
                for request_id, inputs in requests.items():
                    client.async_stream_infer(MODEL, inputs, request_id=request_id)
                got = {}
                for _ in requests:
                    result, error = answers.get(timeout=60)
                    self.assertIsNone(error)
                    got[result.get_response().id] = outputs_of(result)
                client.stop_stream()
                client.close()
                self.assert_same_outputs(got, expected)

    def test_the_other_rpcs_take_compressed_requests(self):
        with grpc.insecure_channel(self.server.url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            for compression in (grpc.Compression.Gzip, grpc.Compression.Deflate):
                with self.subTest(compression=compression):
                    self.assertTrue(stub.ServerLive(service_pb2.ServerLiveRequest(), compression=compression).live)
                    ready = stub.ModelReady(service_pb2.ModelReadyRequest(name=MODEL), compression=compression)
                    self.assertTrue(ready.ready)
                    metadata = stub.ModelMetadata(service_pb2.ModelMetadataRequest(name=MODEL),
                                                  compression=compression)
                    self.assertEqual([t.name for t in metadata.outputs], ["hidden", "pooled"])
                    index = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(), compression=compression)
                    self.assertIn(MODEL, [model.name for model in index.models])
                    # A refusal of the RPC itself still names its field.
                    with self.assertRaises(grpc.RpcError) as refused:
                        stub.ModelMetadata(service_pb2.ModelMetadataRequest(name="no_such_model"),
                                           compression=compression)
                    self.assertEqual(refused.exception.code(), grpc.StatusCode.NOT_FOUND)
                    self.assertIn("no_such_model", refused.exception.details())

    def test_a_gzip_bomb_to_another_rpc_is_refused_naming_the_limit(self):
        # Triton's clients send nothing this large to these RPCs; a raw client may. 64 MiB of
        # repository name inflate from 64 KiB, within the 4 MiB limit on the wire.
        with grpc.insecure_channel(self.server.url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            with self.assertRaises(grpc.RpcError) as refused:
                stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(repository_name="a" * (64 * MIB)),
                                     compression=grpc.Compression.Gzip)
            self.assertEqual(refused.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertIn("inflates (grpc-encoding gzip) to more than the 4194304 bytes", refused.exception.details())
            self.assertTrue(stub.ServerLive(service_pb2.ServerLiveRequest()).live)

    def test_a_broken_compressed_request_is_an_invalid_argument_naming_it(self):
        # tritonclient cannot send one: written frame by frame, one connection per call, so that the
        # answer's grpc-status and grpc-message come as plain literals (raw_h2.RawH2.header_blocks).
        from bench_support.raw_h2 import RawH2, grpc_message_prefix
        whole = gzip.compress(service_pb2.ModelMetadataRequest(name=MODEL).SerializeToString())
        for method in ("ModelMetadata", "ModelInfer"):
            with self.subTest(method=method):
                connection = RawH2(("127.0.0.1", self.server.grpc_port))
                stream = connection.open_stream(f"/inference.GRPCInferenceService/{method}",
                                                headers=(("grpc-encoding", "gzip"),))
                broken = whole[:-6]  # its end cut off
                connection.send_data(stream, grpc_message_prefix(len(broken), compressed=True) + broken,
                                     end_stream=True)
                self.assertTrue(connection.wait_for(lambda c, stream=stream: stream in c.ended_streams, 30))
                trailers = connection.header_blocks[stream]
                connection.close()
                self.assertIn(b"grpc-status\x013", trailers)  # INVALID_ARGUMENT
                self.assertIn(b"the request is not one complete gzip stream", trailers)
        self.assertTrue(self.client.is_server_live())

    def test_a_bomb_on_a_stream_is_that_request_s_error_and_the_stream_goes_on(self):
        answers = queue.Queue()
        client = self.server.client()
        client.start_stream(callback=lambda result, error: answers.put((result, error)), compression_algorithm="gzip")
        client.async_stream_infer(MODEL, zeros_inputs(16 * MIB), request_id="bomb")
        good = token_inputs(1, 8, seed=3)
        client.async_stream_infer(MODEL, good, request_id="after")
        result, error = answers.get(timeout=60)
        self.assertIsInstance(error, InferenceServerException)
        self.assertIn("inflates (grpc-encoding gzip) to more than the 4194304 bytes", error.message())
        result, error = answers.get(timeout=60)
        self.assertIsNone(error)
        self.assertEqual(result.get_response().id, "after")
        plain = self.client.infer(MODEL, good)
        self.assert_same_outputs({"after": outputs_of(result)}, {"after": outputs_of(plain)})
        client.stop_stream()
        client.close()

    def test_answers_travel_compressed_at_the_configured_level(self):
        relay = WireRelay(self.server.url)
        client = server_fixture.grpcclient.InferenceServerClient(f"127.0.0.1:{relay.port}")
        inputs = token_inputs(4, 32, seed=9)
        answer = client.infer(MODEL, inputs, compression_algorithm="gzip")
        plain = self.client.infer(MODEL, inputs)
        self.assert_same_outputs({"answer": outputs_of(answer)}, {"answer": outputs_of(plain)})
        answers = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        client.async_stream_infer(MODEL, inputs, request_id="streamed")
        self.assertIsNone(answers.get(timeout=60)[1])
        client.stop_stream()
        # ModelInfer's answer and the stream's, each one message with the compressed flag set, in
        # the algorithm gRPC ranks first for the low level among those tritonclient accepts.
        self.assertEqual(relay.compressed_flags, [1, 1])
        self.assertIn(b"grpc-encoding\x04gzip", relay.header_blocks)
        # A metadata answer is not an inference answer: Triton's level leaves it plain.
        client.get_model_metadata(MODEL)
        self.assertEqual(relay.compressed_flags, [1, 1, 0])
        client.close()


class DefaultAnswersTest(server_fixture.ServerTestCase):
    """Without the level, as Triton: answers stay plain even to a compressed request."""

    @classmethod
    def setUpClass(cls):
        cls.serve_model_copy(MODEL, "grpc_plain_answers")

    def test_answers_are_plain_by_default(self):
        relay = WireRelay(self.server.url)
        client = server_fixture.grpcclient.InferenceServerClient(f"127.0.0.1:{relay.port}")
        client.infer(MODEL, token_inputs(1, 8, seed=1), compression_algorithm="deflate")
        self.assertEqual(relay.compressed_flags, [0])
        client.close()


if __name__ == "__main__":
    unittest.main()
