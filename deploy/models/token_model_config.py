"""config.pbtxt of the encoders deploy/models/ writes: token_model_config for (input_ids,
attention_mask), INT64 with one variable dimension padded with 0, the attention mask telling real
positions from padding (so graphserve may pad lengths), as export_bert.py, export_encoder.py and
export_minilm.py write; ragged_token_model_config for their --ragged exports (no padding at all)."""
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


def ragged_token_model_config(name: str, platform: str, dtype: str, max_rows: int, max_length: int,
                              max_batch_tokens: int, pooled: Tuple[str, int]) -> str:
    """config.pbtxt of a ragged encoder (deploy/models/ragged_bert.py): `input_ids` concatenated across
    the batch, the row offsets `cu_seqlens` made by the server, `last_hidden_state` [tokens, H]
    scattered back per request, `pooled` = (name, H): one FP32 row of H per request row. `max_rows`
    rows per batch, `max_length` tokens per row, `max_batch_tokens` tokens per batch (the export's
    bound on T)."""
    output_name, hidden = pooled
    lines = [f'name: "{name}"', f'platform: "{platform}"', f"max_batch_size: {max_rows}",
             f"max_sequence_length: {max_length}",
             'input { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] allow_ragged_batch: true }',
             'batch_input { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "cu_seqlens" '
             'data_type: TYPE_INT32 source_input: "input_ids" }',
             f'output {{ name: "last_hidden_state" data_type: TYPE_FP32 dims: [ -1, {hidden} ] }}',
             'batch_output { target_name: "last_hidden_state" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
             'source_input: "input_ids" }',
             f'output {{ name: "{output_name}" data_type: TYPE_FP32 dims: [ {hidden} ] }}',
             f'parameters {{ key: "max_batch_tokens" value: {{ string_value: "{max_batch_tokens}" }} }}',
             f"precision: {PRECISIONS[dtype]}"]
    return "\n".join(lines) + "\n"
