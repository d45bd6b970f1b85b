"""Writes the TorchScript models that graph_engine_torchscript_test serves.

Usage: make_test_models.py OUTPUT_DIR  (creates OUTPUT_DIR/<model>/model.pt)

Every model takes (input_ids, attention_mask), both int64 [B, L], and computes
    per_token[b, l, k] = (input_ids[b, l] * (k + 1) + k / 2) * attention_mask[b, l]   FP32 [B, L, 8]
    pooled[b, k]       = sum_l per_token[b, l, k] / max(1, sum_l attention_mask[b, l])  FP32 [B, 8]
so that the C++ test can compute the exact expected values of every request.

`ragged` follows Triton's ragged convention (the server's contract with ragged models): forward(
input_ids int64 [T], cu_seqlens int32 [R + 1]) with the rows end to end, and computes
    per_token[t, k] = (k + 1) * (sum of input_ids of t's row up to and including t)   FP32 [T, 4]
    pooled[r, k]    = mean over row r's tokens of per_token[., k], 0 for an empty row  FP32 [R, 4]
A running sum per row: a row that leaked into the next would change every later token of it.

`small_cnn` is a fixed-shape model instead: image FP32 [B, 3, 16, 16] -> (logits FP32 [B, 10],
features FP32 [B, 4, 4, 4]), a seeded ResNet-style stem whose rows are independent (batch norm in
eval mode), so that a row's outputs do not depend on the rows padded beside it.
"""
import os
import sys
from typing import Dict, List, Tuple

import torch


class TokenFeatures(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("weight", torch.arange(1, 9, dtype=torch.float32))
        self.register_buffer("bias", torch.arange(8, dtype=torch.float32) / 2)

    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        mask = attention_mask.unsqueeze(-1).to(torch.float32)
        per_token = (input_ids.unsqueeze(-1).to(torch.float32) * self.weight + self.bias) * mask
        count = attention_mask.sum(1, keepdim=True).clamp(min=1).to(torch.float32)
        return per_token, per_token.sum(1) / count


class TupleModel(TokenFeatures):
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.features(input_ids, attention_mask)


class DictModel(TokenFeatures):
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Dict[str, torch.Tensor]:
        per_token, pooled = self.features(input_ids, attention_mask)
        return {"per_token": per_token, "pooled": pooled}


class ListModel(TokenFeatures):
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> List[torch.Tensor]:
        per_token, pooled = self.features(input_ids, attention_mask)
        return [per_token, pooled]


class WrongShapeModel(TokenFeatures):
    """per_token has 7 features where the config says 8."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        per_token, pooled = self.features(input_ids, attention_mask)
        return per_token[:, :, :7], pooled


class ExtraOutputModel(TokenFeatures):
    def forward(self, input_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        per_token, pooled = self.features(input_ids, attention_mask)
        return per_token, pooled, pooled


class IntResultModel(torch.nn.Module):
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
        return input_ids.size(0)


class SmallCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.down = torch.nn.Conv2d(8, 4, 3, stride=2, padding=1)
        self.head = torch.nn.Linear(4, 10)
        # Running statistics other than the identity, so that eval-mode batch norm does something.
        self.stem[1].running_mean.uniform_(-0.5, 0.5)
        self.stem[1].running_var.uniform_(0.5, 2.0)

    def forward(self, image: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        features = self.down(self.stem(image))
        return self.head(features.mean(dim=(2, 3))), features


class RaggedModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("weight", torch.arange(1, 5, dtype=torch.float32))

    def forward(self, input_ids: torch.Tensor, cu_seqlens: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        offsets = cu_seqlens.to(torch.int64)
        rows = offsets.shape[0] - 1
        positions = torch.arange(input_ids.shape[0], device=input_ids.device)
        # The row of every token; an empty row owns none (searchsorted with right=True skips it).
        row_of = torch.searchsorted(offsets[1:], positions, right=True)
        running = torch.cumsum(input_ids.to(torch.float64), 0)
        before_row = torch.cat([running.new_zeros(1), running])[offsets[:-1]]
        within_row = (running - before_row[row_of]).to(torch.float32)
        per_token = within_row.unsqueeze(1) * self.weight
        sums = torch.zeros(rows, 4, dtype=torch.float32, device=input_ids.device).index_add_(0, row_of, per_token)
        counts = (offsets[1:] - offsets[:-1]).clamp(min=1).to(torch.float32).unsqueeze(1)
        return per_token, sums / counts


MODELS = {
    "tuple": TupleModel,
    "dict": DictModel,
    "list": ListModel,
    "wrong_shape": WrongShapeModel,
    "extra_output": ExtraOutputModel,
    "int_result": IntResultModel,
    "small_cnn": SmallCnn,
    "ragged": RaggedModel,
}


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: make_test_models.py OUTPUT_DIR")
    for name, model_class in MODELS.items():
        directory = os.path.join(sys.argv[1], name)
        os.makedirs(directory, exist_ok=True)
        torch.jit.script(model_class().eval()).save(os.path.join(directory, "model.pt"))
    print(f"wrote {len(MODELS)} models under {sys.argv[1]}")


if __name__ == "__main__":
    main()
