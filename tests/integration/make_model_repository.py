#!/usr/bin/env python3
"""Writes a graphserve model repository for the integration tests into the folder given as argv[1].

Models are made here, at test time, with the project's Python (the torch wheel whose libtorch the
server links; CMake passes it), so the tests prove that a user's own TorchScript file loads and
serves:
  tiny_scripted  torch.jit.script, masked attention, returns a tuple (hidden [B,L,16], pooled [B,16])
  tiny_traced    torch.jit.trace, per-token projection, returns one tensor [B,L,4]
  encoder        the built-in encoder with a small bucket grid, so that warm-up stays quick on CPUs
  encoder_pt2    the same encoder (architecture and weights) as an AOTInductor package from
                 deploy/models/export_encoder.py, with the same grid: it must answer as `encoder`
                 does. Compiled for GRAPHSERVE_TEST_DEVICE's kind (CPU unless it names cuda).
  tiny_strict    tiny_traced's architecture scripted without its clamp: a token id beyond its
                 1000-entry embedding fails the whole batch, as a real model's would; batches of up to
                 8 wait long for company, so that a bad request rides with good ones
  tiny_bounded   tiny_strict under a config whose input_ids carry min_value/max_value
  tiny_spin      scripted; loops as many times as the largest token id: a request with a huge id
                 keeps its batch running (a hung device, for the shutdown tests)
  tiny_triton    tiny_scripted's model.pt in Triton's layout (tiny_triton/1/model.pt) under a
                 config as Triton's PyTorch backend takes it:
                 backend "pytorch", tensors named INPUT__N / OUTPUT__N (listed out of order, so that
                 only binding by N answers right), Triton's batching and instance fields, and
                 fields graphserve ignores; it must answer as tiny_scripted does.
"""
import os
import pathlib
import subprocess
import sys

import torch


class TinyAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(1000, 16)
        self.query = torch.nn.Linear(16, 16)
        self.key = torch.nn.Linear(16, 16)
        self.value = torch.nn.Linear(16, 16)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        x = self.embed(input_ids.clamp(0, 999))
        scores = self.query(x) @ self.key(x).transpose(1, 2) / 4.0
        # Padded keys get no weight, so padding never changes a real position's output.
        scores = scores.masked_fill(attention_mask[:, None, :] == 0, -1e9)
        hidden = torch.softmax(scores, dim=-1) @ self.value(x)
        mask = attention_mask[:, :, None].to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return hidden, pooled


