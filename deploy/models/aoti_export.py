"""Writes a model as an AOTInductor package (`model.pt2`) that graphserve serves.

    from aoti_export import export_pt2
    export_pt2(module, example_inputs, "repo/my_model/model.pt2",
               input_names=["input_ids", "attention_mask"],
               output_names=["last_hidden_state", "pooler_output"],
               max_batch=32, max_length=512)

The module is exported with `torch.export` (batch, and the sequence length where an input has one,
as dynamic dimensions) and compiled with `torch._inductor.aoti_compile_and_package` for the device
the module and the examples are on: a CUDA package only runs on CUDA, a CPU package only on CPU.

Beside the compiled code the package carries a signature in its metadata (`graphserve.signature`,
JSON): every input's name, dtype and per-dimension [min, max] as exported, the output names in the
order the package returns them, the dtype of the floating-point weights, and a ragged model's row
bound where it has one. graphserve checks the model's config.pbtxt against it at load time, so that
a config asking for longer sequences than the package was exported for, or for another dtype, fails
then, naming both, and not at the first request.

Sizes 0 and 1 are specialised by torch.export: the examples must have batch and length >= 2 (the
export still covers 1 through `min`). Outputs: a tensor, a tuple or list of tensors (named by
`output_names` in order), or a dict of tensors (named by its keys).

export_ragged_pt2 exports a ragged model (Triton's ragged batching: forward(tokens [T], cu_seqlens
[R+1]), docs/models.md "Ragged models") with T and R dynamic instead.
"""
import json
from typing import Dict, List, Optional, Sequence

import torch
from torch.fx.experimental import _config as symbolic_shapes_config

SIGNATURE_KEY = "graphserve.signature"
SIGNATURE_VERSION = 1
# A ragged model's row bound (graph_engine/src/row_bound.h); also the one entry of the signature a
# ragged TorchScript export saves beside its module (an extra file of that name).
MAX_ROW_LENGTH_KEY = "max_row_length"
# The most rows graphserve's default grid puts in one batch of short requests (kDefaultLargestBatch,
# model_spec.h): a formed batch may hold more rows than a request's max_batch_size.
DEFAULT_LARGEST_BATCH = 512

_DTYPE_NAMES = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float64: "fp64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
}


def _weights_dtype(module: torch.nn.Module) -> str:
    floating = {t.dtype for t in list(module.parameters()) + list(module.buffers()) if t.is_floating_point()}
    if len(floating) > 1:
        raise ValueError(f"the module mixes floating-point weight dtypes {sorted(map(str, floating))}")
    return _DTYPE_NAMES[floating.pop()] if floating else "fp32"


def _dim_range(size, range_constraints) -> List[int]:
    """[min, max] of one exported dimension; max -1 when the export left it unbounded."""
    if isinstance(size, int):
        return [size, size]
    expr = size.node.expr
    if expr.is_number:
        return [int(expr), int(expr)]
    bounds = range_constraints[expr]
    upper = bounds.upper
    return [int(bounds.lower), int(upper) if upper.is_finite else -1]


def _signature(program: torch.export.ExportedProgram, input_names: Sequence[str],
               output_names: Sequence[str], weights_dtype: str) -> Dict:
    placeholders = [node for node in program.graph.nodes if node.op == "placeholder"]
    user_inputs = [spec.arg.name for spec in program.graph_signature.input_specs
                   if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT]
    by_name = {node.name: node for node in placeholders}
    if len(user_inputs) != len(input_names):
        raise ValueError(f"the module takes {len(user_inputs)} inputs, input_names has {len(input_names)}")
    inputs = []
    for name, placeholder in zip(input_names, user_inputs):
        fake = by_name[placeholder].meta["val"]
        inputs.append({
            "name": name,
            "dtype": _DTYPE_NAMES[fake.dtype],
            "dims": [_dim_range(size, program.range_constraints) for size in fake.shape],
        })
    return {"version": SIGNATURE_VERSION, "inputs": inputs, "outputs": list(output_names),
            "weights_dtype": weights_dtype}


