#include "token_features.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>

#include "test_batches.h"

namespace graphserve::testing {
namespace {

std::vector<int64_t> Int64Values(const HostTensor& tensor) {
  std::vector<int64_t> values(tensor.bytes.size() / sizeof(int64_t));
  std::memcpy(values.data(), tensor.bytes.data(), tensor.bytes.size());
  return values;
}

// What the token-features models compute for one item (every mask value is 1).
std::vector<float> ExpectedPerToken(const InferenceItem& item) {
  std::vector<float> expected;
  for (int64_t id : Int64Values(item.inputs[0])) {
    for (int64_t k = 0; k < kFeatures; ++k) expected.push_back(float(id * (k + 1)) + float(k) / 2);
  }
  return expected;
}

std::vector<float> ExpectedPooled(const InferenceItem& item) {
  const std::vector<float> per_token = ExpectedPerToken(item);
  std::vector<float> expected;
  for (int64_t row = 0; row < item.rows; ++row) {
    for (int64_t k = 0; k < kFeatures; ++k) {
      double sum = 0.0;
      for (int64_t pos = 0; pos < item.length; ++pos) {
        sum += per_token[static_cast<size_t>((row * item.length + pos) * kFeatures + k)];
      }
      expected.push_back(static_cast<float>(sum / double(item.length)));
    }
  }
  return expected;
}

}  // namespace

TensorSpec PerTokenSpec() { return TensorSpec{"per_token", DataType::kFp32, {-1, kFeatures}, 0.0}; }
TensorSpec PooledSpec() { return TensorSpec{"pooled", DataType::kFp32, {kFeatures}, 0.0}; }

ModelSpec TokenFeaturesSpec(const std::string& name, std::vector<TensorSpec> outputs,
                            const std::string& platform) {
  ModelSpec spec;
  spec.name = name;
  spec.platform = platform;
  spec.max_batch_size = 4;
  spec.max_sequence_length = 8;
  spec.inputs = {TensorSpec{"input_ids", DataType::kInt64, {-1}, 5.0},
                 TensorSpec{"attention_mask", DataType::kInt64, {-1}, 0.0}};
  spec.sequence_mask_input = "attention_mask";
  spec.outputs = std::move(outputs);
  spec.bucket_batch_sizes = {2, 4};
  spec.bucket_lengths = {4, 8};
  return spec;
}

Status CreateOnCpu(const ModelSpec& spec, const std::string& model_dir,
                   std::unique_ptr<Executor>* executor) {
  ExecutorOptions options;
  options.model_dir = model_dir;
  return CreateExecutor(spec, options, executor);
}

void ExpectServesEachItemItsOwnSlice(Executor& executor, size_t per_token_index,
                                     size_t pooled_index) {
  const std::vector<InferenceItem> items = {
      TokenItem(1, 3, 11, 1024, 2), TokenItem(2, 8, 12, 1024, 2), TokenItem(1, 5, 13, 1024, 2)};
  BatchOutputs outputs;
  const Status status =
      executor.Execute(MakeBatch({&items[0], &items[1], &items[2]}, BucketShape{4, 8}), &outputs);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(outputs.size(), items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    SCOPED_TRACE("item " + std::to_string(k));
    ASSERT_EQ(outputs[k].size(), 2u);
    const HostTensor& per_token = outputs[k][per_token_index];
    const HostTensor& pooled = outputs[k][pooled_index];
    EXPECT_EQ(per_token.shape, (std::vector<int64_t>{items[k].rows, items[k].length, kFeatures}));
    EXPECT_EQ(pooled.shape, (std::vector<int64_t>{items[k].rows, kFeatures}));
    EXPECT_EQ(Fp32Values(per_token), ExpectedPerToken(items[k]));
    EXPECT_LT(RelativeDifference(Fp32Values(pooled), ExpectedPooled(items[k])), 1e-6);
  }
}

}  // namespace graphserve::testing
