#pragma once
// Padding a Batch into one tensor per input of the bucket's shape, and slicing every request's own
// rows and length back out of the outputs. Shared by the eager executor and the CUDA-graph
// executor (which fills pinned host buffers with FillPaddedInputs and slices host copies of its
// static outputs with SliceOutputs). Stateless; thread-safe. None of these functions throws: a
// libtorch failure comes back as an INTERNAL status.
//
// Layout of a padded tensor for TensorSpec `t` and bucket B×L: [B, t.dims...] with the variable
// dimension (-1) replaced by L. Item k occupies rows [offset_k, offset_k + rows_k), where offset_k
// is the sum of the rows of the items before it, and positions [0, length_k) of the variable
// dimension; every other element holds the input's pad_value.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "graphserve/engine/tensor.h"

namespace graphserve {

at::ScalarType ToScalarType(DataType dtype);

// "model 'encoder' bucket 4x16": the prefix of every message about one execution.
std::string DescribeBucket(const ModelSpec& spec, const BucketShape& shape);

// INVALID_ARGUMENT unless the batch holds together for padding: one input per spec input whose bytes
// hold its shape (in the spec's dtype) with the item's rows, one outputs_wanted flag per output, and
// a padded shape that holds every item (sum of rows <= batch, longest length <= length). Requests
// are validated against the spec once, at the server's edge (request_codec); this is not that.
Status ValidateBatch(const ModelSpec& spec, const Batch& batch);

// Validates `batch`, then writes it into `destinations`: one tensor per spec input, each of shape
// PaddedShape(input, batch.padded_shape) and the input's dtype, on any device (a pinned host
// buffer, typically). Every element is written: the items' values, pad_value elsewhere.
Status FillPaddedInputs(const ModelSpec& spec, const Batch& batch,
                        const std::vector<at::Tensor>& destinations);

// FillPaddedInputs into freshly allocated host tensors.
Status MakePaddedInputs(const ModelSpec& spec, const Batch& batch, std::vector<at::Tensor>* inputs);

// Inputs for running a bucket without requests (warm-up, graph capture): pad values everywhere
// except position 0 of the variable dimension, which holds 1 (or the input's value range's nearest
// value to 1) in every row, so that an attention mask is never all zeros. Host tensors.
Status MakeWarmupInputs(const ModelSpec& spec, const BucketShape& shape,
                        std::vector<at::Tensor>* inputs);

// Inputs a client could send, to check a captured graph against an eager run: every row gets a random
// real length in [1, L]; inputs named like a mask hold 1 there, other integer inputs random values
// in their configured range (min_value, max_value; [1, 100) without one), floating inputs random
// values in theirs ([-1, 1) without one); padded positions hold the pad value. A value outside an
// input's range could be a device-side assert (a token type id beyond a 2-entry table). Host
// tensors of the bucket's padded shapes; the same `seed` gives the same inputs. Throws on a libtorch
// failure.
std::vector<at::Tensor> MakeVerificationInputs(const ModelSpec& spec, const BucketShape& shape, uint64_t seed);

// INTERNAL (the model's fault, not a request's), naming the model, bucket and output, unless there
// is one tensor per spec output and each has rank 1 + dims.size(), batch dimension shape.batch,
// variable dimension shape.length and the spec's fixed dimensions.
Status ValidateOutputs(const ModelSpec& spec, const BucketShape& shape,
                       const std::vector<at::Tensor>& outputs);

// Validates `model_outputs` against batch.padded_shape, then resizes `outputs` to the batch's items
// and gives each item, for each output it wants, exactly its rows and (along a variable dimension)
// its length, converted to the spec's dtype (e.g. a bf16 network's outputs become FP32). Outputs
// may live on any device; each is copied to the host once. An output an item does not want is an
// empty tensor: the spec's dtype, shape [0], no bytes.
Status SliceOutputs(const ModelSpec& spec, const Batch& batch,
                    const std::vector<at::Tensor>& model_outputs, BatchOutputs* outputs);

}  // namespace graphserve
