#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpus (corpus/<target>/, checked in) from the repository itself:
small valid inputs, one per form each decoder reads, so that fuzzing starts past the parsers' front
doors. Run it again after a change of the request forms or of the example configs:

  tests/fuzz/make_seeds.py      (needs protoc, which deploy/install-deps.sh installs)

  rest_infer_request   two bytes of Inference-Header-Content-Length, little-endian (ffff: none),
                       then the body: JSON tensors, or a JSON header and binary tensors
  grpc_infer_request   a serialized inference.ModelInferRequest, for the models of fuzz_support.h
  http_request         the bytes a client writes on one connection: the REST seeds as infer calls (plain,
                       chunked, gzip), health and repository calls, pipelined requests
  model_config         every config.pbtxt the tests, the examples and the built-in encoder use

The inputs of past findings, regression-*, are kept as they were found.
"""
import ast
import json
import pathlib
import re
import struct
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
NO_HEADER_LENGTH = 0xFFFF

# (datatype, struct format) of what the fuzz models take.
PACK = {"INT64": "q", "INT32": "i", "FP32": "f", "BOOL": "?", "FP16": "e"}


def tensor(name, datatype, shape, values):
    return {"name": name, "datatype": datatype, "shape": shape, "values": values}


def raw(t):
    return struct.pack("<%d%s" % (len(t["values"]), PACK[t["datatype"]]), *t["values"])


def rows(values, width):
    return [values[i:i + width] for i in range(0, len(values), width)]


# The requests both decoders are seeded with: one of each model of fuzz_support.h, in the forms a
# client sends.
IDS = [101, 2023, 2003, 102, 101, 7592, 102, 0]
MASK = [1, 1, 1, 1, 1, 1, 1, 0]
REQUESTS = {
    "encoder": dict(model="encoder", outputs=["pooler_output"],
                    inputs=[tensor("input_ids", "INT64", [1, 4], IDS[:4]),
                            tensor("attention_mask", "INT64", [1, 4], MASK[:4])]),
    "encoder_batch": dict(model="encoder", id="batch-2", outputs=[],
                          inputs=[tensor("input_ids", "INT64", [2, 4], IDS),
                                  tensor("attention_mask", "INT64", [2, 4], MASK)]),
    "bert32": dict(model="bert32", outputs=["last_hidden_state", "pooler_output"], timeout_us=5000,
                   inputs=[tensor("input_ids", "INT32", [2, 3], [101, 7592, 102, 101, 2088, 102]),
                           tensor("attention_mask", "INT32", [2, 3], [1] * 6),
                           tensor("token_type_ids", "INT32", [2, 3], [0] * 6)]),
    "tabular": dict(model="tabular", outputs=["score"],
                    inputs=[tensor("features", "FP32", [1, 2, 3], [0.5, -1.0, 2.25, 0.0, 1e-3, 3.0]),
                            tensor("flags", "BOOL", [1, 3], [True, False, True])]),
}


def rest_json(request, binary=()):
    """The REST body's JSON; the inputs named in `binary` as binary_data_size, in order."""
    body = {"inputs": []}
    if "id" in request:
        body["id"] = request["id"]
    if "timeout_us" in request:
        body["parameters"] = {"timeout": request["timeout_us"]}
    for t in request["inputs"]:
        entry = {"name": t["name"], "datatype": t["datatype"], "shape": t["shape"]}
        if t["name"] in binary:
            entry["parameters"] = {"binary_data_size": len(raw(t))}
        else:  # nested rows, as numpy's tolist() gives them
            entry["data"] = rows(t["values"], t["shape"][-1]) if len(t["shape"]) > 1 else t["values"]
        body["inputs"].append(entry)
    if request["outputs"]:
        body["outputs"] = [{"name": name} for name in request["outputs"]]
    return json.dumps(body).encode()


def rest_seed(header, tensors=b"", header_length=True):
    length = len(header) if header_length else NO_HEADER_LENGTH
    return struct.pack("<H", length) + header + tensors