class TinyProjection(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(1000, 4)

    def forward(self, input_ids, attention_mask):
        return self.embed(input_ids.clamp(0, 999)) * attention_mask[:, :, None].float()


class StrictProjection(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(1000, 4)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        return self.embed(input_ids) * attention_mask[:, :, None].float()


class Spin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        # On the inputs' device: a CPU tensor here fails the model's warm-up on a CUDA device.
        x = torch.ones(input_ids.shape[0], input_ids.shape[1], 4, device=input_ids.device)
        for _ in range(int(input_ids.max())):
            x = torch.tanh(self.proj(x))
        return x * attention_mask[:, :, None].float()


# Every token model here masks with attention_mask, so its lengths may be padded.
TOKEN_INPUTS = """
sequence_mask_input: "attention_mask"
input { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }
input { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }
"""

CONFIGS = {
    "tiny_scripted": TOKEN_INPUTS + """
platform: "pytorch_libtorch"
max_batch_size: 4
max_sequence_length: 32
output { name: "hidden" data_type: TYPE_FP32 dims: [ -1, 16 ] }
output { name: "pooled" data_type: TYPE_FP32 dims: [ 16 ] }
buckets { batch_sizes: [ 1, 2, 4 ] sequence_lengths: [ 8, 16, 32 ] }
dynamic_batching { max_queue_delay_microseconds: 2000 }
""",
    "tiny_traced": TOKEN_INPUTS + """
platform: "pytorch_libtorch"
max_batch_size: 8
max_sequence_length: 64
output { name: "projected" data_type: TYPE_FP32 dims: [ -1, 4 ] }
buckets { batch_sizes: [ 2, 8 ] sequence_lengths: [ 16, 64 ] }
""",
    "tiny_strict": TOKEN_INPUTS + """
platform: "pytorch_libtorch"
max_batch_size: 8
max_sequence_length: 16
output { name: "projected" data_type: TYPE_FP32 dims: [ -1, 4 ] }
buckets { batch_sizes: [ 8 ] sequence_lengths: [ 16 ] }
dynamic_batching { max_queue_delay_microseconds: 300000 }
""",
    "tiny_bounded": """
sequence_mask_input: "attention_mask"
input { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 min_value: 0 max_value: 999 }
input { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 min_value: 0 max_value: 1 }
platform: "pytorch_libtorch"
max_batch_size: 8
max_sequence_length: 16
output { name: "projected" data_type: TYPE_FP32 dims: [ -1, 4 ] }
buckets { batch_sizes: [ 8 ] sequence_lengths: [ 16 ] }
""",
    "tiny_spin": TOKEN_INPUTS + """
platform: "pytorch_libtorch"
max_batch_size: 1
max_sequence_length: 16
output { name: "spun" data_type: TYPE_FP32 dims: [ -1, 4 ] }
buckets { batch_sizes: [ 1 ] sequence_lengths: [ 16 ] }
""",
    "encoder": TOKEN_INPUTS + """
platform: "graphserve_encoder"
max_batch_size: 8
max_sequence_length: 64
output { name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, 256 ] }
output { name: "pooler_output" data_type: TYPE_FP32 dims: [ 256 ] }
buckets { batch_sizes: [ 1, 2, 4, 8 ] sequence_lengths: [ 16, 32, 64 ] }
dynamic_batching { max_queue_delay_microseconds: 5000 max_queue_size: 2000 }
instance_group { count: 2 }
""",
}


# Written for Triton: graphserve's settings travel as parameters, and Triton-only blocks stay.
TRITON_CONFIG = """
name: "tiny_triton"
backend: "pytorch"
max_batch_size: 4
input [
  { name: "INPUT__1" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "INPUT__0" data_type: TYPE_INT64 dims: [ -1 ] }
]
output [
  { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1, 16 ] }
]
instance_group [ { name: "tiny" count: 2 kind: KIND_AUTO } ]
dynamic_batching {
  preferred_batch_size: [ 2, 4 ]
  max_queue_delay_microseconds: 1000
  default_queue_policy { max_queue_size: 100 }
}
parameters: { key: "max_sequence_length" value: { string_value: "32" } }
parameters: { key: "bucket_sequence_lengths" value: { string_value: "8,32" } }
parameters: { key: "sequence_mask_input" value: { string_value: "INPUT__1" } }
parameters: { key: "INFERENCE_MODE" value: { string_value: "true" } }
model_warmup [
  {
    name: "zeros"
    batch_size: 1
    inputs { key: "INPUT__0" value: { data_type: TYPE_INT64 dims: [ 8 ] zero_data: true } }
    inputs { key: "INPUT__1" value: { data_type: TYPE_INT64 dims: [ 8 ] zero_data: true } }
  }
]
"""


def main():
    root = pathlib.Path(sys.argv[1])
    torch.manual_seed(1234)
    example = (torch.randint(1, 999, (2, 8)), torch.ones(2, 8, dtype=torch.int64))
    models = {
        "tiny_scripted": torch.jit.script(TinyAttention().eval()),
        "tiny_traced": torch.jit.trace(TinyProjection().eval(), example),
        "tiny_strict": torch.jit.script(StrictProjection().eval()),
        "tiny_spin": torch.jit.script(Spin().eval()),
    }
    models["tiny_bounded"] = models["tiny_strict"]
    # A multi-device run (the two-GPU issue) spreads the encoder's instances over these devices, so
    # that the solo-answer test checks every answer with all of them busy.
    devices = os.environ.get("GRAPHSERVE_TEST_INSTANCE_DEVICES", "")
    for name, config in CONFIGS.items():
        if name == "encoder" and devices:
            listed = ", ".join(f'"{d.strip()}"' for d in devices.split(",") if d.strip())
            config = config.replace("instance_group { count: 2 }",
                                    f"instance_group {{ count: 1 devices: [ {listed} ] }}")
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.pbtxt").write_text(f'name: "{name}"\n' + config)
        if name in models:
            models[name].save(str(folder / "model.pt"))
    triton = root / "tiny_triton"
    (triton / "1").mkdir(parents=True, exist_ok=True)
    (triton / "config.pbtxt").write_text(TRITON_CONFIG)
    models["tiny_scripted"].save(str(triton / "1" / "model.pt"))
    write_encoder_package(root, CONFIGS["encoder"])
    write_reference_answers(root, models)
    print(f"model repository written to {root}")


def write_encoder_package(root, encoder_config):
    device = "cuda" if os.environ.get("GRAPHSERVE_TEST_DEVICE", "cpu").startswith("cuda") else "cpu"
    export = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "models" / "export_encoder.py"
    subprocess.run([sys.executable, str(export), str(root), "--format", "pt2", "--device", device,
                    "--max-batch", "8", "--max-length", "64"], check=True)
    config = encoder_config.replace('platform: "graphserve_encoder"', 'platform: "torch_aoti"')
    # A package runs only on the device it was compiled for: on a GPU host it is pinned there, so
    # that the suites serving the rest of this repository on the CPU still load it.
    group = "instance_group { kind: KIND_GPU count: 1 }" if device == "cuda" else "instance_group { count: 1 }"
    config = config.replace("instance_group { count: 2 }", group)
    (root / "encoder_pt2" / "config.pbtxt").write_text('name: "encoder_pt2"\n' + config)


def write_reference_answers(root, models):
    """What PyTorch itself answers for fixed token ids, unpadded, for the tests to compare against."""
    ids = torch.tensor([[5, 17, 256, 999, 3]], dtype=torch.int64)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        hidden, pooled = models["tiny_scripted"](ids, mask)
        projected = models["tiny_traced"](ids, mask)
    reference = root.parent / (root.name + "_reference")
    reference.mkdir(parents=True, exist_ok=True)
    ids.numpy().astype("<i8").tofile(reference / "ids.bin")
    for name, tensor in (("hidden", hidden), ("pooled", pooled), ("projected", projected)):
        tensor.numpy().astype("<f4").tofile(reference / f"{name}.bin")


if __name__ == "__main__":
    main()
