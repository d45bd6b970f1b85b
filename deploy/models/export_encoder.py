#!/usr/bin/env python3
"""Exports the architecture of graphserve's built-in encoder (4 layers, hidden 256, 4 heads, vocab
1024, 512 positions) as model folders graphserve serves:

  python3 deploy/models/export_encoder.py REPOSITORY [--format pt2|torchscript|both]
      [--dtype fp32|bf16|fp16] [--device cpu|cuda] [--max-batch 32] [--max-length 512]

writes REPOSITORY/encoder_pt2/{model.pt2,config.pbtxt} (AOTInductor, platform "torch_aoti") and/or
REPOSITORY/encoder_ts/{model.pt,config.pbtxt} (TorchScript). The weights are drawn exactly as the
built-in encoder draws them (graph_engine/src/builtin_encoder.cpp: one CPU generator seeded with
20240611, modules in registration order), so an exported model answers like the built-in `encoder`:
the tests use that to check the export path against a model whose answers are known.
"""
import argparse
import math
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from aoti_export import export_pt2  # noqa: E402
from token_model_config import token_model_config  # noqa: E402

VOCAB, LAYERS, HIDDEN, HEADS, FFN, POSITIONS = 1024, 4, 256, 4, 1024, 512
WEIGHT_SEED, INIT_STD, MASKED_SCORE = 20240611, 0.02, -1e4



def layer_norm():
    return torch.nn.LayerNorm(HIDDEN, eps=1e-12)  # BERT's epsilon, as the built-in encoder


class EncoderLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        # Registration order matters: it is the order the weights are drawn in.
        self.qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN)
        self.attention_output = torch.nn.Linear(HIDDEN, HIDDEN)
        self.attention_norm = layer_norm()
        self.ffn_input = torch.nn.Linear(HIDDEN, FFN)
        self.ffn_output = torch.nn.Linear(FFN, HIDDEN)
        self.ffn_norm = layer_norm()

    def forward(self, hidden, additive_mask):
        batch, length = hidden.shape[0], hidden.shape[1]
        qkv = self.qkv(hidden).view(batch, length, 3, HEADS, HIDDEN // HEADS).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(qkv[0], qkv[1].transpose(-2, -1)) * (1.0 / math.sqrt(HIDDEN // HEADS))
        context = torch.matmul(torch.softmax(scores + additive_mask, -1), qkv[2])
        context = context.transpose(1, 2).reshape(batch, length, HIDDEN)
        attended = self.attention_norm(hidden + self.attention_output(context))
        return self.ffn_norm(attended + self.ffn_output(torch.nn.functional.gelu(self.ffn_input(attended))))


class Encoder(torch.nn.Module):
    """(input_ids, attention_mask) INT64 [B, L] -> {last_hidden_state [B, L, 256], pooler_output [B, 256]}."""

    def __init__(self):
        super().__init__()
        self.token_embeddings = torch.nn.Embedding(VOCAB, HIDDEN)
        self.position_embeddings = torch.nn.Embedding(POSITIONS, HIDDEN)
        self.embedding_norm = layer_norm()
        self.layers = torch.nn.ModuleList(EncoderLayer() for _ in range(LAYERS))
        self.pooler = torch.nn.Linear(HIDDEN, HIDDEN)
        generator = torch.Generator().manual_seed(WEIGHT_SEED)
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, torch.nn.Linear):
                    module.weight.normal_(0.0, INIT_STD, generator=generator)
                    module.bias.zero_()
                elif isinstance(module, torch.nn.Embedding):
                    module.weight.normal_(0.0, INIT_STD, generator=generator)
                elif isinstance(module, torch.nn.LayerNorm):
                    module.weight.fill_(1.0)
                    module.bias.zero_()

    def forward(self, input_ids, attention_mask):
        length = input_ids.shape[1]
        # Out-of-range ids are clamped, as the built-in encoder does, so that one bad id cannot
        # trip a device-side assert.
        tokens = self.token_embeddings(input_ids.clamp(0, VOCAB - 1))
        hidden = self.embedding_norm(tokens + self.position_embeddings.weight[:length])
        dtype = self.token_embeddings.weight.dtype
        additive_mask = ((attention_mask == 0).to(dtype) * MASKED_SCORE)[:, None, None, :]
        for layer in self.layers:
            hidden = layer(hidden, additive_mask)
        return {"last_hidden_state": hidden, "pooler_output": torch.tanh(self.pooler(hidden[:, 0]))}


def write_config(folder, platform, args):
    folder.joinpath("config.pbtxt").write_text(token_model_config(
        folder.name, platform, args.dtype, args.max_batch, args.max_length,
        [("last_hidden_state", [-1, HIDDEN]), ("pooler_output", [HIDDEN])]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repository")
    parser.add_argument("--format", choices=["pt2", "torchscript", "both"], default="both")
    parser.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=POSITIONS)
    args = parser.parse_args()
    if not 2 <= args.max_length <= POSITIONS:
        parser.error(f"--max-length must be within 2..{POSITIONS}")
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]

    model = Encoder().eval().to(args.device, dtype)
    # The second row is masked from position 9 on, so that the masked path is what gets traced.
    mask = torch.ones(2, 16, dtype=torch.int64, device=args.device)
    mask[1, 9:] = 0
    example = (torch.randint(1, VOCAB, (2, 16), device=args.device), mask)
    repository = pathlib.Path(args.repository)
    if args.format in ("pt2", "both"):
        folder = repository / "encoder_pt2"
        folder.mkdir(parents=True, exist_ok=True)
        export_pt2(model, example, folder / "model.pt2", input_names=["input_ids", "attention_mask"],
                   max_batch=args.max_batch, max_length=args.max_length)
        write_config(folder, "torch_aoti", args)
        print(f"wrote {folder} (AOTInductor, {args.dtype}, {args.device})")
    if args.format in ("torchscript", "both"):
        folder = repository / "encoder_ts"
        folder.mkdir(parents=True, exist_ok=True)

        class TupleOutputs(torch.nn.Module):  # TorchScript tracing wants tensors or tuples out
            def __init__(self, encoder):
                super().__init__()
                self.encoder = encoder

            def forward(self, input_ids, attention_mask):
                outputs = self.encoder(input_ids, attention_mask)
                return outputs["last_hidden_state"], outputs["pooler_output"]

        with torch.no_grad():
            traced = torch.jit.trace(TupleOutputs(model), example, check_trace=False)
        traced.save(str(folder / "model.pt"))
        write_config(folder, "pytorch_libtorch", args)
        print(f"wrote {folder} (TorchScript, {args.dtype}, {args.device})")


if __name__ == "__main__":
    main()