def export_pt2(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor], path: str, *,
               input_names: Sequence[str], output_names: Optional[Sequence[str]] = None,
               max_batch: int, max_length: Optional[int] = None,
               variable_dims: Optional[Dict[str, int]] = None,
               max_formed_batch: Optional[int] = None) -> str:
    """Exports `module` to `path` and returns it.

    Dimension 0 of every input is the batch, dynamic in [1, max_formed_batch]: the most rows of a
    batch graphserve forms (its grid's largest batch size). By default max_batch for a fixed-shape
    model and, for a length-varying one, at least DEFAULT_LARGEST_BATCH, since graphserve's default
    grid batches short requests beyond the max_batch_size a request may carry (config
    buckets.max_batch_tokens). `variable_dims` maps an
    input name to its variable (sequence) dimension, dynamic in [1, max_length]; by default every
    input of rank >= 2 varies along dimension 1 when max_length is given, and none otherwise (a
    fixed-shape model). Output names come from the module's dict keys when it returns a dict.
    """
    if variable_dims is None:
        variable_dims = ({name: 1 for name, example in zip(input_names, example_inputs) if example.dim() >= 2}
                         if max_length is not None else {})
    for name, example in zip(input_names, example_inputs):
        if example.shape[0] < 2 or (name in variable_dims and example.shape[variable_dims[name]] < 2):
            raise ValueError(f"example '{name}' has a size below 2 in a dynamic dimension; "
                             "torch.export would specialise it")
    if max_formed_batch is None:
        max_formed_batch = max(max_batch, DEFAULT_LARGEST_BATCH) if variable_dims else max_batch
    batch = torch.export.Dim("batch", min=1, max=max_formed_batch)
    length = torch.export.Dim("length", min=1, max=max_length) if variable_dims else None
    dynamic_shapes = tuple(
        {0: batch, **({variable_dims[name]: length} if name in variable_dims else {})}
        for name in input_names)
    return _export_and_package(module, example_inputs, path, dynamic_shapes, input_names, output_names)


def export_ragged_pt2(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor], path: str, *,
                      input_names: Sequence[str], output_names: Sequence[str], max_tokens: int,
                      max_rows: int, max_row_length: Optional[int] = None) -> str:
    """Exports a ragged model (Triton's ragged batching) to `path` and returns it.

    Its inputs are a packed token tensor [T] and the row offsets [R+1] (cu_seqlens, as
    BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO makes them), in that order: T is dynamic in
    [1, max_tokens], R in [1, max_rows] (T = 1 and R = 1 included: sizes 0 and 1 are not
    specialised). The examples need T >= 2 and R >= 2 all the same. `max_row_length`: the longest
    row the module attends whole (ragged_bert.RaggedBert's), recorded in the signature so that
    graphserve refuses a config whose max_sequence_length exceeds it.
    """
    program = export_ragged_program(module, example_inputs, max_tokens=max_tokens, max_rows=max_rows)
    with symbolic_shapes_config.patch(backed_size_oblivious=True):
        return _package(program, module, example_inputs, path, input_names, output_names,
                        row_bound_signature(max_row_length))


def row_bound_signature(max_row_length: Optional[int]) -> Dict:
    """The signature's entry for a ragged model's row bound: none when it attends rows of any length."""
    return {} if max_row_length is None else {MAX_ROW_LENGTH_KEY: int(max_row_length)}


def export_ragged_program(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor], *, max_tokens: int,
                          max_rows: int) -> torch.export.ExportedProgram:
    """The torch.export step of export_ragged_pt2, without compiling: raises where a size cannot stay
    dynamic over the whole range."""
    tokens_example, offsets_example = example_inputs
    if tokens_example.shape[0] < 2 or offsets_example.shape[0] < 3:
        raise ValueError("the examples need at least 2 tokens and 2 rows; torch.export would specialise them")
    tokens = torch.export.Dim("tokens", min=1, max=max_tokens)
    # R + 1 offsets; a Dim of its own rather than rows + 1, which the signature could not name.
    offsets = torch.export.Dim("offsets", min=2, max=max_rows + 1)
    # Broadcasting [R, 1] against [1, T] would otherwise make torch.export assume R != 1 and refuse
    # the range: sizes 1 are to be treated like any other size here.
    with symbolic_shapes_config.patch(backed_size_oblivious=True):
        return _export(module, example_inputs, ({0: tokens}, {0: offsets}))


def _export(module, example_inputs, dynamic_shapes) -> torch.export.ExportedProgram:
    with torch.no_grad():
        return torch.export.export(module.eval(), tuple(example_inputs), dynamic_shapes=dynamic_shapes)


def _export_and_package(module, example_inputs, path, dynamic_shapes, input_names, output_names) -> str:
    return _package(_export(module, example_inputs, dynamic_shapes), module, example_inputs, path, input_names,
                    output_names)


def _package(program, module, example_inputs, path, input_names, output_names, extra_signature=None) -> str:
    with torch.no_grad():
        result = module.eval()(*example_inputs)
    if isinstance(result, dict):
        returned_names = list(result.keys())
        if output_names is not None and set(output_names) != set(returned_names):
            raise ValueError(f"the module returns {returned_names}, output_names says {list(output_names)}")
        output_names = returned_names
    elif output_names is None:
        raise ValueError("output_names is needed when the module does not return a dict")
    signature = {**_signature(program, input_names, output_names, _weights_dtype(module)), **(extra_signature or {})}
    return torch._inductor.aoti_compile_and_package(
        program, package_path=str(path),
        inductor_configs={"aot_inductor.metadata": {SIGNATURE_KEY: json.dumps(signature)}})
