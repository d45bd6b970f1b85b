#!/usr/bin/env python3
"""Exports a BERT-base-sized encoder (12 layers, hidden 768, Hugging Face `BertModel` with random
weights: nothing is downloaded) as a TorchScript model folder graphserve serves.

  python3 deploy/models/export_bert.py REPOSITORY [--dtype bf16|fp16|fp32] [--device cuda|cpu]

writes REPOSITORY/bert_base_<dtype>/{model.pt,config.pbtxt}. Tracing happens in the target dtype on
the target device, so that dtype- and device-dependent constants baked into the trace match what
graphserve runs. Needs `transformers` (present on the CUDA host).
"""
import argparse
import pathlib

import torch
from transformers import BertConfig, BertModel

CONFIG = """name: "{name}"
platform: "pytorch_libtorch"
max_batch_size: 32
max_sequence_length: 512
input {{ name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }}
input {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }}
output {{ name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, 768 ] }}
output {{ name: "pooler_output" data_type: TYPE_FP32 dims: [ 768 ] }}
precision: {precision}
"""


class Encoder(torch.nn.Module):
    """BertModel with positional (input_ids, attention_mask) in, a tuple out: what graphserve calls."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)
        return out[0], out[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("repository")
    parser.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    precision = {"bf16": "PRECISION_BF16", "fp16": "PRECISION_FP16", "fp32": "PRECISION_FP32"}[args.dtype]

    torch.manual_seed(0)
    config = BertConfig(torchscript=True)  # bert-base: 12 layers, hidden 768, 12 heads, 512 positions
    model = Encoder(BertModel(config, add_pooling_layer=True)).eval().to(args.device, dtype)
    # The example mask pads its second row, so that any "mask is all ones, drop it" shortcut inside
    # transformers is traced on its masked path: padding must stay masked in the saved model.
    mask = torch.ones(2, 16, dtype=torch.int64, device=args.device)
    mask[1, 9:] = 0
    example = (torch.randint(1, 1000, (2, 16), device=args.device), mask)
    with torch.no_grad():
        traced = torch.jit.trace(model, example, check_trace=False)
    name = f"bert_base_{args.dtype}"
    folder = pathlib.Path(args.repository) / name
    folder.mkdir(parents=True, exist_ok=True)
    traced.save(str(folder / "model.pt"))
    (folder / "config.pbtxt").write_text(CONFIG.format(name=name, precision=precision))
    print(f"wrote {folder} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {args.dtype})")


if __name__ == "__main__":
    main()
