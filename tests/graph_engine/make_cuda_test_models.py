#!/usr/bin/env python3
"""TorchScript models that CUDA graphs cannot serve, for cuda_graph_test (argv[1]: output folder).

  item_model   calls .item() in forward: a host sync, which capture refuses (capture_failed)
  counting_model  scales by a host-side call count that a capture freezes: replay != eager
                  (verify_failed)
Both take (input_ids, attention_mask) INT64 [B, L] and return (per_token [B, L, 8], pooled [B, 8]).

  small_cnn    make_test_models.py's fixed-shape CNN, which CUDA graphs do serve: one graph per
               batch size
  ragged       make_test_models.py's ragged model (Triton's ragged batching), served as graphs
               over fixed buffers: one per (rows, total tokens) bucket

Where CUDA is available (the CUDA host; CI has none and its CUDA tests skip), also
  encoder_pt2     the built-in encoder as a CUDA AOTInductor package (deploy/models/export_encoder.py,
                  batch 1..8, length 1..64)
"""
import pathlib
import subprocess
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_test_models import RaggedModel, SmallCnn  # noqa: E402  (the one definition of each)


class ItemModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(1000, 8)

    def forward(self, input_ids, attention_mask):
        x = self.embed(input_ids.clamp(0, 999)) * attention_mask[:, :, None].float()
        scale = float(x.abs().max().item()) + 1.0  # reads a device value on the host
        x = x / scale
        return x, x.sum(dim=1)


class CountingModel(torch.nn.Module):
    """Scales by how often it was called: a capture bakes in the count of its own call."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(1000, 8)
        self.calls = 0

    def forward(self, input_ids, attention_mask):
        self.calls += 1
        x = self.embed(input_ids.clamp(0, 999)) * attention_mask[:, :, None].float() * float(self.calls)
        return x, x.sum(dim=1)


def main():
    root = pathlib.Path(sys.argv[1])
    torch.manual_seed(7)
    for name, module in (("item_model", ItemModel()), ("counting_model", CountingModel()),
                         ("small_cnn", SmallCnn()), ("ragged", RaggedModel())):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        torch.jit.script(module.eval()).save(str(folder / "model.pt"))
    if torch.cuda.is_available():
        export = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "models" / "export_encoder.py"
        subprocess.run([sys.executable, str(export), str(root), "--format", "pt2", "--device", "cuda",
                        "--max-batch", "8", "--max-length", "64"], check=True)
    print(f"CUDA test models written to {root}")


if __name__ == "__main__":
    main()
