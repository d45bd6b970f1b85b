#!/usr/bin/env python3
"""Triton's restricted APIs (--grpc-restricted-protocol, --http-restricted-api) and graphserve's
--admin-apis closed, through Triton's own clients: each API group on gRPC and HTTP without its header,
with a wrong value and with the right one (tritonclient's headers=), Triton's answers (gRPC
UNAVAILABLE, HTTP 403, naming the header), a refused unload that changed nothing, inference and health
open throughout, and closed admin groups refused whatever the headers."""
import unittest

import numpy as np

import server_fixture
from server_fixture import InferenceServerException, status_of

try:
    import tritonclient.http as httpclient
except ImportError as missing:
    print(f"SKIPPED: {missing}; deploy/install-deps.sh installs tritonclient[all]")
    raise SystemExit(77)

MODEL = "tiny_scripted"
GRPC_KEY, GRPC_VALUE = "admin-key", "grpc-secret:with=signs"
HTTP_KEY, HTTP_VALUE = "X-Admin-Key", "http-secret"
# Every group but health and inference, which stay open.
RESTRICTED = "metadata,model-config,model-repository,statistics,trace,logging,shared-memory"


def calls(client, headers):
    """One call of each restricted group, by group; tritonclient's gRPC and HTTP clients alike."""
    return {
        "metadata": lambda: client.get_model_metadata(MODEL, headers=headers),
        "model-config": lambda: client.get_model_config(MODEL, headers=headers),
        "model-repository": lambda: client.get_model_repository_index(headers=headers),
        "statistics": lambda: client.get_inference_statistics(MODEL, headers=headers),
        "trace": lambda: client.get_trace_settings(headers=headers),
        "logging": lambda: client.get_log_settings(headers=headers),
        "shared-memory": lambda: client.get_system_shared_memory_status(headers=headers),
    }


def inputs(module):
    ids = np.arange(1, 7, dtype=np.int64).reshape(1, 6)
    return server_fixture.token_inputs(ids, np.ones_like(ids), module=module)


def stream_once(client, **kwargs):
    """One request on a fresh ModelStreamInfer stream: [(result, error)] as its callback saw them."""
    results = []
    client.start_stream(callback=lambda result, error: results.append((result, error)), **kwargs)
    try:
        client.async_stream_infer(MODEL, inputs(server_fixture.grpcclient))
    except InferenceServerException:
        pass  # the stream had ended already (refused as it opened): the callback was told why
    finally:
        client.stop_stream()
    return results


class RestrictedApisTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        repository = server_fixture.scratch_dir("restricted_repository")
        server_fixture.copy_model(MODEL, repository)
        cls.start_server("--model-repository", str(repository), "--model-control-mode", "explicit",
                         "--load-model", MODEL,
                         f"--grpc-restricted-protocol={RESTRICTED}:{GRPC_KEY}={GRPC_VALUE}",
                         "--http-restricted-api", f"{RESTRICTED}:{HTTP_KEY}={HTTP_VALUE}",
                         log_name="restricted_apis")
        cls.http = cls.server.http_client()
        cls.addClassCleanup(cls.http.close)

    def test_grpc_groups_need_their_metadata(self):
        header = f"triton-grpc-protocol-{GRPC_KEY}"
        for headers in (None, {header: "wrong"}, {GRPC_KEY: GRPC_VALUE}):
            for group, call in calls(self.client, headers).items():
                with self.subTest(group=group, headers=headers):
                    code, message = status_of(call)
                    self.assertEqual(code, "StatusCode.UNAVAILABLE", message)
                    self.assertIn(f"This protocol is restricted, expecting header '{header}'", message)
                    self.assertIn(group, message)
                    self.assertNotIn(GRPC_VALUE, message)
        for group, call in calls(self.client, {header: GRPC_VALUE}).items():
            with self.subTest(group=group):
                self.assertEqual(status_of(call), ("OK", ""))

    def test_http_groups_need_their_header(self):
        for headers in (None, {HTTP_KEY: "wrong"}, {f"triton-grpc-protocol-{HTTP_KEY}": HTTP_VALUE}):
            for group, call in calls(self.http, headers).items():
                with self.subTest(group=group, headers=headers):
                    with self.assertRaises(InferenceServerException) as refused:
                        call()
                    self.assertEqual(refused.exception.status(), "403")
                    self.assertIn(f"This API is restricted, expecting header '{HTTP_KEY}'",
                                  refused.exception.message())
                    self.assertNotIn(HTTP_VALUE, refused.exception.message())
        # Header names compare without case over HTTP.
        for headers in ({HTTP_KEY: HTTP_VALUE}, {HTTP_KEY.lower(): HTTP_VALUE}):
            for group, call in calls(self.http, headers).items():
                with self.subTest(group=group, headers=headers):
                    call()

    def test_a_refused_unload_changes_nothing(self):
        code, message = status_of(lambda: self.client.unload_model(MODEL))
        self.assertEqual(code, "StatusCode.UNAVAILABLE", message)
        with self.assertRaises(InferenceServerException) as refused:
            self.http.unload_model(MODEL)
        self.assertEqual(refused.exception.status(), "403")
        self.assertTrue(self.client.is_model_ready(MODEL))
        # The right header reaches the handler: loading the model it serves reloads it.
        self.client.load_model(MODEL, headers={f"triton-grpc-protocol-{GRPC_KEY}": GRPC_VALUE})
        self.assertTrue(self.client.is_model_ready(MODEL))

    def test_inference_and_health_stay_open(self):
        self.assertTrue(self.client.is_server_live())
        self.assertTrue(self.client.is_server_ready())
        self.assertTrue(self.client.is_model_ready(MODEL))
        self.assertEqual(self.client.infer(MODEL, inputs(server_fixture.grpcclient)).as_numpy("pooled").shape,
                         (1, 16))
        self.assertTrue(self.http.is_server_live())
        self.assertTrue(self.http.is_model_ready(MODEL))
        self.assertEqual(self.http.infer(MODEL, inputs(httpclient)).as_numpy("pooled").shape, (1, 16))
        # A stream is an inference call too.
        results = stream_once(self.client)
        self.assertEqual(len(results), 1)
        self.assertIsNone(results[0][1])
        # The refusals were logged naming the header, never its value.
        log = self.server.log()
        self.assertNotIn(GRPC_VALUE, log)
        self.assertNotIn(HTTP_VALUE, log)


