// The built-in encoder network itself: seeded weights, masking, token clamping, spec checks.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include <string>
#include <utility>
#include <vector>

#include "builtin_encoder.h"

namespace graphserve {
namespace {

// max |actual - expected| / max |expected|
double RelativeDifference(const at::Tensor& actual, const at::Tensor& expected) {
  EXPECT_EQ(actual.sizes(), expected.sizes());
  if (actual.sizes() != expected.sizes()) return 1.0;
  return (actual - expected).abs().max().item<double>() / expected.abs().max().item<double>();
}

at::Tensor Ids(const std::vector<int64_t>& values) {
  return at::tensor(values, at::kLong).view({1, static_cast<int64_t>(values.size())});
}

TEST(BuiltinEncoderTest, EveryInstanceHasTheSameWeights) {
  BuiltinEncoder first;
  BuiltinEncoder second;
  const auto first_parameters = first->named_parameters();
  const auto second_parameters = second->named_parameters();
  ASSERT_EQ(first_parameters.size(), second_parameters.size());
  // embeddings 2 + embedding norm 2 + per layer (4 linear + 2 norm) x 2 + pooler 2
  EXPECT_EQ(first_parameters.size(), static_cast<size_t>(6 + kEncoderLayers * 12));
  for (const auto& item : first_parameters) {
    SCOPED_TRACE(item.key());
    const at::Tensor* other = second_parameters.find(item.key());
    ASSERT_NE(other, nullptr);
    EXPECT_TRUE(at::equal(item.value(), *other));
  }
  // The seeded initialisation really ran (torch's default Linear init has std ~ 0.036 here).
  const at::Tensor& qkv = *first_parameters.find("layer0.qkv.weight");
  EXPECT_NEAR(qkv.std().item<double>(), kEncoderInitStd, 0.002);
  EXPECT_EQ(qkv.sizes(), at::IntArrayRef({3 * kEncoderHiddenSize, kEncoderHiddenSize}));
}

class EncoderForwardTest : public ::testing::Test {
 protected:
  c10::InferenceMode inference_mode_;
  BuiltinEncoder encoder_;
};

TEST_F(EncoderForwardTest, OutputShapes) {
  const EncoderOutputs outputs =
      encoder_->forward(at::ones({2, 5}, at::kLong), at::ones({2, 5}, at::kLong));
  EXPECT_EQ(outputs.last_hidden_state.sizes(), at::IntArrayRef({2, 5, kEncoderHiddenSize}));
  EXPECT_EQ(outputs.pooler_output.sizes(), at::IntArrayRef({2, kEncoderHiddenSize}));
  EXPECT_EQ(outputs.last_hidden_state.scalar_type(), at::kFloat);
  EXPECT_TRUE(outputs.last_hidden_state.isfinite().all().item<bool>());
}

// A sequence of length 5 run alone, and the same sequence as row 1 of a 3x12 batch whose other rows
// hold other sequences and whose positions 5..11 in row 1 hold garbage ids under mask 0.
struct PaddedCase {
  at::Tensor alone_ids = Ids({5, 900, 17, 333, 1000});
  at::Tensor batch_ids;
  at::Tensor batch_mask;
  PaddedCase() {
    at::Generator generator = at::detail::createCPUGenerator(/*seed_val=*/7);
    batch_ids = at::randint(0, kEncoderVocabSize, {3, 12}, generator, at::kLong);
    batch_mask = at::ones({3, 12}, at::kLong);
    batch_mask[0].narrow(0, 9, 3).fill_(0);  // row 0: its own length 9
    batch_ids[1].narrow(0, 0, 5).copy_(alone_ids[0]);
    // Garbage under the mask, including ids outside the vocabulary.
    batch_ids[1].narrow(0, 5, 7).copy_(at::tensor({-3, 5000, 77, 1023, 0, 999999, 12}, at::kLong));
    batch_mask[1].narrow(0, 5, 7).fill_(0);
  }
};

TEST_F(EncoderForwardTest, MaskedPositionsDoNotChangeRealPositions) {
  PaddedCase padded;
  const EncoderOutputs alone = encoder_->forward(padded.alone_ids, at::ones({1, 5}, at::kLong));
  const EncoderOutputs batch = encoder_->forward(padded.batch_ids, padded.batch_mask);
  EXPECT_LT(
      RelativeDifference(batch.last_hidden_state[1].narrow(0, 0, 5), alone.last_hidden_state[0]),
      1e-5);
  EXPECT_LT(RelativeDifference(batch.pooler_output[1], alone.pooler_output[0]), 1e-5);
}

// The control for the test above: without the mask the garbage does change the outputs, so the
// tolerance above is tight enough to notice a mask that does not work.
TEST_F(EncoderForwardTest, UnmaskedGarbageChangesRealPositions) {
  PaddedCase padded;
  const EncoderOutputs alone = encoder_->forward(padded.alone_ids, at::ones({1, 5}, at::kLong));
  const EncoderOutputs batch = encoder_->forward(padded.batch_ids, at::ones({3, 12}, at::kLong));
  EXPECT_GT(
      RelativeDifference(batch.last_hidden_state[1].narrow(0, 0, 5), alone.last_hidden_state[0]),
      1e-3);
  EXPECT_GT(RelativeDifference(batch.pooler_output[1], alone.pooler_output[0]), 1e-3);
}

TEST_F(EncoderForwardTest, OutOfRangeIdsAreClampedToTheVocabulary) {
  const at::Tensor mask = at::ones({1, 4}, at::kLong);
  const EncoderOutputs out_of_range = encoder_->forward(Ids({-7, 4, 1024, 123456}), mask);
  const EncoderOutputs clamped = encoder_->forward(Ids({0, 4, 1023, 1023}), mask);
  EXPECT_TRUE(at::equal(out_of_range.last_hidden_state, clamped.last_hidden_state));
  EXPECT_TRUE(at::equal(out_of_range.pooler_output, clamped.pooler_output));
}

TEST_F(EncoderForwardTest, LongerThanThePositionTableThrows) {
  const at::Tensor too_long = at::ones({1, kEncoderMaxPositions + 1}, at::kLong);
  EXPECT_THROW(encoder_->forward(too_long, too_long), c10::Error);
}

ModelSpec EncoderSpec() {
  ModelSpec spec;
  spec.name = "encoder";
  spec.platform = kPlatformBuiltinEncoder;
  spec.max_batch_size = 8;
  spec.max_sequence_length = 512;
  spec.inputs = {TensorSpec{"input_ids", DataType::kInt64, {-1}, 0.0},
                 TensorSpec{"attention_mask", DataType::kInt64, {-1}, 0.0}};
  spec.sequence_mask_input = "attention_mask";
  spec.outputs = {TensorSpec{"last_hidden_state", DataType::kFp32, {-1, 256}, 0.0},
                  TensorSpec{"pooler_output", DataType::kFp32, {256}, 0.0}};
  spec.bucket_batch_sizes = {1, 8};
  spec.bucket_lengths = {16, 512};
  return spec;
}

void ExpectInvalid(const ModelSpec& spec, const std::string& mentions) {
  const Status status = ValidateEncoderSpec(spec);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << mentions;
  EXPECT_NE(status.message().find(mentions), std::string::npos) << status.ToString();
  EXPECT_NE(status.message().find("model 'encoder'"), std::string::npos) << status.ToString();
}

TEST(EncoderSpecTest, AcceptsTheEncoderInAnyOrder) {
  ModelSpec spec = EncoderSpec();
  EXPECT_TRUE(ValidateEncoderSpec(spec).ok()) << ValidateEncoderSpec(spec).ToString();
  std::swap(spec.inputs[0], spec.inputs[1]);
  std::swap(spec.outputs[0], spec.outputs[1]);
  EXPECT_TRUE(ValidateEncoderSpec(spec).ok());
  spec.outputs.pop_back();  // a subset of the outputs is fine
  EXPECT_TRUE(ValidateEncoderSpec(spec).ok());
  spec.inputs[0].pad_value = 0.0;
  spec.inputs[1].pad_value = 3.0;  // input_ids (now second) may pad with any id
  EXPECT_TRUE(ValidateEncoderSpec(spec).ok());
}

TEST(EncoderSpecTest, RejectsWhatDiffers) {
  ModelSpec spec = EncoderSpec();
  spec.outputs[0].dims = {-1, 128};
  ExpectInvalid(spec, "last_hidden_state");

  spec = EncoderSpec();
  spec.outputs[1].dtype = DataType::kFp16;
  ExpectInvalid(spec, "pooler_output");

  spec = EncoderSpec();
  spec.inputs[0].dtype = DataType::kInt32;
  ExpectInvalid(spec, "input_ids");

  spec = EncoderSpec();
  spec.inputs[1].name = "token_type_ids";
  ExpectInvalid(spec, "token_type_ids");

  spec = EncoderSpec();
  spec.inputs[1].name = "input_ids";
  ExpectInvalid(spec, "declared twice");

  spec = EncoderSpec();
  spec.inputs.pop_back();
  ExpectInvalid(spec, "2 inputs");

  spec = EncoderSpec();
  spec.inputs[1].pad_value = 1.0;
  ExpectInvalid(spec, "attention_mask");

  spec = EncoderSpec();
  spec.outputs.push_back(TensorSpec{"logits", DataType::kFp32, {2}, 0.0});
  ExpectInvalid(spec, "logits");

  spec = EncoderSpec();
  spec.max_sequence_length = 1024;
  ExpectInvalid(spec, "max_sequence_length");

  spec = EncoderSpec();
  spec.bucket_lengths = {16, 600};
  ExpectInvalid(spec, "600");
}

}  // namespace
}  // namespace graphserve
