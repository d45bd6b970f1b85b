"""Raw-socket clients that misbehave on purpose, shared by the attack suite and the tests that push
the server past its bounds on clients (docs/security.md)."""
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
