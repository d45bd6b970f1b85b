#pragma once
// Requests and results for the engine tests, built with the torch-free public API only (as the
// server builds them).
#include <cstdint>
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/engine/tensor.h"

namespace graphserve::testing {

HostTensor Int64Tensor(const std::vector<int64_t>& shape, const std::vector<int64_t>& values);
HostTensor Fp32Tensor(const std::vector<int64_t>& shape, const std::vector<float>& values);
std::vector<float> Fp32Values(const HostTensor& tensor);

// An item for a model with inputs (input_ids, attention_mask), both INT64 [rows, length]: ids drawn
// deterministically from `seed` in [0, vocab_size), mask all ones; wants every one of
// `output_count` outputs.
InferenceItem TokenItem(int64_t rows, int64_t length, uint32_t seed, int64_t vocab_size,
                        size_t output_count);

// An item for a fixed-shape model with one FP32 input of `image_dims` per row (an image): values
// drawn deterministically from `seed` in [-1, 1), length kFixedShapeLength; wants every one of
// `output_count` outputs.
InferenceItem ImageItem(int64_t rows, const std::vector<int64_t>& image_dims, uint32_t seed,
                        size_t output_count);

// max |actual - expected| / max |expected|; infinity when the sizes differ or a value is NaN.
double RelativeDifference(const std::vector<float>& actual, const std::vector<float>& expected);

// make_test_models.py's `small_cnn`: image FP32 [3, 16, 16] -> logits FP32 [10], features FP32
// [4, 4, 4]; a fixed-shape model on batch sizes {1, 2, 4}.
inline const std::vector<int64_t> kSmallCnnImage = {3, 16, 16};
ModelSpec SmallCnnSpec();

// make_test_models.py's `ragged` as TorchScript serves it: input_ids INT64 [-1] ragged, the batch
// input cu_seqlens (INT32, with the zero), per_token FP32 [-1, 4] scattered and pooled FP32 [4];
// rows {4, 8} × token sizes {16, 32, 64}, at most 16 tokens a row.
ModelSpec RaggedTestSpec();

// A batch of `items` padded to `shape`.
Batch MakeBatch(const std::vector<const InferenceItem*>& items, BucketShape shape);

}  // namespace graphserve::testing