def rest_seeds():
    seeds = {}
    for name, request in REQUESTS.items():
        seeds[name + "_json"] = rest_seed(rest_json(request), header_length=False)
        binary = [t["name"] for t in request["inputs"]]
        seeds[name + "_binary"] = rest_seed(rest_json(request, binary),
                                            b"".join(raw(t) for t in request["inputs"]))
    # Binary and JSON tensors mixed, binary outputs asked for, per request and per output.
    mixed = dict(REQUESTS["encoder"], outputs=[])
    header = json.loads(rest_json(mixed, ["attention_mask"]))
    header["parameters"] = {"binary_data_output": True}
    header["outputs"] = [{"name": "last_hidden_state", "parameters": {"binary_data": False}}]
    seeds["encoder_mixed"] = rest_seed(json.dumps(header).encode(), raw(mixed["inputs"][1]))
    # A half-precision tensor, which has only the binary form.
    half = tensor("x", "FP16", [1, 2], [1.5, -2.0])
    header = json.dumps({"inputs": [{"name": "x", "datatype": "FP16", "shape": [1, 2],
                                     "parameters": {"binary_data_size": 4}}]}).encode()
    seeds["fp16_binary"] = rest_seed(header, raw(half))
    return seeds


def text_bytes(data):
    return '"' + "".join("\\%03o" % b for b in data) + '"'


def grpc_text(request, typed):
    """The request as protobuf text: raw_input_contents, or the typed contents fields."""
    lines = ['model_name: "%s"' % request["model"]]
    if "id" in request:
        lines.append('id: "%s"' % request["id"])
    if "timeout_us" in request:
        lines.append('parameters { key: "timeout" value { int64_param: %d } }' % request["timeout_us"])
    field = {"INT64": "int64_contents", "INT32": "int_contents", "FP32": "fp32_contents",
             "BOOL": "bool_contents"}
    for t in request["inputs"]:
        contents = ""
        if typed:
            values = ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in t["values"])
            contents = " contents { %s: [ %s ] }" % (field[t["datatype"]], values)
        lines.append('inputs { name: "%s" datatype: "%s" shape: [ %s ]%s }'
                     % (t["name"], t["datatype"], ", ".join(map(str, t["shape"])), contents))
    lines += ['outputs { name: "%s" }' % name for name in request["outputs"]]
    if not typed:
        lines += ["raw_input_contents: " + text_bytes(raw(t)) for t in request["inputs"]]
    return "\n".join(lines) + "\n"


def grpc_seeds():
    seeds = {}
    for name, request in REQUESTS.items():
        for typed in (False, True):
            text = grpc_text(request, typed)
            seeds[name + ("_typed" if typed else "_raw")] = subprocess.run(
                ["protoc", "-I", str(REPO / "proto"), "--encode=inference.ModelInferRequest",
                 "grpc_service.proto"], input=text.encode(), check=True, capture_output=True).stdout
    return seeds


def python_strings(path, names):
    """The module-level string constants `names` of a test script, evaluated without importing it
    (the scripts import torch)."""
    module = ast.parse(path.read_text())
    assignments = [node for node in module.body if isinstance(node, ast.Assign)
                   and any(isinstance(t, ast.Name) and t.id in names for t in node.targets)]
    scope = {}
    exec(compile(ast.Module(body=assignments, type_ignores=[]), str(path), "exec"), scope)
    return {name: scope[name] for name in names}


TOKEN_BUDGET_CONFIG = """name: "staircase"
platform: "pytorch_libtorch"
max_batch_size: 4
max_sequence_length: 64
input { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] }
output { name: "hidden" data_type: TYPE_FP32 dims: [ -1, 8 ] }
buckets { batch_sizes: [ 1, 4, 16 ] sequence_lengths: [ 16, 64 ] max_batch_tokens: 256 }
parameters { key: "max_batch_tokens" value { string_value: "256" } }
optimization { cuda {
  graph_spec { batch_size: 1 input { key: "input_ids" value { dim: [ 16 ] } } }
  graph_spec { batch_size: 1 input { key: "input_ids" value { dim: [ 64 ] } } }
  graph_spec { batch_size: 4 input { key: "input_ids" value { dim: [ 16 ] } } }
  graph_spec { batch_size: 4 input { key: "input_ids" value { dim: [ 64 ] } } }
  graph_spec { batch_size: 16 input { key: "input_ids" value { dim: [ 16 ] } } }
} }
"""


