"""Raw-socket clients that misbehave on purpose, shared by the attack suite and the tests that push
the server past its bounds on clients (docs/security.md)."""
import socket
import threading


class Trickler(threading.Thread):
    """Sends one more byte of `tail` on every socket each `interval_s`, until stopped: a slowloris
    client, never silent long enough for an inactivity timeout."""

    def __init__(self, sockets, tail, interval_s=1.0):
        super().__init__(daemon=True)
        self.sockets, self.tail, self.interval_s = sockets, tail, interval_s
        self.stopped = threading.Event()

    def run(self):
        position = 0
        while not self.stopped.wait(self.interval_s):
            byte = self.tail[position % len(self.tail):][:1]
            position += 1
            for s in self.sockets:
                try:
                    s.setblocking(False)
                    s.send(byte)
                except OSError:
                    pass

    def stop(self):
        self.stopped.set()
        self.join()


def read_answer(sock, timeout_s=5):
    """(status, body) of the answer on `sock` (Content-Length framing), or (None, b"") when the server
    closed it first or sent no answer within timeout_s."""
    sock.settimeout(timeout_s)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None, b""
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    except OSError:  # reset, or timed out
        return None, b""
    parts = head.split(b" ", 2)
    return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None), body


# The hostile clients' address: the normal clients call from 127.0.0.1, so that a bound per client
# address (REST's --http-max-connections-per-client) tells them apart as it would two hosts (Linux
# routes all of 127/8 to lo).
ATTACKER = "127.0.0.2"


def open_sockets(port, count, first_bytes=b"", timeout_s=5, sources=(ATTACKER,)):
    """`count` connections to 127.0.0.1:port from the `sources` addresses in turn, each having sent
    `first_bytes`; stops at the first that cannot connect (the descriptor limit) and returns those
    made, the ones the server closed at once (a cap) among them."""
    sockets = []
    for i in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=timeout_s,
                                         source_address=(sources[i % len(sources)], 0))
        except OSError:
            break
        try:
            if first_bytes:
                s.sendall(first_bytes)
        except OSError:
            pass  # closed on arrival: still_open() does not count it
        sockets.append(s)
    return sockets


def still_open(sockets):
    """How many of `sockets` the server has not closed: a non-blocking peek finds no EOF."""
    count = 0
    for s in sockets:
        try:
            s.setblocking(False)
            if s.recv(1, socket.MSG_PEEK) != b"":
                count += 1
        except BlockingIOError:
            count += 1
        except OSError:
            pass
    return count


def close_all(sockets):
    for s in sockets:
        try:
            s.close()
        except OSError:
            pass
