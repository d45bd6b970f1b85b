#!/usr/bin/env python3
"""TLS, mutual TLS and tokens on every port, as standard clients use them: Triton's gRPC client with
ssl=True and its certificates, tritonclient.http and curl over https, /metrics over https, and a
certificate swapped while the server runs. The certificates are made here with the `openssl` CLI."""
import os
import pathlib
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
import unittest

import numpy as np

import server_fixture
from server_fixture import InferenceServerException, grpcclient

MODEL = "tiny_scripted"
FILE_TOKEN = "file-token-3f9a"
ENV_TOKEN = "env-token-77c1"
OPENSSL = shutil.which("openssl")
CURL = shutil.which("curl")


def openssl(*args):
    subprocess.run([OPENSSL, *args], check=True, capture_output=True, timeout=60)


class Pki:
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate, in `folder`."""

    def __init__(self, folder):
        self.dir = pathlib.Path(folder)
        self.ca, self.ca_key = self.dir / "ca.crt", self.dir / "ca.key"
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.ca_key), "-out",
                str(self.ca), "-days", "2", "-subj", "/CN=graphserve test CA")
        self.server_key = self.dir / "server.key"
        self.server_cert = self.dir / "server.crt"
        openssl("genpkey", "-algorithm", "RSA", "-out", str(self.server_key))
        self.issue(self.server_cert, self.server_key, "graphserve-server-1", 1001,
                   "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        self.client_key = self.dir / "client.key"
        self.client_cert = self.dir / "client.crt"
        openssl("genpkey", "-algorithm", "RSA", "-out", str(self.client_key))
        self.issue(self.client_cert, self.client_key, "graphserve-test-client", 2001,
                   "extendedKeyUsage=clientAuth\n")

    def issue(self, cert, key, common_name, serial, extensions, ca=None, ca_key=None):
        """Signs a certificate for `key`, written to `cert` in one rename (as a secret update is)."""
        csr = self.dir / f"{common_name}.csr"
        ext = self.dir / f"{common_name}.ext"
        ext.write_text(extensions)
        openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", f"/CN={common_name}")
        staged = self.dir / f"{common_name}.staged"
        openssl("x509", "-req", "-in", str(csr), "-CA", str(ca or self.ca), "-CAkey", str(ca_key or self.ca_key),
                "-set_serial", str(serial), "-days", "2", "-extfile", str(ext), "-out", str(staged))
        os.replace(staged, cert)

    def read(self, path):
        return pathlib.Path(path).read_bytes()


def peer_common_name(port, pki):
    """The CN of the certificate a new TLS connection to `port` is shown (a client certificate sent)."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    context.set_alpn_protocols(["h2", "http/1.1"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            subject = dict(item[0] for item in tls.getpeercert()["subject"])
    return subject["commonName"]


