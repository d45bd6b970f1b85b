#!/usr/bin/env python3
"""A Triton-style model repository (MODEL/config.pbtxt written for Triton's PyTorch backend,
MODEL/1/model.pt) served unchanged, through Triton's own clients (tritonclient, unmodified):
inference with Triton's INPUT__N / OUTPUT__N names answers as torch does; get_model_config decodes
graphserve's answer with Triton's ModelConfig, sees the effective config with graphserve's own
settings as `parameters`, and nothing outside Triton's schema (a strict parse of the REST answer, no
unknown fields in the gRPC one); it gets NOT_FOUND for an unknown model and UNAVAILABLE before the
server is ready."""
import unittest

import numpy as np
import torch

import server_fixture
from server_fixture import InferenceServerException
from google.protobuf import json_format, unknown_fields
from tritonclient.grpc import model_config_pb2

MODEL = "tiny_triton"  # make_model_repository.py: Triton's config for tiny_scripted's model.pt
ON_CUDA = server_fixture.DEVICE.startswith("cuda")


def unknown_field_numbers(message):
    """The numbers of the fields in `message` and its sub-messages that its schema does not know."""
    numbers = [field.field_number for field in unknown_fields.UnknownFieldSet(message)]
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        if descriptor.message_type.GetOptions().map_entry:
            values = value.values() if descriptor.message_type.fields_by_name["value"].message_type else []
        elif descriptor.is_repeated:
            values = value
        else:
            values = [value]
        for inner in values:
            numbers += unknown_field_numbers(inner)
    return numbers


