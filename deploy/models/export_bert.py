#!/usr/bin/env python3
"""Exports a BERT-base-sized encoder (12 layers, hidden 768, Hugging Face `BertModel` with random
weights: nothing is downloaded) as model folders graphserve serves.

  python3 deploy/models/export_bert.py REPOSITORY [--dtype bf16|fp16|fp32] [--device cuda|cpu]
      [--format pt2|torchscript|both] [--layers 12] [--ragged [--max-batch-tokens N]]

writes REPOSITORY/bert_base_<dtype>_pt2/{model.pt2,config.pbtxt} (AOTInductor, platform
"torch_aoti") and/or REPOSITORY/bert_base_<dtype>/{model.pt,config.pbtxt} (TorchScript), from the
same weights. Both happen in the target dtype on the target device, so that dtype- and
device-dependent constants baked into the export match what graphserve runs; a CUDA package only runs
on CUDA. Needs `transformers` (present on the CUDA host).

--ragged writes the same weights as ragged models instead (Triton's ragged batching, no padding:
ragged_bert.py, docs/models.md "Ragged models"): REPOSITORY/bert_base_<dtype>_ragged (TorchScript) and
bert_base_<dtype>_ragged_pt2, forward(input_ids [T], cu_seqlens [R+1]) -> (last_hidden_state [T, 768],
pooler_output [R, 768]); T up to --max-batch-tokens (default max batch x max length).
"""
import argparse
import pathlib
import sys

import torch
from transformers import BertConfig, BertModel

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from aoti_export import export_pt2  # noqa: E402
from ragged_export import write_ragged  # noqa: E402
from token_model_config import token_model_config  # noqa: E402



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
    parser.add_argument("--format", choices=["pt2", "torchscript", "both"], default="both")
    parser.add_argument("--layers", type=int, default=12, help="fewer for quick tests")
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--ragged", action="store_true", help="ragged models (packed rows, no padding)")
    parser.add_argument("--max-batch-tokens", type=int,
                        help="with --ragged: most tokens of a batch (default max batch x max length)")
    args = parser.parse_args()
    if args.max_batch_tokens is not None and not args.ragged:
        parser.error("--max-batch-tokens needs --ragged")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]

    torch.manual_seed(0)
    # bert-base: 12 layers, hidden 768, 12 heads, 512 positions
    config = BertConfig(torchscript=True, num_hidden_layers=args.layers)
    model = Encoder(BertModel(config, add_pooling_layer=True)).eval().to(args.device, dtype)
    if args.ragged:
        max_batch_tokens = args.max_batch_tokens or args.max_batch * args.max_length
        for folder, attention in write_ragged(
                model.bert, pooling="first", name=f"bert_base_{args.dtype}", repository=pathlib.Path(args.repository),
                export_format=args.format, dtype=args.dtype, device=args.device, max_rows=args.max_batch,
                max_length=args.max_length, max_batch_tokens=max_batch_tokens):
            print(f"wrote {folder} (ragged, {attention} attention, {args.dtype}, {args.device})")
        return
    # The example mask pads its second row, so that any "mask is all ones, drop it" shortcut inside
    # transformers is traced on its masked path: padding must stay masked in the saved model.
    mask = torch.ones(2, 16, dtype=torch.int64, device=args.device)
    mask[1, 9:] = 0
    example = (torch.randint(1, 1000, (2, 16), device=args.device), mask)
    repository = pathlib.Path(args.repository)
    millions = sum(p.numel() for p in model.parameters()) / 1e6
    for platform, suffix in (("torch_aoti", "_pt2"), ("pytorch_libtorch", "")):
        if args.format not in ("both", "pt2" if suffix else "torchscript"):
            continue
        name = f"bert_base_{args.dtype}{suffix}"
        folder = repository / name
        folder.mkdir(parents=True, exist_ok=True)
        if suffix:
            export_pt2(model, example, folder / "model.pt2", input_names=["input_ids", "attention_mask"],
                       output_names=["last_hidden_state", "pooler_output"],
                       max_batch=args.max_batch, max_length=args.max_length)
        else:
            with torch.no_grad():
                torch.jit.trace(model, example, check_trace=False).save(str(folder / "model.pt"))
        (folder / "config.pbtxt").write_text(token_model_config(
            name, platform, args.dtype, args.max_batch, args.max_length,
            [("last_hidden_state", [-1, 768]), ("pooler_output", [768])]))
        print(f"wrote {folder} ({millions:.1f}M parameters, {args.dtype}, {platform})")


if __name__ == "__main__":
    main()
