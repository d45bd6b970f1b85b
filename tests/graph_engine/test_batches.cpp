#include "test_batches.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace graphserve::testing {

namespace {

template <typename Value>
HostTensor TensorOf(DataType dtype, const std::vector<int64_t>& shape,
                    const std::vector<Value>& values) {
  HostTensor tensor;
  tensor.dtype = dtype;
  tensor.shape = shape;
  tensor.bytes.resize(values.size() * sizeof(Value));
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

}  // namespace

HostTensor Int64Tensor(const std::vector<int64_t>& shape, const std::vector<int64_t>& values) {
  return TensorOf(DataType::kInt64, shape, values);
}

HostTensor Fp32Tensor(const std::vector<int64_t>& shape, const std::vector<float>& values) {
  return TensorOf(DataType::kFp32, shape, values);
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

ModelSpec SmallCnnSpec() {
  ModelSpec spec;
  spec.name = "small_cnn";
  spec.platform = kPlatformTorchScript;
  spec.max_batch_size = 4;
  spec.max_sequence_length = kFixedShapeLength;
  spec.inputs = {TensorSpec{"image", DataType::kFp32, kSmallCnnImage, 0.0}};
  spec.outputs = {TensorSpec{"logits", DataType::kFp32, {10}, 0.0},
                  TensorSpec{"features", DataType::kFp32, {4, 4, 4}, 0.0}};
  spec.bucket_batch_sizes = {1, 2, 4};
  spec.bucket_lengths = {kFixedShapeLength};
  return spec;
}

InferenceItem ImageItem(int64_t rows, const std::vector<int64_t>& image_dims, uint32_t seed,
                        size_t output_count) {
  std::vector<int64_t> shape = {rows};
  shape.insert(shape.end(), image_dims.begin(), image_dims.end());
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> value(-1.f, 1.f);
  std::vector<float> values(static_cast<size_t>(ElementCount(shape)));
  for (float& v : values) v = value(random);
  InferenceItem item;
  item.rows = rows;
  item.length = kFixedShapeLength;
  item.inputs = {Fp32Tensor(shape, values)};
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

ModelSpec RaggedTestSpec() {
  ModelSpec spec;
  spec.name = "ragged";
  spec.platform = kPlatformTorchScript;
  spec.ragged = true;
  spec.max_batch_size = 7;  // 8 rows in the largest bucket: 7 real and the spare for the tail
  spec.max_sequence_length = 16;
  spec.inputs = {RaggedTokenInput("input_ids", DataType::kInt64)};
  spec.batch_inputs = {
      BatchInputOf("cu_seqlens", BatchInputKind::kAccumulatedElementCountWithZero, DataType::kInt32)};
  TensorSpec per_token{"per_token", DataType::kFp32, {-1, 4}};
  per_token.ragged = true;
  spec.outputs = {per_token, TensorSpec{"pooled", DataType::kFp32, {4}}};
  spec.bucket_batch_sizes = {4, 8};
  spec.bucket_lengths = {16, 32, 64};
  spec.max_batch_tokens = 64;
  return spec;
}

Batch MakeBatch(const std::vector<const InferenceItem*>& items, BucketShape shape) {
  Batch batch;
  batch.items = items;
  batch.padded_shape = shape;
  return batch;
}

}  // namespace graphserve::testing