class AdminApisClosedTest(server_fixture.ServerTestCase):
    """--admin-apis closed: the admin groups no restriction names are refused on each port; one that
    a restriction names opens with its header."""

    @classmethod
    def setUpClass(cls):
        repository = server_fixture.scratch_dir("closed_repository")
        server_fixture.copy_model(MODEL, repository)
        cls.start_server("--model-repository", str(repository), "--model-control-mode", "explicit",
                         "--load-model", MODEL, "--admin-apis", "closed",
                         "--grpc-restricted-protocol", "model-repository,inference:ops=k",
                         log_name="admin_apis_closed")
        cls.http = cls.server.http_client()
        cls.addClassCleanup(cls.http.close)

    def test_admin_groups_are_closed_on_both_ports(self):
        opened = {"triton-grpc-protocol-ops": "k"}
        grpc = calls(self.client, opened)
        for group in ("logging", "trace", "shared-memory"):
            with self.subTest(group=group):
                code, message = status_of(grpc[group])
                self.assertEqual(code, "StatusCode.PERMISSION_DENIED", message)
                self.assertIn(f"the {group} API group is closed", message)
        http = calls(self.http, None)
        for group in ("model-repository", "logging", "trace", "shared-memory"):
            with self.subTest(group=group):
                with self.assertRaises(InferenceServerException) as refused:
                    http[group]()
                self.assertEqual(refused.exception.status(), "403")
                self.assertIn("closed", refused.exception.message())
        code, message = status_of(lambda: self.client.get_model_repository_index())
        self.assertEqual(code, "StatusCode.UNAVAILABLE", message)
        self.assertEqual(status_of(grpc["model-repository"]), ("OK", ""))
        # Read-only groups stay open.
        for group in ("metadata", "model-config", "statistics"):
            with self.subTest(group=group):
                self.assertEqual(status_of(calls(self.client, None)[group]), ("OK", ""))
                calls(self.http, None)[group]()

    def test_restricted_inference_needs_its_metadata_over_grpc_only(self):
        code, message = status_of(lambda: self.client.infer(MODEL, inputs(server_fixture.grpcclient)))
        self.assertEqual(code, "StatusCode.UNAVAILABLE", message)
        self.assertIn("triton-grpc-protocol-ops", message)
        result = self.client.infer(MODEL, inputs(server_fixture.grpcclient), headers={"triton-grpc-protocol-ops": "k"})
        self.assertEqual(result.as_numpy("pooled").shape, (1, 16))
        # REST calls the same gRPC service in-process, and its own flags leave inference open.
        self.assertEqual(self.http.infer(MODEL, inputs(httpclient)).as_numpy("pooled").shape, (1, 16))
        # A refused stream ends with the refusal, before any request of it runs; with the metadata it
        # serves.
        results = stream_once(self.client)
        self.assertEqual(len(results), 1)
        self.assertIsNotNone(results[0][1])
        self.assertIn("triton-grpc-protocol-ops", str(results[0][1]))
        results = stream_once(self.client, headers={"triton-grpc-protocol-ops": "k"})
        self.assertEqual(len(results), 1)
        self.assertIsNone(results[0][1])


if __name__ == "__main__":
    unittest.main()
