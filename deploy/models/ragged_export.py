"""Writes the ragged model folders of a transformers BertModel (ragged_bert.RaggedBert) that
export_bert.py and export_minilm.py --ragged write: REPOSITORY/<name>_ragged/{model.pt,config.pbtxt}
(TorchScript, torch.jit.trace) and/or REPOSITORY/<name>_ragged_pt2/{model.pt2,config.pbtxt}
(AOTInductor). Attention is varlen (FlashAttention) on CUDA in fp16/bf16, else the masked path
(ragged_bert.default_attention).
"""
import json
import pathlib
from typing import Iterator, Tuple

import torch

from aoti_export import SIGNATURE_KEY, SIGNATURE_VERSION, export_ragged_pt2, row_bound_signature
from ragged_bert import RaggedBert, default_attention, example_inputs
from token_model_config import ragged_token_model_config

FORMATS = {"torchscript": [""], "pt2": ["_pt2"], "both": ["", "_pt2"]}
OUTPUT_NAMES = {"first": "pooler_output", "mean": "sentence_embedding"}


def write_ragged(bert, *, pooling: str, name: str, repository: pathlib.Path, export_format: str,
                 dtype: str, device: str, max_rows: int, max_length: int,
                 max_batch_tokens: int) -> Iterator[Tuple[pathlib.Path, str]]:
    """Writes `name`_ragged[_pt2] for `bert` (already in its dtype, on `device`, in eval mode); yields
    each folder and its attention as it is written. Raises ValueError on sizes the export cannot
    cover."""
    if not 1 <= max_length <= max_batch_tokens:
        raise ValueError(f"max_batch_tokens {max_batch_tokens} must hold one row of max_length {max_length}")
    weights_dtype = next(bert.parameters()).dtype
    attention = default_attention(device, weights_dtype)
    hidden = bert.config.hidden_size
    pooled = OUTPUT_NAMES[pooling]
    example = example_inputs(device, bert.config.vocab_size)
    for suffix in FORMATS[export_format]:
        folder = repository / f"{name}_ragged{suffix}"
        folder.mkdir(parents=True, exist_ok=True)
        if suffix:
            model = RaggedBert(bert, pooling, attention, max_tokens=max_batch_tokens, max_row_length=max_length).eval()
            # The server's largest bucket has max_batch_size rows and a spare one for the tail's filler.
            export_ragged_pt2(model, example, folder / "model.pt2", input_names=["input_ids", "cu_seqlens"],
                              output_names=["last_hidden_state", pooled], max_tokens=max_batch_tokens,
                              max_rows=max_rows + 1, max_row_length=max_length)
            platform = "torch_aoti"
        else:
            model = RaggedBert(bert, pooling, attention, max_tokens=max_batch_tokens, max_row_length=max_length).eval()
            # The row bound beside the module, where graphserve reads it (torchscript_model.cpp).
            signature = {"version": SIGNATURE_VERSION, **row_bound_signature(max_length)}
            with torch.no_grad():
                torch.jit.trace(model, example, check_trace=False).save(
                    str(folder / "model.pt"), _extra_files={SIGNATURE_KEY: json.dumps(signature)})
            platform = "pytorch_libtorch"
        (folder / "config.pbtxt").write_text(ragged_token_model_config(
            folder.name, platform, dtype, max_rows, max_length, max_batch_tokens, (pooled, hidden)))
        yield folder, attention
