"""config.pbtxt of an encoder that takes (input_ids, attention_mask), INT64 with one variable
dimension padded with 0, the attention mask telling real positions from padding (so graphserve
may pad lengths): what export_bert.py, export_encoder.py and export_minilm.py write."""
from typing import Sequence, Tuple

PLATFORMS = {"pt2": "torch_aoti", "torchscript": "pytorch_libtorch"}
PRECISIONS = {"fp32": "PRECISION_FP32", "fp16": "PRECISION_FP16", "bf16": "PRECISION_BF16"}


def token_model_config(name: str, platform: str, dtype: str, max_batch: int, max_length: int,
                       outputs: Sequence[Tuple[str, Sequence[int]]]) -> str:
    """`outputs`: (name, dims without the batch) pairs, FP32, -1 for the sequence dimension."""
    lines = [f'name: "{name}"', f'platform: "{platform}"', f"max_batch_size: {max_batch}",
             f"max_sequence_length: {max_length}", 'sequence_mask_input: "attention_mask"']
    lines += [f'input {{ name: "{tensor}" data_type: TYPE_INT64 dims: [ -1 ] pad_value: 0 }}'
              for tensor in ("input_ids", "attention_mask")]
    lines += [f'output {{ name: "{output}" data_type: TYPE_FP32 dims: [ {", ".join(map(str, dims))} ] }}'
              for output, dims in outputs]
    lines.append(f"precision: {PRECISIONS[dtype]}")
    return "\n".join(lines) + "\n"
