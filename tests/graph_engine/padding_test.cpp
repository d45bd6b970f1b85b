// The padding and slicing helpers that both the eager and the CUDA-graph executor build on.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstring>
#include <vector>

#include "padding.h"
#include "test_batches.h"

namespace graphserve {
namespace {

using testing::Fp32Tensor;
using testing::Fp32Values;
using testing::Int64Tensor;
using testing::MakeBatch;

// Inputs: ids INT64 [-1] padded with 7, scale FP32 [2] (no variable dim) padded with -1.
// Outputs: per_token FP32 [3, -1] (variable dim not first), pooled FP32 [3].
ModelSpec PaddingSpec() {
  ModelSpec spec;
  spec.name = "padding_model";
  spec.max_batch_size = 4;
  spec.max_sequence_length = 6;
  TensorSpec ids{"ids", DataType::kInt64, {-1}, 7.0};
  TensorSpec scale{"scale", DataType::kFp32, {2}, -1.0};
  spec.inputs = {ids, scale};
  spec.outputs = {TensorSpec{"per_token", DataType::kFp32, {3, -1}, 0.0},
                  TensorSpec{"pooled", DataType::kFp32, {3}, 0.0}};
  return spec;
}

// Item A: 1 row of length 3; item B: 2 rows of length 5.
struct TwoItems {
  InferenceItem a;
  InferenceItem b;
  TwoItems() {
    a.rows = 1;
    a.length = 3;
    a.inputs = {Int64Tensor({1, 3}, {10, 11, 12}), Fp32Tensor({1, 2}, {0.5f, 1.5f})};
    a.outputs_wanted = {true, true};
    b.rows = 2;
    b.length = 5;
    b.inputs = {Int64Tensor({2, 5}, {20, 21, 22, 23, 24, 30, 31, 32, 33, 34}),
                Fp32Tensor({2, 2}, {2.f, 3.f, 4.f, 5.f})};
    b.outputs_wanted = {true, false};
  }
};

std::vector<int64_t> Int64Contents(const at::Tensor& tensor) {
  at::Tensor flat = tensor.contiguous().view({-1});
  return std::vector<int64_t>(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel());
}

std::vector<float> FloatContents(const at::Tensor& tensor) {
  at::Tensor flat = tensor.to(at::kFloat).contiguous().view({-1});
  return std::vector<float>(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
}

const std::vector<int64_t> kExpectedIds = {10, 11, 12, 7,  7,  7,  //
                                           20, 21, 22, 23, 24, 7,  //
                                           30, 31, 32, 33, 34, 7,  //
                                           7,  7,  7,  7,  7,  7};
const std::vector<float> kExpectedScale = {0.5f, 1.5f, 2.f, 3.f, 4.f, 5.f, -1.f, -1.f};

TEST(PaddingTest, FillWritesEveryElementOfCallerBuffers) {
  const ModelSpec spec = PaddingSpec();
  TwoItems items;
  const Batch batch = MakeBatch({&items.a, &items.b}, BucketShape{4, 6});
  // Stale contents from a previous batch must not survive.
  std::vector<at::Tensor> destinations = {at::full({4, 6}, 99, at::kLong),
                                          at::full({4, 2}, 99.f, at::kFloat)};
  ASSERT_TRUE(FillPaddedInputs(spec, batch, destinations).ok());
  EXPECT_EQ(Int64Contents(destinations[0]), kExpectedIds);
  EXPECT_EQ(FloatContents(destinations[1]), kExpectedScale);
}

TEST(PaddingTest, MakeAllocatesTheBucketShape) {
  const ModelSpec spec = PaddingSpec();
  TwoItems items;
  std::vector<at::Tensor> inputs;
  ASSERT_TRUE(MakePaddedInputs(spec, MakeBatch({&items.a, &items.b}, {4, 6}), &inputs).ok());
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_EQ(inputs[0].sizes(), at::IntArrayRef({4, 6}));
  EXPECT_EQ(inputs[0].scalar_type(), at::kLong);
  EXPECT_EQ(inputs[1].sizes(), at::IntArrayRef({4, 2}));
  EXPECT_EQ(inputs[1].scalar_type(), at::kFloat);
  EXPECT_EQ(Int64Contents(inputs[0]), kExpectedIds);
  EXPECT_EQ(FloatContents(inputs[1]), kExpectedScale);
}

TEST(PaddingTest, FillRejectsDestinationOfWrongShape) {
  const ModelSpec spec = PaddingSpec();
  TwoItems items;
  std::vector<at::Tensor> destinations = {at::zeros({4, 5}, at::kLong), at::zeros({4, 2})};
  const Status status =
      FillPaddedInputs(spec, MakeBatch({&items.a, &items.b}, {4, 6}), destinations);
  EXPECT_EQ(status.code(), StatusCode::kInternal);
  EXPECT_NE(status.message().find("'ids'"), std::string::npos) << status.ToString();
}

TEST(PaddingTest, WarmupInputsHaveOneRealPositionPerRow) {
  std::vector<at::Tensor> inputs;
  ASSERT_TRUE(MakeWarmupInputs(PaddingSpec(), BucketShape{2, 4}, &inputs).ok());
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_EQ(Int64Contents(inputs[0]), (std::vector<int64_t>{1, 7, 7, 7, 1, 7, 7, 7}));
  EXPECT_EQ(FloatContents(inputs[1]), (std::vector<float>{-1.f, -1.f, -1.f, -1.f}));
}

// BERT's three inputs, two of them bounded: the verification of a captured graph must stay within
// them (random ids in [1, 100) once fed a token type table of 2 entries: a device-side assert), and
// a floating-point mask gets 1, not random values.
TEST(PaddingTest, VerificationAndWarmupInputsStayWithinTheConfiguredRanges) {
  ModelSpec spec = PaddingSpec();
  spec.inputs = {TensorSpec{"input_ids", DataType::kInt64, {-1}, 0.0},
                 TensorSpec{"token_type_ids", DataType::kInt64, {-1}, 0.0},
                 TensorSpec{"attention_mask", DataType::kFp32, {-1}, 0.0},
                 TensorSpec{"scale", DataType::kFp32, {-1}, 0.5}};
  spec.input_ranges = {ValueRange{0.0, 30521.0}, ValueRange{0.0, 1.0}, ValueRange{}, ValueRange{0.25, 0.75}};
  const BucketShape shape{8, 64};
  const std::vector<at::Tensor> inputs = MakeVerificationInputs(spec, shape, 7);
  ASSERT_EQ(inputs.size(), 4u);
  EXPECT_GE(inputs[0].min().item<int64_t>(), 0);
  EXPECT_LE(inputs[0].max().item<int64_t>(), 30521);
  EXPECT_GT(inputs[0].max().item<int64_t>(), 1000);  // spread over the range, not [1, 100)
  EXPECT_GE(inputs[1].min().item<int64_t>(), 0);
  EXPECT_LE(inputs[1].max().item<int64_t>(), 1);
  const at::Tensor mask_values = std::get<0>(at::_unique(inputs[2]));
  EXPECT_TRUE(at::equal(mask_values, at::tensor({0.f, 1.f}))) << mask_values;
  EXPECT_GE(inputs[3].min().item<float>(), 0.25f);
  EXPECT_LE(inputs[3].max().item<float>(), 0.75f);
  // The same seed, the same inputs.
  EXPECT_TRUE(at::equal(MakeVerificationInputs(spec, shape, 7)[0], inputs[0]));

  spec.input_ranges[1] = ValueRange{2.0, 3.0};  // 1 is outside: the nearest value in range
  std::vector<at::Tensor> warmup;
  ASSERT_TRUE(MakeWarmupInputs(spec, BucketShape{1, 3}, &warmup).ok());
  EXPECT_EQ(Int64Contents(warmup[1]), (std::vector<int64_t>{2, 0, 0}));
  EXPECT_EQ(Int64Contents(warmup[0]), (std::vector<int64_t>{1, 0, 0}));
}

TEST(PaddingTest, ValidateBatchRejectsWhatDoesNotFit) {
  const ModelSpec spec = PaddingSpec();
  TwoItems items;
  EXPECT_TRUE(ValidateBatch(spec, MakeBatch({&items.a, &items.b}, {3, 5})).ok());

  const Status too_few_rows = ValidateBatch(spec, MakeBatch({&items.a, &items.b}, {2, 6}));
  EXPECT_EQ(too_few_rows.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_few_rows.message().find("model 'padding_model' bucket 2x6"), std::string::npos)
      << too_few_rows.ToString();
  EXPECT_EQ(ValidateBatch(spec, MakeBatch({&items.a, &items.b}, {4, 4})).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateBatch(spec, MakeBatch({}, {4, 6})).code(), StatusCode::kInvalidArgument);

  InferenceItem wrong_rows = items.a;
  wrong_rows.inputs[0] = Int64Tensor({2, 1}, {10, 11});
  const Status rows_status = ValidateBatch(spec, MakeBatch({&wrong_rows}, {4, 6}));
  EXPECT_EQ(rows_status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rows_status.message().find("input 'ids'"), std::string::npos)
      << rows_status.ToString();

  InferenceItem wrong_dtype = items.a;
  wrong_dtype.inputs[1] = Int64Tensor({1, 2}, {1, 2});
  EXPECT_EQ(ValidateBatch(spec, MakeBatch({&wrong_dtype}, {4, 6})).code(),
            StatusCode::kInvalidArgument);

  InferenceItem short_bytes = items.a;
  short_bytes.inputs[0].bytes.pop_back();
  EXPECT_EQ(ValidateBatch(spec, MakeBatch({&short_bytes}, {4, 6})).code(),
            StatusCode::kInvalidArgument);

  InferenceItem missing_flags = items.a;
  missing_flags.outputs_wanted = {true};
  EXPECT_EQ(ValidateBatch(spec, MakeBatch({&missing_flags}, {4, 6})).code(),
            StatusCode::kInvalidArgument);
}

// per_token[row, c, pos] = 4 row + c + pos / 8 and pooled[row, c] = 4 row + c: exact in bf16.
std::vector<at::Tensor> Bf16ModelOutputs(int64_t batch, int64_t length) {
  at::Tensor row = at::arange(batch, at::kFloat).view({batch, 1, 1});
  at::Tensor channel = at::arange(3, at::kFloat).view({1, 3, 1});
  at::Tensor position = at::arange(length, at::kFloat).view({1, 1, length});
  at::Tensor per_token = (row * 4 + channel + position / 8).to(at::kBFloat16);
  at::Tensor pooled = (row.view({batch, 1}) * 4 + channel.view({1, 3})).to(at::kBFloat16);
  return {per_token, pooled};
}

TEST(PaddingTest, SliceGivesEachItemItsRowsAndLengthInTheSpecDtype) {
  const ModelSpec spec = PaddingSpec();
  TwoItems items;
  const Batch batch = MakeBatch({&items.a, &items.b}, {4, 6});
  BatchOutputs outputs;
  ASSERT_TRUE(SliceOutputs(spec, batch, Bf16ModelOutputs(4, 6), &outputs).ok());
  ASSERT_EQ(outputs.size(), 2u);
  ASSERT_EQ(outputs[0].size(), 2u);
  ASSERT_EQ(outputs[1].size(), 2u);

  const HostTensor& a_per_token = outputs[0][0];
  EXPECT_EQ(a_per_token.dtype, DataType::kFp32);
  EXPECT_EQ(a_per_token.shape, (std::vector<int64_t>{1, 3, 3}));
  EXPECT_EQ(Fp32Values(a_per_token),
            (std::vector<float>{0, 0.125, 0.25, 1, 1.125, 1.25, 2, 2.125, 2.25}));
  const HostTensor& a_pooled = outputs[0][1];
  EXPECT_EQ(a_pooled.shape, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(Fp32Values(a_pooled), (std::vector<float>{0, 1, 2}));

  const HostTensor& b_per_token = outputs[1][0];
  EXPECT_EQ(b_per_token.shape, (std::vector<int64_t>{2, 3, 5}));
  std::vector<float> expected;
  for (int row = 1; row <= 2; ++row) {
    for (int c = 0; c < 3; ++c) {
      for (int pos = 0; pos < 5; ++pos) expected.push_back(4.f * row + c + pos / 8.f);
    }
  }
  EXPECT_EQ(Fp32Values(b_per_token), expected);
  EXPECT_EQ(b_per_token.bytes.size(), expected.size() * sizeof(float));

  // B did not want pooled: an empty tensor.
  const HostTensor& b_pooled = outputs[1][1];
  EXPECT_EQ(b_pooled.element_count(), 0);
  EXPECT_TRUE(b_pooled.bytes.empty());
}

// A fixed-shape model: image FP32 [2, 2] padded with 9, logits FP32 [3]; batch-only buckets.
ModelSpec FixedShapeSpec() {
  ModelSpec spec;
  spec.name = "cnn";
  spec.max_batch_size = 4;
  spec.max_sequence_length = kFixedShapeLength;
  spec.inputs = {TensorSpec{"image", DataType::kFp32, {2, 2}, 9.0}};
  spec.outputs = {TensorSpec{"logits", DataType::kFp32, {3}, 0.0}};
  spec.bucket_batch_sizes = {1, 2, 4};
  spec.bucket_lengths = {kFixedShapeLength};
  return spec;
}

// `rows` images whose values count up from `first`, so that every element is recognisable.
InferenceItem CountingImages(int64_t rows, float first) {
  InferenceItem item;
  item.rows = rows;
  item.length = kFixedShapeLength;
  std::vector<float> values;
  for (int64_t i = 0; i < rows * 4; ++i) values.push_back(first + static_cast<float>(i));
  item.inputs = {Fp32Tensor({rows, 2, 2}, values)};
  item.outputs_wanted = {true};
  return item;
}

TEST(PaddingTest, FixedShapeBatchFillsRowsAndPadsTheSpareRows) {
  const ModelSpec spec = FixedShapeSpec();
  const InferenceItem a = CountingImages(1, 0.f), b = CountingImages(2, 100.f);
  std::vector<at::Tensor> inputs;
  const Status status =
      MakePaddedInputs(spec, MakeBatch({&a, &b}, {4, kFixedShapeLength}), &inputs);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(inputs.size(), 1u);
  EXPECT_EQ(inputs[0].sizes().vec(), (std::vector<int64_t>{4, 2, 2}));
  EXPECT_EQ(FloatContents(inputs[0]),
            (std::vector<float>{0, 1, 2, 3, 100, 101, 102, 103, 104, 105, 106, 107, 9, 9, 9, 9}));
}

TEST(PaddingTest, FixedShapeSliceGivesEachItemItsRows) {
  const ModelSpec spec = FixedShapeSpec();
  const InferenceItem a = CountingImages(2, 0.f), b = CountingImages(1, 0.f);
  const Batch batch = MakeBatch({&a, &b}, {4, kFixedShapeLength});
  // logits[row, k] = 10 * row + k
  const at::Tensor logits = (at::arange(4, at::kFloat).view({4, 1}) * 10 +
                             at::arange(3, at::kFloat).view({1, 3}));
  BatchOutputs outputs;
  const Status status = SliceOutputs(spec, batch, {logits}, &outputs);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[0][0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Fp32Values(outputs[0][0]), (std::vector<float>{0, 1, 2, 10, 11, 12}));
  EXPECT_EQ(outputs[1][0].shape, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(Fp32Values(outputs[1][0]), (std::vector<float>{20, 21, 22}));

  // A model answering with a length dimension is refused, naming the bucket as "4x-".
  const Status wrong = SliceOutputs(spec, batch, {logits.view({4, 1, 3})}, &outputs);
  EXPECT_EQ(wrong.code(), StatusCode::kInternal);
  EXPECT_NE(wrong.message().find("model 'cnn' bucket 4x-: output 'logits'"), std::string::npos)
      << wrong.message();
}

TEST(PaddingTest, ValidateOutputsNamesTheMismatchingOutput) {
  const ModelSpec spec = PaddingSpec();
  const BucketShape shape{4, 6};
  EXPECT_TRUE(ValidateOutputs(spec, shape, Bf16ModelOutputs(4, 6)).ok());

  const std::vector<std::vector<at::Tensor>> wrong_cases = {
      {at::zeros({4, 3, 6})},                        // one output missing
      {at::zeros({4, 3, 6, 1}), at::zeros({4, 3})},  // rank
      {at::zeros({2, 3, 6}), at::zeros({4, 3})},     // batch
      {at::zeros({4, 3, 5}), at::zeros({4, 3})},     // variable (length) dim
      {at::zeros({4, 3, 6}), at::zeros({4, 4})},     // fixed dim
      {at::zeros({4, 3, 6}), at::Tensor()},          // undefined
  };
  const std::vector<std::string> named = {"",         "'per_token'", "'per_token'", "'per_token'",
                                          "'pooled'", "'pooled'"};
  for (size_t i = 0; i < wrong_cases.size(); ++i) {
    SCOPED_TRACE(i);
    const Status status = ValidateOutputs(spec, shape, wrong_cases[i]);
    EXPECT_EQ(status.code(), StatusCode::kInternal);
    EXPECT_NE(status.message().find("model 'padding_model' bucket 4x6"), std::string::npos)
        << status.ToString();
    EXPECT_NE(status.message().find(named[i]), std::string::npos) << status.ToString();
  }
}

}  // namespace
}  // namespace graphserve
