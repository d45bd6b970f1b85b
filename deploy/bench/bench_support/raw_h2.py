"""A cleartext HTTP/2 client written frame by frame, for the attack suite's hostile gRPC clients: one
that starts messages and never finishes them, one that never reads its answers, one that sends bytes
a well-behaved library would refuse to. Nothing here is a conforming client: it decodes none of the
server's headers (HPACK state is never needed, since it only counts which streams ended) and its
own headers are HPACK literals without indexing.

RawH2 is used by one thread at a time; its reader thread only updates the flow-control windows and
the per-stream outcomes under its condition. Socket errors end the connection (closed is set); the
send methods then return what they managed to send instead of raising.
"""
import socket
import struct
import threading
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
SETTINGS_MAX_CONCURRENT_STREAMS, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 3, 4, 5
# RFC 9113 6.5.2: what both sides assume until SETTINGS say otherwise.
DEFAULT_WINDOW = 65535
DEFAULT_FRAME = 16384


def hpack_integer(value, prefix_bits):
    """RFC 7541 5.1, with the first byte's pattern bits left zero."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([value])
    out = [limit]
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_literal(name, value):
    """A header as "literal without indexing, new name" (RFC 7541 6.2.2), no Huffman coding."""
    name, value = name.encode(), value.encode()
    return b"\x00" + hpack_integer(len(name), 7) + name + hpack_integer(len(value), 7) + value


def grpc_message_prefix(length, compressed=False):
    """gRPC's length-prefixed message header: the compressed flag, then the length in 4 bytes."""
    return (b"\x01" if compressed else b"\x00") + struct.pack(">I", length)


class RawH2:
    """One connection to `address` (host, port) speaking HTTP/2 with prior knowledge, as gRPC does.
    `receive_window` is the stream window offered to the server: 0 makes it unable to send any
    answer's body."""

    def __init__(self, address, receive_window=DEFAULT_WINDOW, timeout_s=10):
        self.authority = f"{address[0]}:{address[1]}"
        self.sock = socket.create_connection(address, timeout=timeout_s)
        self.sock.settimeout(None)
        self._changed = threading.Condition()
        self.connection_window = DEFAULT_WINDOW
        self.stream_windows = {}
        self.peer_initial_window = DEFAULT_WINDOW
        self.peer_max_frame = DEFAULT_FRAME
        self.peer_max_streams = None
        self.closed = False
        self.goaway = False
        self.reset_streams = {}
        self.ended_streams = set()
        self.answered_streams = set()
        # Each stream's header blocks from the server, HPACK as sent: gRPC's C core writes header
        # names and values as plain literals the first time a connection sends them.
        self.header_blocks = {}
        self._next_stream = 1
        self._write_lock = threading.Lock()
        self._send(PREFACE + self._frame(SETTINGS, 0, 0, struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE,
                                                                         receive_window)))
        self._reader = threading.Thread(target=self._read_frames, daemon=True)
        self._reader.start()

    @staticmethod
    def _frame(kind, flags, stream, payload):
        return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload

    def _send(self, data):
        try:
            with self._write_lock:
                self.sock.sendall(data)
            return True
        except OSError:
            self._mark_closed()
            return False

    def _mark_closed(self):
        with self._changed:
            self.closed = True
            self._changed.notify_all()

    def _receive_exactly(self, count):
        chunks = []
        while count:
            chunk = self.sock.recv(count)
            if not chunk:
                raise ConnectionError("closed by the server")
            chunks.append(chunk)
            count -= len(chunk)
        return b"".join(chunks)

    def _read_frames(self):
        try:
            while True:
                header = self._receive_exactly(9)
                length = int.from_bytes(header[:3], "big")
                kind, flags = header[3], header[4]
                stream = struct.unpack(">I", header[5:9])[0] & 0x7FFFFFFF
                payload = self._receive_exactly(length)
                self._handle(kind, flags, stream, payload)
        except OSError:
            pass
        self._mark_closed()

    def _handle(self, kind, flags, stream, payload):
        with self._changed:
            if kind == SETTINGS and not flags & ACK:
                for offset in range(0, len(payload) - 5, 6):
                    key, value = struct.unpack(">HI", payload[offset:offset + 6])
                    if key == SETTINGS_INITIAL_WINDOW_SIZE:
                        delta = value - self.peer_initial_window
                        self.peer_initial_window = value
                        for open_stream in self.stream_windows:
                            self.stream_windows[open_stream] += delta
                    elif key == SETTINGS_MAX_FRAME_SIZE:
                        self.peer_max_frame = value
                    elif key == SETTINGS_MAX_CONCURRENT_STREAMS:
                        self.peer_max_streams = value
                self._send(self._frame(SETTINGS, ACK, 0, b""))
            elif kind == PING and not flags & ACK:
                self._send(self._frame(PING, ACK, 0, payload))
            elif kind == WINDOW_UPDATE:
                increment = struct.unpack(">I", payload[:4])[0] & 0x7FFFFFFF
                if stream == 0:
                    self.connection_window += increment
                elif stream in self.stream_windows:
                    self.stream_windows[stream] += increment
            elif kind == RST_STREAM:
                self.reset_streams[stream] = struct.unpack(">I", payload[:4])[0]
            elif kind == GOAWAY:
                self.goaway = True
            elif kind == HEADERS:
                self.answered_streams.add(stream)
                self.header_blocks[stream] = self.header_blocks.get(stream, b"") + payload
                if flags & END_STREAM:
                    self.ended_streams.add(stream)
            elif kind == DATA and flags & END_STREAM:
                self.ended_streams.add(stream)
            self._changed.notify_all()

    def open_stream(self, path, end_stream=False, headers=()):
        """Sends a POST's HEADERS for gRPC method `path`, with `headers` (name, value) added; returns
        the stream's id."""
        stream = self._next_stream
        self._next_stream += 2
        block = b"".join(hpack_literal(name, value) for name, value in (
            (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", self.authority),
            ("content-type", "application/grpc"), ("te", "trailers"), *headers))
        with self._changed:
            self.stream_windows[stream] = self.peer_initial_window
        self._send(self._frame(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), stream, block))
        return stream

    def send_data(self, stream, data, end_stream=False, deadline=None):
        """Sends `data` on `stream` as flow control allows, waiting for window until `deadline`
        (time.monotonic()); returns the bytes sent."""
        sent = 0
        view = memoryview(data)
        while sent < len(data) or (end_stream and not data):
            with self._changed:
                while not self.closed and min(self.connection_window, self.stream_windows[stream]) <= 0 and data:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return sent
                    self._changed.wait(left)
                if self.closed:
                    return sent
                size = min(len(data) - sent, self.peer_max_frame, self.connection_window,
                           self.stream_windows[stream])
                self.connection_window -= size
                self.stream_windows[stream] -= size
            last = end_stream and sent + size == len(data)
            if not self._send(self._frame(DATA, END_STREAM if last else 0, stream, bytes(view[sent:sent + size]))):
                return sent
            sent += size
            if not data:
                break
        return sent

    def wait_for(self, condition, timeout_s):
        """Waits until condition(self) holds or the connection closes; returns whether it holds."""
        with self._changed:
            return self._changed.wait_for(lambda: condition(self) or self.closed, timeout_s) and condition(self)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        self._mark_closed()
