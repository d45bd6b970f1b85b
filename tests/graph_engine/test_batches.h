#pragma once
// Requests and results for the engine tests, built with the torch-free public API only (as the
// server builds them).
#include <cstdint>
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/engine/tensor.h"

namespace graphserve::testing {

HostTensor Int64Tensor(const std::vector<int64_t>& shape, const std::vector<int64_t>& values);
std::vector<float> Fp32Values(const HostTensor& tensor);

// An item for a model with inputs (input_ids, attention_mask), both INT64 [rows, length]: ids drawn
// deterministically from `seed` in [0, vocab_size), mask all ones; wants every one of
// `output_count` outputs.
InferenceItem TokenItem(int64_t rows, int64_t length, uint32_t seed, int64_t vocab_size,
                        size_t output_count);

// max |actual - expected| / max |expected|; infinity when the sizes differ or a value is NaN.
double RelativeDifference(const std::vector<float>& actual, const std::vector<float>& expected);

// A batch of `items` padded to `shape`.
Batch MakeBatch(const std::vector<const InferenceItem*>& items, BucketShape shape);

}  // namespace graphserve::testing