def http_request(method, path, body=b"", headers=()):
    lines = [f"{method} {path} HTTP/1.1", "Host: graphserve"] + list(headers)
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked(body, size=7):
    pieces = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def http_seeds():
    import gzip
    seeds = {}
    for name, data in rest_seeds().items():
        json_length = struct.unpack("<H", data[:2])[0]
        body = data[2:]
        headers = ["Content-Type: application/json"]
        if json_length != NO_HEADER_LENGTH:
            headers = ["Content-Type: application/octet-stream", f"Inference-Header-Content-Length: {json_length}"]
        seeds["infer_" + name] = http_request("POST", "/v2/models/encoder/infer", body, headers)
    body = rest_seeds()["encoder_json"][2:]
    seeds["infer_chunked"] = (b"POST /v2/models/encoder/infer HTTP/1.1\r\nHost: graphserve\r\n"
                              b"Transfer-Encoding: chunked\r\n\r\n" + chunked(body))
    seeds["infer_gzip"] = http_request("POST", "/v2/models/encoder/versions/1/infer", gzip.compress(body, mtime=0),
                                       ["Content-Encoding: gzip", "Accept-Encoding: gzip"])
    seeds["health_pipelined"] = (http_request("GET", "/v2/health/ready") + http_request("GET", "/v2/health/live")
                                 + http_request("HEAD", "/v2"))
    seeds["repository_token"] = http_request("POST", "/v2/repository/index", b"{}",
                                             ["Authorization: Bearer fuzz-token"])
    seeds["query_and_escapes"] = http_request("GET", "/v2/models/enc%6fder/config?x=1&y=%20", b"",
                                              ["Connection: close", "X-Many: a, b,  c"])
    return seeds


def config_seeds():
    seeds = {}
    found = python_strings(REPO / "tests/integration/make_model_repository.py",
                           ["TOKEN_INPUTS", "CONFIGS", "TRITON_CONFIG"])
    for name, config in found["CONFIGS"].items():
        seeds["repository_" + name] = f'name: "{name}"\n' + config
    seeds["repository_tiny_triton"] = found["TRITON_CONFIG"]
    seeds["repository_resnet18"] = python_strings(
        REPO / "tests/integration/make_fixed_shape_repository.py", ["CONFIG"])["CONFIG"]
    # The C++ literals: the built-in encoder's, the tests' and the fuzz models' configs.
    for source in ["server/src/config/config.cpp", "tests/server/triton_config_test.cpp",
                   "tests/server/fixed_shape_config.h", "tests/fuzz/fuzz_support.cpp"]:
        literals = re.findall(r'constexpr const char\* k(\w+) = R"pb\((.*?)\)pb"',
                              (REPO / source).read_text(), re.S)
        for name, text in literals:  # kTritonConfig: triton_config
            seeds[re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()] = text
    # A token budget: batch sizes above max_batch_size at the short lengths, and a staircase
    # graph_spec beside it.
    seeds["token_budget_grid"] = TOKEN_BUDGET_CONFIG
    sys.path.insert(0, str(REPO / "deploy/models"))
    from token_model_config import token_model_config
    seeds["export_bert_fp16"] = token_model_config("bert", "torch_aoti", "fp16", 8, 128,
                                                   [("last_hidden_state", [-1, 768]), ("pooler_output", [768])])
    return {name: text.encode() for name, text in seeds.items()}


def main():
    for target, seeds in [("rest_infer_request", rest_seeds()), ("grpc_infer_request", grpc_seeds()),
                          ("http_request", http_seeds()), ("model_config", config_seeds())]:
        folder = HERE / "corpus" / target
        folder.mkdir(parents=True, exist_ok=True)  # beside the findings' inputs (regression-*)
        for name, data in sorted(seeds.items()):
            (folder / name).write_bytes(data)
        print(f"{folder.relative_to(REPO)}: {len(seeds)} seeds")


if __name__ == "__main__":
    main()