class ModelConfigTest(server_fixture.ServerTestCase):
    @classmethod
    def setUpClass(cls):
        repository = server_fixture.scratch_dir("model_config_repository")
        model_dir = server_fixture.copy_model(MODEL, repository)
        cls.reference = torch.jit.load(str(model_dir / "1" / "model.pt"))
        cls.start_server("--model-repository", str(repository), log_name="model_config")

    def test_triton_named_tensors_answer_as_torch_does(self):
        self.assertTrue(self.client.is_model_ready(MODEL, "1"))
        generator = np.random.default_rng(7)
        for rows, length in ((1, 5), (3, 20), (4, 32)):
            ids = generator.integers(1, 999, size=(rows, length), dtype=np.int64)
            mask = np.ones_like(ids)
            mask[-1, length // 2:] = 0
            # Triton's PyTorch backend binds INPUT__N to the forward's N-th argument: ids, then mask.
            tensors = server_fixture.infer_inputs((("INPUT__0", ids), ("INPUT__1", mask)))
            result = self.client.infer(MODEL, tensors, model_version="1")
            self.assertEqual(result.get_response().model_version, "1")
            with torch.no_grad():
                hidden, pooled = self.reference(torch.from_numpy(ids), torch.from_numpy(mask))
            np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), hidden.numpy(), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(result.as_numpy("OUTPUT__1"), pooled.numpy(), rtol=1e-4, atol=1e-5)

    def test_effective_config_as_json(self):
        config = self.client.get_model_config(MODEL, as_json=True)["config"]
        self.assertEqual(config["name"], MODEL)
        self.assertEqual(config["platform"], "pytorch_libtorch")
        self.assertEqual(config["backend"], "pytorch")
        self.assertEqual(config["max_batch_size"], 4)
        # As in the config: INPUT__1 first; int64 travels as strings in protobuf's JSON.
        self.assertEqual([(i["name"], i["data_type"], i["dims"]) for i in config["input"]],
                         [("INPUT__1", "TYPE_INT64", ["-1"]), ("INPUT__0", "TYPE_INT64", ["-1"])])
        self.assertEqual([(o["name"], o["dims"]) for o in config["output"]],
                         [("OUTPUT__1", ["16"]), ("OUTPUT__0", ["-1", "16"])])
        batching = config["dynamic_batching"]
        self.assertEqual(batching["preferred_batch_size"], [1, 2, 3, 4])  # [2, 4] and the default steps
        self.assertEqual(batching["max_queue_delay_microseconds"], "1000")
        self.assertEqual(batching["default_queue_policy"]["max_queue_size"], 100)
        graph_specs = config.get("optimization", {}).get("cuda", {}).get("graph_spec", [])
        if ON_CUDA:
            # KIND_AUTO on a CUDA server: its GPU. One graph per bucket: batch sizes x lengths 8, 32.
            self.assertEqual(config["instance_group"],
                             [{"name": "tiny", "kind": "KIND_GPU", "count": 2, "gpus": [0]}])
            self.assertEqual(sorted((int(g.get("batch_size", 0)), g["input"]["INPUT__0"]["dim"])
                                    for g in graph_specs),
                             [(b, [length]) for b in (1, 2, 3, 4) for length in ("32", "8")])
        else:
            self.assertEqual(config["instance_group"], [{"name": "tiny", "kind": "KIND_CPU", "count": 2}])
            self.assertEqual(graph_specs, [])  # a CPU server captures no graphs
        # graphserve's own settings, as parameters.
        parameters = {key: value["string_value"] for key, value in config["parameters"].items()}
        self.assertEqual(parameters["max_sequence_length"], "32")
        self.assertEqual(parameters["bucket_sequence_lengths"], "8,32")
        self.assertEqual(parameters["bucket_batch_sizes"], "1,2,3,4")
        self.assertEqual(parameters["precision"], "fp32")
        self.assertEqual(parameters["pad_value:INPUT__0"], "0")
        for own in ("max_sequence_length", "buckets", "precision", "cuda_graphs"):
            self.assertNotIn(own, config)

    def test_effective_config_as_message(self):
        config = self.client.get_model_config(MODEL).config
        self.assertEqual(config.optimization.cuda.graphs, ON_CUDA)
        self.assertEqual(config.version_policy.latest.num_versions, 1)
        self.assertEqual(config.default_model_filename, "model.pt")
        # Nothing the client's schema lacks, at any depth.
        self.assertEqual(unknown_field_numbers(config), [])
        self.assertEqual(config.parameters["max_sequence_length"].string_value, "32")

    def test_both_answers_parse_strictly_with_tritons_schema(self):
        with self.server.http_client() as http:
            rest = http.get_model_config(MODEL)
        strict = json_format.ParseDict(rest, model_config_pb2.ModelConfig(), ignore_unknown_fields=False)
        over_grpc = self.client.get_model_config(MODEL).config
        self.assertEqual(strict, over_grpc)

    def test_unknown_model_is_not_found_naming_it(self):
        with self.assertRaises(InferenceServerException) as raised:
            self.client.get_model_config("no_such_model")
        self.assertEqual(raised.exception.status(), "StatusCode.NOT_FOUND")
        self.assertIn("name: unknown model 'no_such_model'", raised.exception.message())


class BeforeReadyTest(unittest.TestCase):
    def test_unavailable_until_ready(self):
        # The built-in encoder's default grid takes seconds to warm up on a CPU: the window in which
        # the server listens but is not ready.
        with server_fixture.Server(log_name="model_config_loading", wait_ready=False) as server:
            with server.client() as client:
                try:
                    client.get_model_config("encoder")
                    answered_before_ready = True
                except InferenceServerException as error:
                    answered_before_ready = False
                    self.assertEqual(error.status(), "StatusCode.UNAVAILABLE", error.message())
                    self.assertIn("still loading", error.message())
                if answered_before_ready:
                    self.assertTrue(client.is_server_ready())  # only a ready server answers
                server.wait_until(lambda c: c.is_server_ready(), server.ready_timeout_s, "readiness")
                config = client.get_model_config("encoder").config
                self.assertEqual(config.platform, "graphserve_encoder")
                # The built-in encoder's config sets graphserve's own fields (pad_value, min_value,
                # sequence_mask_input, ...): its answer stays within Triton's schema all the same.
                self.assertEqual(unknown_field_numbers(config), [])
                self.assertEqual(config.parameters["sequence_mask_input"].string_value, "attention_mask")
                with server.http_client() as http:
                    rest = http.get_model_config("encoder")
                self.assertEqual(json_format.ParseDict(rest, model_config_pb2.ModelConfig()), config)


if __name__ == "__main__":
    unittest.main()
