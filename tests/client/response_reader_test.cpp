// FindOutput, OutputAsFloats and OutputAsInt64s on hand-made responses, well-formed and not.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graphserve/client/client.h"

namespace graphserve {
namespace {

std::string FloatBytes(const std::vector<float>& values) {
  std::string raw;
  for (float value : values) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    for (int b = 0; b < 4; ++b) raw.push_back(static_cast<char>((bits >> (8 * b)) & 0xff));
  }
  return raw;
}

std::string Int64Bytes(const std::vector<int64_t>& values) {
  std::string raw;
  for (int64_t value : values) {
    for (int b = 0; b < 8; ++b) {
      raw.push_back(static_cast<char>((static_cast<uint64_t>(value) >> (8 * b)) & 0xff));
    }
  }
  return raw;
}

inference::ModelInferResponse::InferOutputTensor* AddOutput(inference::ModelInferResponse* response,
                                                            const std::string& name,
                                                            const std::string& datatype,
                                                            std::vector<int64_t> shape) {
  auto* output = response->add_outputs();
  output->set_name(name);
  output->set_datatype(datatype);
  for (int64_t dim : shape) output->add_shape(dim);
  return output;
}

// What graphserve answers for the encoder at batch 1, 2 tokens, shrunk to a hidden size of 3.
inference::ModelInferResponse EncoderResponse() {
  inference::ModelInferResponse response;
  response.set_model_name("encoder");
  AddOutput(&response, "last_hidden_state", "FP32", {1, 2, 3});
  *response.add_raw_output_contents() = FloatBytes({0.5f, -1.25f, 2.0f, 3.0f, -0.0f, 1e-3f});
  AddOutput(&response, "pooler_output", "FP32", {1, 3});
  *response.add_raw_output_contents() = FloatBytes({0.25f, 0.75f, -0.125f});
  return response;
}

TEST(FindOutputTest, FindsARawOutputAndDecodesIt) {
  const inference::ModelInferResponse response = EncoderResponse();
  OutputView output;
  ASSERT_TRUE(FindOutput(response, "pooler_output", &output).ok());
  EXPECT_EQ(output.name, "pooler_output");
  EXPECT_EQ(output.datatype, "FP32");
  EXPECT_EQ(output.shape, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(output.element_count, 3);
  EXPECT_EQ(output.typed, nullptr);
  // A view of the response's own bytes, not a copy.
  EXPECT_EQ(output.raw.data(), response.raw_output_contents(1).data());
  EXPECT_EQ(output.raw.size(), 12u);

  std::vector<float> values;
  ASSERT_TRUE(OutputAsFloats(output, &values).ok());
  EXPECT_EQ(values, (std::vector<float>{0.25f, 0.75f, -0.125f}));

  ASSERT_TRUE(FindOutput(response, "last_hidden_state", &output).ok());
  ASSERT_TRUE(OutputAsFloats(output, &values).ok());
  EXPECT_EQ(values, (std::vector<float>{0.5f, -1.25f, 2.0f, 3.0f, -0.0f, 1e-3f}));
}

TEST(FindOutputTest, MissingOutputIsNotFoundAndNamesTheOthers) {
  const inference::ModelInferResponse response = EncoderResponse();
  OutputView output;
  const grpc::Status status = FindOutput(response, "logits", &output);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("logits"), std::string::npos);
  EXPECT_NE(status.error_message().find("pooler_output"), std::string::npos);
  EXPECT_EQ(FindOutput(inference::ModelInferResponse(), "x", &output).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST(FindOutputTest, RawSizeMismatchIsReported) {
  inference::ModelInferResponse response = EncoderResponse();
  response.mutable_raw_output_contents(1)->resize(10);  // 3 floats need 12 bytes
  OutputView output;
  const grpc::Status status = FindOutput(response, "pooler_output", &output);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(status.error_message().find("pooler_output"), std::string::npos);
  // The intact output of the same response still reads.
  EXPECT_TRUE(FindOutput(response, "last_hidden_state", &output).ok());
}

TEST(FindOutputTest, MalformedResponsesAreReported) {
  OutputView output;

  inference::ModelInferResponse missing_raw = EncoderResponse();
  missing_raw.mutable_raw_output_contents()->RemoveLast();
  EXPECT_EQ(FindOutput(missing_raw, "last_hidden_state", &output).error_code(),
            grpc::StatusCode::INTERNAL);

  inference::ModelInferResponse negative_dim = EncoderResponse();
  negative_dim.mutable_outputs(1)->set_shape(1, -3);
  EXPECT_EQ(FindOutput(negative_dim, "pooler_output", &output).error_code(),
            grpc::StatusCode::INTERNAL);

  inference::ModelInferResponse overflow = EncoderResponse();
  overflow.mutable_outputs(1)->set_shape(0, int64_t{1} << 40);
  overflow.mutable_outputs(1)->set_shape(1, int64_t{1} << 40);
  EXPECT_EQ(FindOutput(overflow, "pooler_output", &output).error_code(),
            grpc::StatusCode::INTERNAL);

  inference::ModelInferResponse unknown_type = EncoderResponse();
  unknown_type.mutable_outputs(1)->set_datatype("FP8");
  EXPECT_EQ(FindOutput(unknown_type, "pooler_output", &output).error_code(),
            grpc::StatusCode::INTERNAL);
}

TEST(FindOutputTest, ReadsTypedOutputs) {
  inference::ModelInferResponse response;
  auto* scores = AddOutput(&response, "scores", "FP32", {2});
  scores->mutable_contents()->add_fp32_contents(1.5f);
  scores->mutable_contents()->add_fp32_contents(-2.5f);
  auto* labels = AddOutput(&response, "labels", "INT64", {2, 1});
  labels->mutable_contents()->add_int64_contents(7);
  labels->mutable_contents()->add_int64_contents(-9);

  OutputView output;
  ASSERT_TRUE(FindOutput(response, "scores", &output).ok());
  ASSERT_NE(output.typed, nullptr);
  std::vector<float> floats;
  ASSERT_TRUE(OutputAsFloats(output, &floats).ok());
  EXPECT_EQ(floats, (std::vector<float>{1.5f, -2.5f}));

  ASSERT_TRUE(FindOutput(response, "labels", &output).ok());
  std::vector<int64_t> ints;
  ASSERT_TRUE(OutputAsInt64s(output, &ints).ok());
  EXPECT_EQ(ints, (std::vector<int64_t>{7, -9}));

  labels->mutable_contents()->add_int64_contents(1);  // 3 values for shape [2, 1]
  EXPECT_EQ(FindOutput(response, "labels", &output).error_code(), grpc::StatusCode::INTERNAL);
}

TEST(OutputAsTest, RawInt64sDecodeAndDatatypesAreChecked) {
  inference::ModelInferResponse response;
  AddOutput(&response, "token_ids", "INT64", {3});
  *response.add_raw_output_contents() = Int64Bytes({1, -1, int64_t{1} << 40});

  OutputView output;
  ASSERT_TRUE(FindOutput(response, "token_ids", &output).ok());
  std::vector<int64_t> ints;
  ASSERT_TRUE(OutputAsInt64s(output, &ints).ok());
  EXPECT_EQ(ints, (std::vector<int64_t>{1, -1, int64_t{1} << 40}));

  std::vector<float> floats;
  EXPECT_EQ(OutputAsFloats(output, &floats).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(OutputAsTest, AHandMadeViewWithTooFewBytesIsRefused) {
  const std::string bytes = FloatBytes({1.0f});
  OutputView output;
  output.name = "x";
  output.datatype = "FP32";
  output.shape = {4};
  output.element_count = 4;
  output.raw = bytes;  // 4 bytes for 4 floats: decoding would read past the end
  std::vector<float> floats;
  EXPECT_EQ(OutputAsFloats(output, &floats).error_code(), grpc::StatusCode::INTERNAL);
}

TEST(StatusCodeNameTest, NamesCanonicalCodes) {
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::OK), "OK");
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::UNAVAILABLE), "UNAVAILABLE");
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
  EXPECT_STREQ(StatusCodeName(grpc::StatusCode::DATA_LOSS), "DATA_LOSS");
  EXPECT_STREQ(StatusCodeName(static_cast<grpc::StatusCode>(99)), "UNKNOWN_CODE");
}

}  // namespace
}  // namespace graphserve
