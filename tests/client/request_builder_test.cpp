// MakeTokenRequest and MakeRequestFromMetadata: shapes, encodings, ranges, determinism, refusals.
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graphserve/client/client.h"

namespace graphserve {
namespace {

std::vector<int64_t> DecodeInt64s(const std::string& raw) {
  EXPECT_EQ(raw.size() % 8, 0u);
  std::vector<int64_t> values(raw.size() / 8);
  for (size_t i = 0; i < values.size(); ++i) {
    uint64_t bits = 0;
    for (int b = 0; b < 8; ++b) bits |= uint64_t{static_cast<unsigned char>(raw[8 * i + b])} << (8 * b);
    values[i] = static_cast<int64_t>(bits);
  }
  return values;
}

std::vector<float> DecodeFloats(const std::string& raw) {
  EXPECT_EQ(raw.size() % 4, 0u);
  std::vector<float> values(raw.size() / 4);
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits = 0;
    for (int b = 0; b < 4; ++b) bits |= uint32_t{static_cast<unsigned char>(raw[4 * i + b])} << (8 * b);
    std::memcpy(&values[i], &bits, 4);
  }
  return values;
}

std::vector<int64_t> Shape(const inference::ModelInferRequest::InferInputTensor& tensor) {
  return {tensor.shape().begin(), tensor.shape().end()};
}

std::vector<int64_t> TypedInt64s(const inference::ModelInferRequest::InferInputTensor& tensor) {
  return {tensor.contents().int64_contents().begin(), tensor.contents().int64_contents().end()};
}

RequestSpec TokenSpec(int64_t rows, int64_t length, uint64_t seed, InputEncoding encoding) {
  RequestSpec spec;
  spec.model = "encoder";
  spec.rows = rows;
  spec.length = length;
  spec.seed = seed;
  spec.encoding = encoding;
  return spec;
}

TEST(MakeTokenRequestTest, RawRequestHasTokenInputsOfTheRequestedShape) {
  RequestSpec spec = TokenSpec(3, 7, 42, InputEncoding::kRaw);
  spec.request_id = "req-1";
  spec.outputs = {"pooler_output"};
  inference::ModelInferRequest request;
  ASSERT_TRUE(MakeTokenRequest(spec, &request).ok());

  EXPECT_EQ(request.model_name(), "encoder");
  EXPECT_EQ(request.id(), "req-1");
  ASSERT_EQ(request.outputs_size(), 1);
  EXPECT_EQ(request.outputs(0).name(), "pooler_output");
  ASSERT_EQ(request.inputs_size(), 2);
  ASSERT_EQ(request.raw_input_contents_size(), 2);
  EXPECT_EQ(request.inputs(0).name(), "input_ids");
  EXPECT_EQ(request.inputs(1).name(), "attention_mask");
  for (const auto& input : request.inputs()) {
    EXPECT_EQ(input.datatype(), "INT64");
    EXPECT_EQ(Shape(input), (std::vector<int64_t>{3, 7}));
    // Raw requests must not also carry typed values: the server would see the data twice.
    EXPECT_EQ(input.contents().int64_contents_size(), 0);
  }
  const std::vector<int64_t> ids = DecodeInt64s(request.raw_input_contents(0));
  ASSERT_EQ(ids.size(), 21u);
  for (int64_t id : ids) {
    EXPECT_GE(id, 1);
    EXPECT_LT(id, 1000);
  }
  EXPECT_EQ(DecodeInt64s(request.raw_input_contents(1)), std::vector<int64_t>(21, 1));
}

TEST(MakeTokenRequestTest, RawBytesDecodeToTheTypedIds) {
  inference::ModelInferRequest raw, typed;
  ASSERT_TRUE(MakeTokenRequest(TokenSpec(4, 16, 7, InputEncoding::kRaw), &raw).ok());
  ASSERT_TRUE(MakeTokenRequest(TokenSpec(4, 16, 7, InputEncoding::kTyped), &typed).ok());

  EXPECT_EQ(typed.raw_input_contents_size(), 0);
  ASSERT_EQ(typed.inputs_size(), 2);
  EXPECT_EQ(DecodeInt64s(raw.raw_input_contents(0)), TypedInt64s(typed.inputs(0)));
  EXPECT_EQ(DecodeInt64s(raw.raw_input_contents(1)), TypedInt64s(typed.inputs(1)));
  EXPECT_EQ(TypedInt64s(typed.inputs(1)), std::vector<int64_t>(64, 1));
}

TEST(MakeTokenRequestTest, RawEncodingIsLittleEndian) {
  RequestSpec spec = TokenSpec(1, 1, 0, InputEncoding::kRaw);
  spec.ids = {1, 258, -2};
  inference::ModelInferRequest request;
  ASSERT_TRUE(MakeTokenRequest(spec, &request).ok());
  const std::string expected("\x01\0\0\0\0\0\0\0"
                             "\x02\x01\0\0\0\0\0\0"
                             "\xfe\xff\xff\xff\xff\xff\xff\xff",
                             24);
  EXPECT_EQ(request.raw_input_contents(0), expected);
}

TEST(MakeTokenRequestTest, GivenIdsMakeOneRowOfExactlyThoseIds) {
  RequestSpec spec = TokenSpec(5, 9, 0, InputEncoding::kTyped);  // rows and length are ignored
  spec.ids = {101, 2023, 102};
  inference::ModelInferRequest request;
  ASSERT_TRUE(MakeTokenRequest(spec, &request).ok());
  EXPECT_EQ(Shape(request.inputs(0)), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(TypedInt64s(request.inputs(0)), (std::vector<int64_t>{101, 2023, 102}));
  EXPECT_EQ(TypedInt64s(request.inputs(1)), (std::vector<int64_t>{1, 1, 1}));
}

TEST(MakeTokenRequestTest, SameSeedSameIdsOtherSeedOtherIds) {
  inference::ModelInferRequest a, b, c;
  ASSERT_TRUE(MakeTokenRequest(TokenSpec(2, 32, 1234, InputEncoding::kRaw), &a).ok());
  ASSERT_TRUE(MakeTokenRequest(TokenSpec(2, 32, 1234, InputEncoding::kRaw), &b).ok());
  ASSERT_TRUE(MakeTokenRequest(TokenSpec(2, 32, 1235, InputEncoding::kRaw), &c).ok());
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
  EXPECT_NE(a.raw_input_contents(0), c.raw_input_contents(0));
  // The ids must actually vary, not be one repeated value.
  const std::vector<int64_t> ids = DecodeInt64s(a.raw_input_contents(0));
  EXPECT_GT(std::set<int64_t>(ids.begin(), ids.end()).size(), 32u);
}

TEST(MakeTokenRequestTest, RefusesBadSpecsAndLeavesTheRequestAlone) {
  inference::ModelInferRequest request;
  request.set_model_name("untouched");
  EXPECT_EQ(MakeTokenRequest(TokenSpec(0, 8, 0, InputEncoding::kRaw), &request).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(MakeTokenRequest(TokenSpec(2, 0, 0, InputEncoding::kRaw), &request).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  RequestSpec no_model = TokenSpec(1, 1, 0, InputEncoding::kRaw);
  no_model.model.clear();
  EXPECT_EQ(MakeTokenRequest(no_model, &request).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  RequestSpec huge = TokenSpec(int64_t{1} << 20, int64_t{1} << 20, 0, InputEncoding::kRaw);
  EXPECT_EQ(MakeTokenRequest(huge, &request).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(request.model_name(), "untouched");
}

void AddInput(inference::ModelMetadataResponse* metadata, const std::string& name,
              const std::string& datatype, std::vector<int64_t> shape) {
  auto* input = metadata->add_inputs();
  input->set_name(name);
  input->set_datatype(datatype);
  for (int64_t dim : shape) input->add_shape(dim);
}

TEST(MakeRequestFromMetadataTest, FillsEveryInputFromTheMetadata) {
  inference::ModelMetadataResponse metadata;
  metadata.set_name("tagger");
  AddInput(&metadata, "tokens", "INT64", {-1, -1});
  AddInput(&metadata, "PaddingMask", "INT64", {-1, -1});
  AddInput(&metadata, "segments", "INT64", {-1, -1});
  AddInput(&metadata, "features", "FP32", {-1, -1, 4});
  AddInput(&metadata, "fixed_batch", "FP32", {2, -1});

  RequestSpec spec;  // no model name: the metadata's is used
  spec.rows = 3;
  spec.length = 5;
  spec.seed = 9;
  inference::ModelInferRequest request;
  ASSERT_TRUE(MakeRequestFromMetadata(metadata, spec, &request).ok());

  EXPECT_EQ(request.model_name(), "tagger");
  ASSERT_EQ(request.inputs_size(), 5);
  ASSERT_EQ(request.raw_input_contents_size(), 5);
  EXPECT_EQ(Shape(request.inputs(0)), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(Shape(request.inputs(3)), (std::vector<int64_t>{3, 5, 4}));
  // A fixed leading dimension stays; the -1 after it is the length, not the batch.
  EXPECT_EQ(Shape(request.inputs(4)), (std::vector<int64_t>{2, 5}));

  const std::vector<int64_t> tokens = DecodeInt64s(request.raw_input_contents(0));
  EXPECT_EQ(DecodeInt64s(request.raw_input_contents(1)), std::vector<int64_t>(15, 1));
  EXPECT_EQ(DecodeInt64s(request.raw_input_contents(2)), tokens);  // every INT64 input: same ids
  const std::vector<float> features = DecodeFloats(request.raw_input_contents(3));
  ASSERT_EQ(features.size(), 60u);
  for (float value : features) {
    EXPECT_GE(value, -1.0f);
    EXPECT_LT(value, 1.0f);
  }
  EXPECT_NE(features[0], features[1]);
  EXPECT_EQ(DecodeFloats(request.raw_input_contents(4)).size(), 10u);
}

TEST(MakeRequestFromMetadataTest, TypedFloatsMatchRawFloats) {
  inference::ModelMetadataResponse metadata;
  metadata.set_name("audio");
  AddInput(&metadata, "frames", "FP32", {-1, -1});
  AddInput(&metadata, "frame_mask", "FP32", {-1, -1});
  RequestSpec spec;
  spec.rows = 2;
  spec.length = 6;
  spec.seed = 3;
  inference::ModelInferRequest raw, typed;
  ASSERT_TRUE(MakeRequestFromMetadata(metadata, spec, &raw).ok());
  spec.encoding = InputEncoding::kTyped;
  ASSERT_TRUE(MakeRequestFromMetadata(metadata, spec, &typed).ok());
  const auto& fp32 = typed.inputs(0).contents().fp32_contents();
  EXPECT_EQ(DecodeFloats(raw.raw_input_contents(0)), std::vector<float>(fp32.begin(), fp32.end()));
  const auto& mask = typed.inputs(1).contents().fp32_contents();
  EXPECT_EQ(std::vector<float>(mask.begin(), mask.end()), std::vector<float>(12, 1.0f));
}

TEST(MakeRequestFromMetadataTest, GivenIdsMustFillTheShapeWholeTimes) {
  inference::ModelMetadataResponse metadata;
  metadata.set_name("fixed");
  AddInput(&metadata, "input_ids", "INT64", {-1, 4});
  RequestSpec spec;
  spec.ids = {7, 8};
  inference::ModelInferRequest request;
  ASSERT_TRUE(MakeRequestFromMetadata(metadata, spec, &request).ok());
  EXPECT_EQ(DecodeInt64s(request.raw_input_contents(0)), (std::vector<int64_t>{7, 8, 7, 8}));

  spec.ids = {7, 8, 9};
  const grpc::Status status = MakeRequestFromMetadata(metadata, spec, &request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("input_ids"), std::string::npos) << status.error_message();
}

TEST(MakeRequestFromMetadataTest, RefusesWhatItCannotGenerate) {
  inference::ModelInferRequest request;
  RequestSpec spec;

  inference::ModelMetadataResponse half;
  half.set_name("half");
  AddInput(&half, "x", "FP16", {-1, 8});
  const grpc::Status status = MakeRequestFromMetadata(half, spec, &request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("FP16"), std::string::npos) << status.error_message();

  inference::ModelMetadataResponse bad_dim;
  bad_dim.set_name("bad");
  AddInput(&bad_dim, "x", "INT64", {-1, -2});
  EXPECT_EQ(MakeRequestFromMetadata(bad_dim, spec, &request).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  inference::ModelMetadataResponse no_inputs;
  no_inputs.set_name("empty");
  EXPECT_EQ(MakeRequestFromMetadata(no_inputs, spec, &request).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace graphserve