class TlsServer(server_fixture.Server):
    """graphserve whose clients, the fixture's readiness poll included, connect over mutual TLS."""

    def __init__(self, pki, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pki = pki

    def client(self, **kwargs):
        return grpcclient.InferenceServerClient(
            f"localhost:{self.grpc_port}", ssl=True, root_certificates=str(self.pki.ca),
            private_key=str(self.pki.client_key), certificate_chain=str(self.pki.client_cert), **kwargs)


class TlsTokenTest(server_fixture.ServerTestCase):
    """Mutual TLS on every port, tokens from a file and the environment, health probes open."""

    @classmethod
    def setUpClass(cls):
        if OPENSSL is None or CURL is None:
            raise unittest.SkipTest("openssl and curl are needed (deploy/install-deps.sh installs them)")
        folder = server_fixture.scratch_dir("tls")
        cls.pki = Pki(folder)
        token_file = folder / "tokens"
        token_file.write_text("# accepted tokens\n\n" + FILE_TOKEN + "\n")
        repository = server_fixture.copy_model(MODEL, server_fixture.scratch_dir("tls_repository")).parent
        os.environ["GRAPHSERVE_AUTH_TOKEN"] = ENV_TOKEN
        try:
            server = TlsServer(cls.pki, "--model-repository", str(repository),
                               "--tls-cert-file", str(cls.pki.server_cert), "--tls-key-file", str(cls.pki.server_key),
                               "--tls-client-ca-file", str(cls.pki.ca), "--tls-reload-interval-s", "1",
                               "--auth-token-file", str(token_file), log_name="tls")
            server.__enter__()
        finally:
            del os.environ["GRAPHSERVE_AUTH_TOKEN"]
        cls.addClassCleanup(server.__exit__, None, None, None)
        cls.server = server
        cls.client = server.client()
        cls.addClassCleanup(cls.client.close)

    def infer(self, client, **kwargs):
        """One request; returns its `pooled` output. `client` is either of tritonclient's."""
        import tritonclient.http as httpclient
        module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
        ids = np.array([[101, 7, 8, 102]], dtype=np.int64)
        inputs = []
        for name, array in (("input_ids", ids), ("attention_mask", np.ones_like(ids))):
            inputs.append(module.InferInput(name, list(array.shape), "INT64"))
            inputs[-1].set_data_from_numpy(array)
        return client.infer(MODEL, inputs, **kwargs).as_numpy("pooled")

    def http_client(self, **kwargs):
        import tritonclient.http as httpclient
        return httpclient.InferenceServerClient(
            f"localhost:{self.server.http_port}", ssl=True,
            ssl_options={"ca_certs": str(self.pki.ca), "certfile": str(self.pki.client_cert),
                         "keyfile": str(self.pki.client_key)}, **kwargs)

    def curl(self, port, path, *args, client_cert=True):
        certificate = ["--cert", str(self.pki.client_cert), "--key", str(self.pki.client_key)] if client_cert else []
        done = subprocess.run([CURL, "-sS", "--cacert", str(self.pki.ca), *certificate, "-o", "-",
                               "-w", "\n%{http_code}", *args, f"https://localhost:{port}{path}"],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            return None, done.stderr
        body, _, code = done.stdout.rpartition("\n")
        return int(code), body

    def test_grpc_infer_needs_a_token(self):
        for headers in ({"authorization": f"Bearer {FILE_TOKEN}"}, {"authorization": f"bearer {ENV_TOKEN}"},
                        {"x-api-key": FILE_TOKEN}):
            self.assertEqual(self.infer(self.client, headers=headers).shape, (1, 16))
        self.assert_status(lambda: self.infer(self.client), "UNAUTHENTICATED", "token")
        self.assert_status(lambda: self.infer(self.client, headers={"authorization": "Bearer wrong"}),
                           "UNAUTHENTICATED")
        self.assert_status(lambda: self.client.get_model_metadata(MODEL), "UNAUTHENTICATED")
        # Probes need no secret.
        self.assertTrue(self.client.is_server_live())
        self.assertTrue(self.client.is_server_ready())

    def test_grpc_health_service_is_open(self):
        import grpc
        credentials = grpc.ssl_channel_credentials(self.pki.read(self.pki.ca), self.pki.read(self.pki.client_key),
                                                   self.pki.read(self.pki.client_cert))
        with grpc.secure_channel(f"localhost:{self.server.grpc_port}", credentials) as channel:
            check = channel.unary_unary("/grpc.health.v1.Health/Check")
            self.assertEqual(check(b"", timeout=10), b"\x08\x01")  # status: SERVING

    def test_plaintext_and_certificate_less_clients_are_refused(self):
        with grpcclient.InferenceServerClient(self.server.url) as plaintext:
            self.assert_status(plaintext.is_server_live, "UNAVAILABLE")
        with grpcclient.InferenceServerClient(f"localhost:{self.server.grpc_port}", ssl=True,
                                              root_certificates=str(self.pki.ca)) as no_certificate:
            self.assert_status(no_certificate.is_server_live, "UNAVAILABLE")
        code, error = self.curl(self.server.http_port, "/v2/health/live", client_cert=False)
        self.assertIsNone(code, "an HTTPS request without a client certificate was answered")
        # A certificate from a CA the server does not trust.
        stranger = Pki(server_fixture.scratch_dir("tls_stranger"))
        with grpcclient.InferenceServerClient(
                f"localhost:{self.server.grpc_port}", ssl=True, root_certificates=str(self.pki.ca),
                private_key=str(stranger.client_key), certificate_chain=str(stranger.client_cert)) as untrusted:
            self.assert_status(untrusted.is_server_live, "UNAVAILABLE")
        for port in (self.server.http_port, self.server.metrics_port):
            done = subprocess.run([CURL, "-sS", "--cacert", str(self.pki.ca), "--cert", str(stranger.client_cert),
                                   "--key", str(stranger.client_key), f"https://localhost:{port}/v2/health/live"],
                                  capture_output=True, text=True, timeout=60)
            self.assertNotEqual(done.returncode, 0, f"port {port} answered an untrusted client certificate")
        done = subprocess.run([CURL, "-sS", f"http://127.0.0.1:{self.server.http_port}/v2/health/live"],
                              capture_output=True, text=True, timeout=60)
        self.assertNotEqual(done.returncode, 0, "plain HTTP on the HTTPS port was answered: " + done.stdout)

    def test_rest_over_https(self):
        with self.http_client() as http:
            self.assertTrue(http.is_server_ready())  # open without a token
            self.assertEqual(self.infer(http, headers={"authorization": f"Bearer {FILE_TOKEN}"}).shape, (1, 16))
            with self.assertRaises(InferenceServerException) as raised:
                self.infer(http)
            self.assertEqual(raised.exception.status(), "401")
        code, body = self.curl(self.server.http_port, f"/v2/models/{MODEL}", "-H", f"x-api-key: {ENV_TOKEN}")
        self.assertEqual(code, 200, body)
        self.assertIn(MODEL, body)
        # Refused from its headers: the body is never read.
        code, body = self.curl(self.server.http_port, f"/v2/models/{MODEL}/infer", "-D", "-",
                               "--data-binary", "not even JSON")
        self.assertEqual(code, 401, body)
        self.assertRegex(body, re.compile(r"^www-authenticate: Bearer", re.IGNORECASE | re.MULTILINE))
        self.assertIn('"error"', body)

    def test_metrics_over_https_count_refusals(self):
        self.assert_status(lambda: self.infer(self.client), "UNAUTHENTICATED")
        code, body = self.curl(self.server.metrics_port, "/metrics")
        self.assertEqual(code, 200, body)
        match = re.search(r'graphserve_auth_failures_total\{endpoint="grpc"\} (\S+)', body)
        self.assertIsNotNone(match, body[:2000])
        self.assertGreaterEqual(float(match.group(1)), 1)
        self.assertNotIn(FILE_TOKEN, self.server.log())
        self.assertNotIn(ENV_TOKEN, self.server.log())

    def test_graphserve_cli_over_mutual_tls_with_a_token(self):
        cli = os.environ.get("GRAPHSERVE_CLI")
        if not cli:
            self.skipTest("GRAPHSERVE_CLI is not set (run through ctest)")
        tls = ["--address", f"localhost:{self.server.grpc_port}", "--tls-ca-file", str(self.pki.ca),
               "--tls-cert-file", str(self.pki.client_cert), "--tls-key-file", str(self.pki.client_key)]
        env = {key: value for key, value in os.environ.items() if key != "GRAPHSERVE_AUTH_TOKEN"}

        def run(*args, token=None):
            return subprocess.run([cli, *args], capture_output=True, text=True, timeout=60,
                                  env=dict(env, **({"GRAPHSERVE_AUTH_TOKEN": token} if token else {})))

        done = run("health", *tls)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        done = run("metadata", "--model", MODEL, *tls, token=ENV_TOKEN)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("input_ids", done.stdout)
        done = run("metadata", "--model", MODEL, *tls)
        self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
        self.assertIn("UNAUTHENTICATED", done.stderr)

    def test_reload_swapped_certificate(self):
        self.assertEqual(peer_common_name(self.server.http_port, self.pki), "graphserve-server-1")
        self.assertEqual(peer_common_name(self.server.grpc_port, self.pki), "graphserve-server-1")
        # A new certificate for the same key, replaced in one rename, as a mounted secret changes.
        self.pki.issue(self.pki.server_cert, self.pki.server_key, "graphserve-server-2", 1002,
                       "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        self.server.process.send_signal(signal.SIGHUP)
        ports = {"http": self.server.http_port, "metrics": self.server.metrics_port, "grpc": self.server.grpc_port}
        deadline = time.monotonic() + 20  # gRPC re-reads every --tls-reload-interval-s (1 s)
        seen = {}
        while time.monotonic() < deadline:
            seen = {name: peer_common_name(port, self.pki) for name, port in ports.items()}
            if set(seen.values()) == {"graphserve-server-2"}:
                break
            time.sleep(0.2)
        self.assertEqual(set(seen.values()), {"graphserve-server-2"}, seen)
        self.assertEqual(self.server.process.poll(), None)
        with self.server.client() as fresh:
            self.infer(fresh, headers={"authorization": f"Bearer {FILE_TOKEN}"})
        self.infer(self.client, headers={"authorization": f"Bearer {FILE_TOKEN}"})  # an older connection
        with self.http_client() as http:
            self.infer(http, headers={"authorization": f"Bearer {ENV_TOKEN}"})


class FlagsTest(unittest.TestCase):
    """Inconsistent security flags are refused at once, naming the flag (exit 2)."""

    def refused(self, *args, env=None):
        done = subprocess.run([server_fixture.BINARY, "--grpc-address", "127.0.0.1:0", "--http-address",
                               "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", *args],
                              capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(done.returncode, 2, done.stdout + done.stderr)
        return done.stdout + done.stderr

    def test_inconsistent_flags(self):
        folder = server_fixture.scratch_dir("tls_flags")
        (folder / "empty").write_text("# nothing\n")
        self.assertIn("--tls-cert-file needs --tls-key-file", self.refused("--tls-cert-file", "/etc/hostname"))
        self.assertIn("--tls-client-ca-file", self.refused("--tls-client-ca-file", "/etc/hostname"))
        self.assertIn("--tls-cert-file: cannot read",
                      self.refused("--tls-cert-file", str(folder / "missing"), "--tls-key-file", "/etc/hostname"))
        self.assertIn("holds no token", self.refused("--auth-token-file", str(folder / "empty")))
        (folder / "token").write_text("a-token\n")
        self.assertIn("need TLS", self.refused("--auth-token-file", str(folder / "token")))
        env = {key: value for key, value in os.environ.items() if key != "GRAPHSERVE_AUTH_TOKEN"}
        self.assertIn("--auth-health", self.refused("--auth-health", env=env))

    def test_out_of_range_ports_and_timeouts(self):
        # getaddrinfo keeps a port's low 16 bits: 99999 listened on 34463.
        done = subprocess.run([server_fixture.BINARY, "--grpc-address", "127.0.0.1:99999", "--http-address",
                               "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--device", "cpu"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 2, done.stdout + done.stderr)  # refused before any port opens
        self.assertIn("--grpc-address 127.0.0.1:99999: expected HOST:PORT, the port 0 to 65535",
                      done.stdout + done.stderr)
        # 1e300 s overflowed the drain's deadline: SIGTERM then exited at once, without draining.
        # CLI11 refuses these itself (its own exit code).
        for flag, value in (("--drain-timeout-s", "1e300"), ("--connection-idle-timeout-s", "1e10")):
            done = subprocess.run([server_fixture.BINARY, flag, value], capture_output=True, text=True, timeout=60)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn(f"{flag}: Value {value} not in range", done.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
