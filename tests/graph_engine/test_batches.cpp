#include "test_batches.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace graphserve::testing {

HostTensor Int64Tensor(const std::vector<int64_t>& shape, const std::vector<int64_t>& values) {
  HostTensor tensor;
  tensor.dtype = DataType::kInt64;
  tensor.shape = shape;
  tensor.bytes.resize(values.size() * sizeof(int64_t));
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

std::vector<float> Fp32Values(const HostTensor& tensor) {
  std::vector<float> values(tensor.bytes.size() / sizeof(float));
  std::memcpy(values.data(), tensor.bytes.data(), values.size() * sizeof(float));
  return values;
}

InferenceItem TokenItem(int64_t rows, int64_t length, uint32_t seed, int64_t vocab_size,
                        size_t output_count) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<int64_t> token(0, vocab_size - 1);
  std::vector<int64_t> ids(static_cast<size_t>(rows * length));
  for (int64_t& id : ids) id = token(random);
  InferenceItem item;
  item.rows = rows;
  item.length = length;
  item.inputs = {Int64Tensor({rows, length}, ids),
                 Int64Tensor({rows, length}, std::vector<int64_t>(ids.size(), 1))};
  item.outputs_wanted.assign(output_count, true);
  return item;
}

double RelativeDifference(const std::vector<float>& actual, const std::vector<float>& expected) {
  if (actual.size() != expected.size()) return std::numeric_limits<double>::infinity();
  double max_difference = 0.0;
  double max_magnitude = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(actual[i]) || std::isnan(expected[i]))
      return std::numeric_limits<double>::infinity();
    max_difference = std::max(max_difference, std::fabs(double(actual[i]) - double(expected[i])));
    max_magnitude = std::max(max_magnitude, std::fabs(double(expected[i])));
  }
  return max_magnitude == 0.0 ? max_difference : max_difference / max_magnitude;
}

Batch MakeBatch(const std::vector<const InferenceItem*>& items, BucketShape shape) {
  Batch batch;
  batch.items = items;
  batch.padded_shape = shape;
  return batch;
}

}  // namespace graphserve::testing
