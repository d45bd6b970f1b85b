#include "graphserve/server/grpc/request_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fake_cuda_handles.h"
#include "fixed_shape_config.h"
#include "graphserve/server/config/config.h"
#include "graphserve/server/grpc/cuda_driver.h"
#include "shm_object.h"

namespace graphserve {
namespace {

ModelSpec EncoderSpec() {
  ModelSpec spec;
  Status status = ModelSpecFromConfig(BuiltinEncoderConfig(), &spec);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return spec;
}

std::string Int64Bytes(const std::vector<int64_t>& values) {
  std::string bytes(values.size() * sizeof(int64_t), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// A valid encoder request of rows × length, as raw contents or as typed contents.
inference::ModelInferRequest TokenRequest(int64_t rows, int64_t length, bool raw) {
  inference::ModelInferRequest request;
  request.set_model_name("encoder");
  request.set_id("req-1");
  for (const char* name : {"input_ids", "attention_mask"}) {
    auto* input = request.add_inputs();
    input->set_name(name);
    input->set_datatype("INT64");
    input->add_shape(rows);
    input->add_shape(length);
    std::vector<int64_t> values(rows * length);
    for (size_t i = 0; i < values.size(); ++i) values[i] = std::string(name) == "input_ids" ? 7 + i : 1;
    if (raw) {
      request.add_raw_input_contents(Int64Bytes(values));
    } else {
      for (int64_t v : values) input->mutable_contents()->add_int64_contents(v);
    }
  }
  return request;
}

// Decodes for a model whose queue policy is the default one (no request may set a timeout).
Status Decode(inference::ModelInferRequest request, InferenceItem* item = nullptr) {
  PendingRequest pending;
  const Status status = DecodeInferRequest(EncoderSpec(), &request, &pending);
  if (item != nullptr) *item = std::move(pending.item);
  return status;
}

TEST(RequestCodecTest, RawAndTypedContentsDecodeToTheSameBytes) {
  InferenceItem raw_item, typed_item;
  ASSERT_TRUE(Decode(TokenRequest(2, 5, true), &raw_item).ok());
  ASSERT_TRUE(Decode(TokenRequest(2, 5, false), &typed_item).ok());
  EXPECT_EQ(raw_item.rows, 2);
  EXPECT_EQ(raw_item.length, 5);
  ASSERT_EQ(raw_item.inputs.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(raw_item.inputs[i].bytes, typed_item.inputs[i].bytes);
    EXPECT_EQ(raw_item.inputs[i].shape, (std::vector<int64_t>{2, 5}));
    EXPECT_EQ(raw_item.inputs[i].dtype, DataType::kInt64);
  }
  int64_t third_id = 0;
  std::memcpy(&third_id, raw_item.inputs[0].bytes.data() + 2 * sizeof(int64_t), sizeof(int64_t));
  EXPECT_EQ(third_id, 9);
  EXPECT_EQ(raw_item.outputs_wanted, (std::vector<bool>{true, true}));
}

TEST(RequestCodecTest, InputsMayComeInAnyOrder) {
  inference::ModelInferRequest request = TokenRequest(1, 3, true);
  request.mutable_inputs()->SwapElements(0, 1);
  request.mutable_raw_input_contents()->SwapElements(0, 1);
  InferenceItem item;
  ASSERT_TRUE(Decode(request, &item).ok());
  int64_t first_id = 0;
  std::memcpy(&first_id, item.inputs[0].bytes.data(), sizeof(int64_t));
  EXPECT_EQ(first_id, 7);  // spec order restored: input_ids first
}

TEST(RequestCodecTest, RequestedOutputsAreFiltered) {
  inference::ModelInferRequest request = TokenRequest(1, 3, true);
  request.add_outputs()->set_name("pooler_output");
  InferenceItem item;
  ASSERT_TRUE(Decode(request, &item).ok());
  EXPECT_EQ(item.outputs_wanted, (std::vector<bool>{false, true}));

  std::vector<HostTensor> outputs(2);
  outputs[1].dtype = DataType::kFp32;
  outputs[1].shape = {1, 256};
  outputs[1].bytes.assign(256 * 4, '\1');
  inference::ModelInferResponse response;
  EncodeInferResponse(EncoderSpec(), "3", request, std::move(outputs), &response);
  EXPECT_EQ(response.id(), "req-1");
  EXPECT_EQ(response.model_name(), "encoder");
  EXPECT_EQ(response.model_version(), "3");
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "pooler_output");
  EXPECT_EQ(response.outputs(0).datatype(), "FP32");
  EXPECT_EQ(std::vector<int64_t>(response.outputs(0).shape().begin(), response.outputs(0).shape().end()),
            (std::vector<int64_t>{1, 256}));
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0).size(), 1024u);
}

TEST(RequestCodecTest, ValuesOutsideTheConfiguredRangeAreRefusedNamingTheElement) {
  ModelSpec spec = EncoderSpec();
  spec.input_ranges.resize(2);
  spec.input_ranges[0] = ValueRange{0.0, 9.0};  // TokenRequest's ids are 7, 8, 9, 10, ...
  for (bool raw : {true, false}) {
    inference::ModelInferRequest request = TokenRequest(1, 4, raw);
    PendingRequest pending;
    Status status = DecodeInferRequest(spec, &request, &pending);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("inputs[0] 'input_ids': element 3 is outside the model's range [0, 9]"),
              std::string::npos)
        << status.message();

    request = TokenRequest(1, 3, raw);
    EXPECT_TRUE(DecodeInferRequest(spec, &request, &pending).ok());
  }
  // Only a lower bound, on an input whose values sit above it.
  spec.input_ranges[0].max.reset();
  spec.input_ranges[1].min = 2;
  inference::ModelInferRequest request = TokenRequest(1, 2, true);
  PendingRequest pending;
  Status status = DecodeInferRequest(spec, &request, &pending);
  EXPECT_NE(status.message().find("inputs[1] 'attention_mask': element 0 is outside the model's range [2, ]"),
            std::string::npos)
      << status.message();
}

struct BadRequestCase {
  std::string name;
  std::function<void(inference::ModelInferRequest*)> corrupt;
  std::string expected;  // must appear in the message
};

class BadRequestTest : public testing::TestWithParam<BadRequestCase> {};

TEST_P(BadRequestTest, InvalidArgumentNamingTheField) {
  inference::ModelInferRequest request = TokenRequest(2, 4, true);
  GetParam().corrupt(&request);
  Status status = Decode(request);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(GetParam().expected), std::string::npos) << status.message();
}

INSTANTIATE_TEST_SUITE_P(
    Fields, BadRequestTest,
    testing::Values(
        BadRequestCase{"UnknownInput",
                       [](auto* r) { r->mutable_inputs(1)->set_name("token_type_ids"); },
                       "inputs[1] 'token_type_ids': unknown input"},
        BadRequestCase{"MissingInput",
                       [](auto* r) {
                         r->mutable_inputs()->RemoveLast();
                         r->mutable_raw_input_contents()->RemoveLast();
                       },
                       "missing input 'attention_mask'"},
        BadRequestCase{"RepeatedInput", [](auto* r) { r->mutable_inputs(1)->set_name("input_ids"); },
                       "given twice"},
        BadRequestCase{"WrongDatatype", [](auto* r) { r->mutable_inputs(0)->set_datatype("INT32"); },
                       "datatype 'INT32', expected 'INT64'"},
        BadRequestCase{"WrongRank", [](auto* r) { r->mutable_inputs(0)->add_shape(1); }, "has rank 3"},
        BadRequestCase{"ZeroDim", [](auto* r) { r->mutable_inputs(0)->set_shape(1, 0); },
                       "dimension below 1"},
        BadRequestCase{"NegativeDim", [](auto* r) { r->mutable_inputs(0)->set_shape(0, -2); },
                       "dimension below 1"},
        BadRequestCase{"RawSizeMismatch",
                       [](auto* r) { r->mutable_raw_input_contents(0)->resize(3 * sizeof(int64_t)); },
                       "raw_input_contents[0] ('input_ids'): 24 bytes, expected 64"},
        BadRequestCase{"RawCountMismatch", [](auto* r) { r->mutable_raw_input_contents()->RemoveLast(); },
                       "raw_input_contents: 1 entries for 2 inputs"},
        BadRequestCase{"LengthsDisagree",
                       [](auto* r) {
                         r->mutable_inputs(1)->set_shape(1, 3);
                         r->mutable_raw_input_contents(1)->resize(6 * sizeof(int64_t));
                       },
                       "variable length 3 disagrees"},
        BadRequestCase{"RowsDisagree",
                       [](auto* r) {
                         r->mutable_inputs(1)->set_shape(0, 1);
                         r->mutable_raw_input_contents(1)->resize(4 * sizeof(int64_t));
                       },
                       "batch 1 disagrees with input 'input_ids'"},
        BadRequestCase{"BatchTooLarge",
                       [](auto* r) {
                         for (int i = 0; i < 2; ++i) {
                           r->mutable_inputs(i)->set_shape(0, 33);
                           r->mutable_raw_input_contents(i)->resize(33 * 4 * sizeof(int64_t));
                         }
                       },
                       "batch 33 exceeds max_batch_size 32"},
        BadRequestCase{"LengthTooLong",
                       [](auto* r) {
                         for (int i = 0; i < 2; ++i) {
                           r->mutable_inputs(i)->set_shape(1, 513);
                           r->mutable_raw_input_contents(i)->resize(2 * 513 * sizeof(int64_t));
                         }
                       },
                       "length 513 exceeds max_sequence_length 512"},
        BadRequestCase{"UnknownOutput", [](auto* r) { r->add_outputs()->set_name("logits"); },
                       "outputs[0] 'logits': unknown output"},
        BadRequestCase{"RepeatedOutput",
                       [](auto* r) {
                         r->add_outputs()->set_name("pooler_output");
                         r->add_outputs()->set_name("pooler_output");
                       },
                       "outputs[1] 'pooler_output': asked for twice"},
        BadRequestCase{"ReservedRequestParameter",
                       [](auto* r) { (*r->mutable_parameters())["triton_unknown"].set_int64_param(1); },
                       "parameters['triton_unknown']: keys starting with 'triton_' are reserved"},
        BadRequestCase{"SequenceParameters",
                       [](auto* r) {
                         (*r->mutable_parameters())["sequence_start"].set_bool_param(true);
                         (*r->mutable_parameters())["sequence_id"].set_int64_param(7);
                       },
                       "parameters['sequence_id']: sequence batching is not configured"},
        BadRequestCase{"InputParameter",
                       [](auto* r) {
                         (*r->mutable_inputs(1)->mutable_parameters())["shared_memory_region"]
                             .set_string_param("region0");
                       },
                       "inputs[1] 'attention_mask': parameters['shared_memory_region']"},
        BadRequestCase{"OutputParameter",
                       [](auto* r) {
                         auto* output = r->add_outputs();
                         output->set_name("pooler_output");
                         (*output->mutable_parameters())["classification"].set_int64_param(3);
                       },
                       "outputs[0] 'pooler_output': parameters['classification']"}),
    [](const testing::TestParamInfo<BadRequestCase>& info) { return info.param.name; });

// Triton's request parameters

// A valid request with `parameters` set on it, decoded.
Status DecodeWithParameters(const std::map<std::string, inference::InferParameter>& parameters,
                            PendingRequest* pending, std::vector<std::string>* custom = nullptr) {
  inference::ModelInferRequest request = TokenRequest(1, 4, true);
  for (const auto& [key, value] : parameters) (*request.mutable_parameters())[key] = value;
  return DecodeInferRequest(EncoderSpec(), &request, pending, custom);
}

inference::InferParameter Int64Parameter(int64_t value) {
  inference::InferParameter parameter;
  parameter.set_int64_param(value);
  return parameter;
}

inference::InferParameter BoolParameter(bool value) {
  inference::InferParameter parameter;
  parameter.set_bool_param(value);
  return parameter;
}

inference::InferParameter StringParameter(const std::string& value) {
  inference::InferParameter parameter;
  parameter.set_string_param(value);
  return parameter;
}

TEST(RequestCodecTest, TritonsReservedParametersAreTakenWithTheirMeaning) {
  PendingRequest pending;
  std::vector<std::string> custom;
  inference::InferParameter unsigned_priority;
  unsigned_priority.set_uint64_param(3);
  Status status = DecodeWithParameters({{"timeout", Int64Parameter(1500)},
                                        {"priority", unsigned_priority},
                                        {"triton_enable_empty_final_response", BoolParameter(true)}},
                                       &pending, &custom);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(pending.timeout_override_us, 1500);
  EXPECT_EQ(pending.priority, 3u);
  EXPECT_TRUE(custom.empty());
  PendingRequest plain;
  ASSERT_TRUE(DecodeWithParameters({{"priority", Int64Parameter(0)}}, &plain).ok());
  EXPECT_EQ(plain.timeout_override_us, 0);
  EXPECT_EQ(plain.priority, 0u);
}

// Triton's queue policy: a request's timeout counts only where the model allows overrides, and never
// lengthens the default (Triton clamps rather than refuses).
TEST(RequestCodecTest, TheQueuePolicyIgnoresOrClampsARequestsTimeoutAsTritonDoes) {
  const QueuePolicy fixed{5000, false};
  EXPECT_EQ(fixed.TimeoutFor(1000), 5000);
  QueuePolicy overridable{5000, true};
  EXPECT_EQ(overridable.TimeoutFor(1000), 1000);
  EXPECT_EQ(overridable.TimeoutFor(9000), 5000);
  EXPECT_EQ(overridable.TimeoutFor(0), 5000);
  const QueuePolicy unbounded{0, true};
  EXPECT_EQ(unbounded.TimeoutFor(60'000'000), 60'000'000);
}

TEST(RequestCodecTest, CustomParametersAreAcceptedAndListed) {
  PendingRequest pending;
  std::vector<std::string> custom;
  const Status status =
      DecodeWithParameters({{"temperature", StringParameter("0.5")}, {"my_flag", BoolParameter(true)}}, &pending,
                           &custom);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(custom, (std::vector<std::string>{"my_flag", "temperature"}));
}

TEST(RequestCodecTest, ReservedParametersGraphserveCannotHonourAreRefusedByName) {
  struct Case {
    std::map<std::string, inference::InferParameter> parameters;
    const char* expected;
  };
  const Case cases[] = {
      {{{"timeout", Int64Parameter(-1)}}, "parameters['timeout']: -1 us is negative"},
      {{{"timeout", StringParameter("1000")}}, "parameters['timeout']: expected an int64_param"},
      {{{"priority", Int64Parameter(-2)}}, "parameters['priority']: must not be negative"},
      {{{"priority", BoolParameter(true)}}, "parameters['priority']: expected an int64_param or uint64_param"},
      {{{"sequence_id", Int64Parameter(7)}}, "parameters['sequence_id']: sequence batching is not configured"},
      {{{"sequence_start", BoolParameter(true)}}, "parameters['sequence_start']"},
      {{{"triton_enable_empty_final_response", Int64Parameter(1)}},
       "parameters['triton_enable_empty_final_response']: expected a bool_param"},
      {{{"triton_something", BoolParameter(true)}}, "parameters['triton_something']: keys starting with 'triton_'"},
  };
  for (const Case& c : cases) {
    PendingRequest pending;
    const Status status = DecodeWithParameters(c.parameters, &pending);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.expected;
    EXPECT_NE(status.message().find(c.expected), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("model 'encoder'"), std::string::npos) << status.message();
  }
}

TEST(RequestCodecTest, TensorParametersAreStillRefused) {
  // `timeout` is a request parameter in Triton; on an input it means nothing and is refused.
  inference::ModelInferRequest request = TokenRequest(1, 4, true);
  (*request.mutable_inputs(0)->mutable_parameters())["timeout"].set_int64_param(100);
  PendingRequest pending;
  const Status status = DecodeInferRequest(EncoderSpec(), &request, &pending);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("inputs[0] 'input_ids': parameters['timeout']"), std::string::npos)
      << status.message();
}

// Triton's shared-memory extension

// Puts a tensor in region `region` at `offset`, `byte_size` bytes (the parameters Triton's clients set).
template <typename Tensor>
void InRegion(Tensor* tensor, const std::string& region, int64_t byte_size, int64_t offset = -1) {
  auto& parameters = *tensor->mutable_parameters();
  parameters["shared_memory_region"].set_string_param(region);
  parameters["shared_memory_byte_size"].set_int64_param(byte_size);
  if (offset >= 0) parameters["shared_memory_offset"].set_int64_param(offset);
}

// A 1 × 4 token request whose input_ids are in region "ids" at offset 64 (the ShmObject's bytes are
// replaced by the ids), and whose attention_mask stays raw.
struct SharedMemoryRequest {
  ShmObject object{4096};
  SharedMemoryRegistry registry;
  inference::ModelInferRequest request = TokenRequest(1, 4, true);
  std::string ids = request.raw_input_contents(0);

  SharedMemoryRequest() {
    object.Write(64, ids);
    EXPECT_TRUE(registry.Register("ids", object.key(), 0, 1024).ok());
    EXPECT_TRUE(registry.Register("outputs", object.key(), 2048, 2048).ok());
    InRegion(request.mutable_inputs(0), "ids", 32, 64);
    request.mutable_raw_input_contents()->DeleteSubrange(0, 1);
  }

  Status Decode(PendingRequest* pending, SharedMemoryTensors* tensors) {
    tensors->registry = &registry;
    return DecodeInferRequest(EncoderSpec(), &request, pending, nullptr, tensors);
  }

  // Asks for pooler_output in the first `byte_size` bytes of region "outputs", decodes, and answers
  // with 1024 bytes of 'p'; `meanwhile` runs between the two.
  Status AnswerPooledInRegion(int64_t byte_size, const std::function<void()>& meanwhile = [] {}) {
    auto* output = request.add_outputs();
    output->set_name("pooler_output");
    InRegion(output, "outputs", byte_size);
    PendingRequest pending;
    SharedMemoryTensors tensors;
    const Status status = Decode(&pending, &tensors);
    if (!status.ok()) return status;
    meanwhile();
    std::vector<HostTensor> outputs(2);
    outputs[1] = HostTensor{DataType::kFp32, {1, 256}, std::string(1024, 'p')};
    inference::ModelInferResponse response;
    return EncodeInferResponse(EncoderSpec(), "1", request, std::move(outputs), &response, &tensors);
  }
};

TEST(RequestCodecTest, AnInputInSharedMemoryDecodesToTheBytesOfItsRegion) {
  SharedMemoryRequest shm;
  PendingRequest pending;
  SharedMemoryTensors tensors;
  ASSERT_TRUE(shm.Decode(&pending, &tensors).ok());
  EXPECT_EQ(pending.item.inputs[0].bytes, shm.ids);
  EXPECT_EQ(pending.item.inputs[1].bytes, Int64Bytes({1, 1, 1, 1}));
  EXPECT_EQ(pending.item.rows, 1);
  EXPECT_EQ(pending.item.length, 4);
  EXPECT_TRUE(tensors.outputs.empty());

  // Both inputs in shared memory: no raw_input_contents at all.
  shm.object.Write(512, Int64Bytes({1, 1, 1, 1}));
  InRegion(shm.request.mutable_inputs(1), "ids", 32, 512);
  shm.request.clear_raw_input_contents();
  PendingRequest both;
  ASSERT_TRUE(shm.Decode(&both, &tensors).ok());
  EXPECT_EQ(both.item.inputs[1].bytes, Int64Bytes({1, 1, 1, 1}));
}

TEST(RequestCodecTest, OutputsInSharedMemoryAreWrittenThereAndAnsweredWithoutData) {
  SharedMemoryRequest shm;
  InRegion(shm.request.add_outputs(), "outputs", 1024, 1024);  // the region's second half
  shm.request.mutable_outputs(0)->set_name("last_hidden_state");
  shm.request.add_outputs()->set_name("pooler_output");
  PendingRequest pending;
  SharedMemoryTensors tensors;
  ASSERT_TRUE(shm.Decode(&pending, &tensors).ok());
  ASSERT_EQ(tensors.outputs.size(), 1u);
  EXPECT_EQ(tensors.outputs[0].output, 0u);
  EXPECT_EQ(tensors.outputs[0].requested, 0);
  EXPECT_EQ(tensors.outputs[0].span.size(), 1024u);

  std::vector<HostTensor> outputs(2);
  outputs[0] = HostTensor{DataType::kFp32, {1, 1, 256}, std::string(1024, 'h')};
  outputs[1] = HostTensor{DataType::kFp32, {1, 256}, std::string(1024, 'p')};
  inference::ModelInferResponse response;
  ASSERT_TRUE(EncodeInferResponse(EncoderSpec(), "1", shm.request, std::move(outputs), &response, &tensors).ok());
  EXPECT_EQ(shm.object.Read(2048 + 1024, 1024), std::string(1024, 'h'));
  ASSERT_EQ(response.outputs_size(), 2);
  ASSERT_EQ(response.raw_output_contents_size(), 2);
  EXPECT_EQ(response.raw_output_contents(0), "");
  EXPECT_EQ(response.outputs(0).parameters().at("shared_memory_region").string_param(), "outputs");
  EXPECT_EQ(response.outputs(0).parameters().at("shared_memory_byte_size").int64_param(), 1024);
  EXPECT_EQ(response.outputs(0).parameters().at("shared_memory_offset").int64_param(), 1024);
  EXPECT_EQ(std::vector<int64_t>(response.outputs(0).shape().begin(), response.outputs(0).shape().end()),
            (std::vector<int64_t>{1, 1, 256}));
  EXPECT_EQ(response.raw_output_contents(1), std::string(1024, 'p'));
  EXPECT_TRUE(response.outputs(1).parameters().empty());
}

TEST(RequestCodecTest, AnOutputLargerThanItsRegionIsRefusedAndWritesNothing) {
  SharedMemoryRequest shm;
  const Status status = shm.AnswerPooledInRegion(1000);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("outputs[0] 'pooler_output': the output is 1024 bytes (shape [1, 256] FP32), more "
                                  "than the 1000 of parameters['shared_memory_byte_size'] in region 'outputs'"),
            std::string::npos)
      << status.message();
  EXPECT_EQ(shm.object.Read(2048, 1000), ShmPattern(2048, 1000));
}

TEST(RequestCodecTest, AnOutputRegionUnregisteredMeanwhileIsStillWritten) {
  SharedMemoryRequest shm;
  ASSERT_TRUE(shm.AnswerPooledInRegion(1024, [&] { shm.registry.Unregister(""); }).ok());
  EXPECT_EQ(shm.object.Read(2048, 1024), std::string(1024, 'p'));
}

// A CUDA region (device memory of the stand-in driver, fake_cuda.cpp) serves a request as a system
// one does: the input copied out of it, the output copied into it.
TEST(RequestCodecTest, ACudaRegionServesInputsAndOutputsAsASystemOneDoes) {
  std::string why;
  CudaSharedMemoryOptions cuda{CudaDriver::Open(FAKE_CUDA_LIBRARY, &why), ""};
  ASSERT_NE(cuda.driver, nullptr) << why;
  SharedMemoryRegistry registry({}, cuda);
  ASSERT_TRUE(registry.RegisterCuda("gpu", FakeIpcHandle(8192), 1, 4096).ok());
  inference::ModelInferRequest request = TokenRequest(1, 4, true);
  const std::string ids = request.raw_input_contents(0);
  SharedMemorySpan ids_span;
  ASSERT_TRUE(registry.Span("gpu", 64, ids.size(), &ids_span).ok());
  ASSERT_TRUE(ids_span.Write(ids).ok());
  InRegion(request.mutable_inputs(0), "gpu", 32, 64);
  request.mutable_raw_input_contents()->DeleteSubrange(0, 1);
  auto* output = request.add_outputs();
  output->set_name("pooler_output");
  InRegion(output, "gpu", 1024, 2048);

  PendingRequest pending;
  SharedMemoryTensors tensors{&registry, {}};
  ASSERT_TRUE(DecodeInferRequest(EncoderSpec(), &request, &pending, nullptr, &tensors).ok());
  EXPECT_EQ(pending.item.inputs[0].bytes, ids);
  std::vector<HostTensor> outputs(2);
  outputs[1] = HostTensor{DataType::kFp32, {1, 256}, std::string(1024, 'p')};
  inference::ModelInferResponse response;
  ASSERT_TRUE(EncodeInferResponse(EncoderSpec(), "1", request, std::move(outputs), &response, &tensors).ok());
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0), "");
  SharedMemorySpan pooled;
  ASSERT_TRUE(registry.Span("gpu", 2048, 1024, &pooled).ok());
  std::string bytes;
  ASSERT_TRUE(pooled.ReadInto(&bytes).ok());
  EXPECT_EQ(bytes, std::string(1024, 'p'));
}

struct SharedMemoryRefusal {
  std::string name;
  std::function<void(inference::ModelInferRequest*)> change;
  StatusCode code;
  std::string expected;
};

class SharedMemoryRefusalTest : public testing::TestWithParam<SharedMemoryRefusal> {};

TEST_P(SharedMemoryRefusalTest, NamesTheParameter) {
  SharedMemoryRequest shm;
  GetParam().change(&shm.request);
  PendingRequest pending;
  SharedMemoryTensors tensors;
  const Status status = shm.Decode(&pending, &tensors);
  EXPECT_EQ(status.code(), GetParam().code) << status.ToString();
  EXPECT_NE(status.message().find(GetParam().expected), std::string::npos) << status.message();
}

INSTANTIATE_TEST_SUITE_P(
    RequestCodecTest, SharedMemoryRefusalTest,
    testing::Values(
        SharedMemoryRefusal{"UnknownRegion", [](auto* r) { InRegion(r->mutable_inputs(0), "nowhere", 32); },
                            StatusCode::kNotFound,
                            "inputs[0] 'input_ids': parameters['shared_memory_region']: no shared-memory "
                            "region 'nowhere' is registered"},
        SharedMemoryRefusal{
            "ByteSizeOtherThanTheTensors", [](auto* r) { InRegion(r->mutable_inputs(0), "ids", 40, 64); },
            StatusCode::kInvalidArgument,
            "inputs[0] 'input_ids': parameters['shared_memory_byte_size']: 40 bytes, expected 32 for "
            "shape [1, 4] INT64"},
        SharedMemoryRefusal{
            "PastTheRegionsEnd", [](auto* r) { InRegion(r->mutable_inputs(0), "ids", 32, 1000); },
            StatusCode::kInvalidArgument,
            "parameters['shared_memory_region']: offset 1000 + byte_size 32 pass the end of region "
            "'ids' (1024 bytes)"},
        SharedMemoryRefusal{
            "RegionWithoutByteSize",
            [](auto* r) { r->mutable_inputs(0)->mutable_parameters()->erase("shared_memory_byte_size"); },
            StatusCode::kInvalidArgument,
            "parameters['shared_memory_byte_size']: required with parameters['shared_memory_region']"},
        SharedMemoryRefusal{"OffsetWithoutRegion",
                            [](auto* r) {
                              (*r->mutable_inputs(1)->mutable_parameters())["shared_memory_offset"].set_int64_param(8);
                            },
                            StatusCode::kInvalidArgument,
                            "inputs[1] 'attention_mask': parameters['shared_memory_offset']: given without "
                            "parameters['shared_memory_region']"},
        SharedMemoryRefusal{"RegionNotAString",
                            [](auto* r) {
                              (*r->mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_int64_param(1);
                            },
                            StatusCode::kInvalidArgument,
                            "parameters['shared_memory_region']: expected a string_param"},
        SharedMemoryRefusal{"NegativeOffset",
                            [](auto* r) {
                              (*r->mutable_inputs(0)->mutable_parameters())["shared_memory_offset"].set_int64_param(-8);
                            },
                            StatusCode::kInvalidArgument,
                            "parameters['shared_memory_offset']: expected an int64_param of at least 0"},
        SharedMemoryRefusal{"ByteSizeNotAnInt64",
                            [](auto* r) {
                              (*r->mutable_inputs(0)->mutable_parameters())["shared_memory_byte_size"]
                                  .set_uint64_param(32);
                            },
                            StatusCode::kInvalidArgument,
                            "parameters['shared_memory_byte_size']: expected an int64_param of at least 0"},
        SharedMemoryRefusal{"ContentsAsWell",
                            [](auto* r) { r->mutable_inputs(0)->mutable_contents()->add_int64_contents(1); },
                            StatusCode::kInvalidArgument,
                            "inputs[0] 'input_ids': data given both in contents and in shared memory"},
        SharedMemoryRefusal{"RawEntryForTheInputInSharedMemory",
                            [](auto* r) {
                              r->add_raw_input_contents(Int64Bytes({7, 8, 9, 10}));
                            },
                            StatusCode::kInvalidArgument,
                            "raw_input_contents: 2 entries for 1 inputs outside shared memory"},
        SharedMemoryRefusal{"OutputInAnUnknownRegion",
                            [](auto* r) {
                              auto* output = r->add_outputs();
                              output->set_name("pooler_output");
                              InRegion(output, "nowhere", 1024);
                            },
                            StatusCode::kNotFound,
                            "outputs[0] 'pooler_output': parameters['shared_memory_region']"},
        SharedMemoryRefusal{"OtherOutputParameters",
                            [](auto* r) {
                              auto* output = r->add_outputs();
                              output->set_name("pooler_output");
                              InRegion(output, "outputs", 1024);
                              (*output->mutable_parameters())["classification"].set_int64_param(3);
                            },
                            StatusCode::kInvalidArgument,
                            "outputs[0] 'pooler_output': parameters['classification']"}),
    [](const testing::TestParamInfo<SharedMemoryRefusal>& info) { return info.param.name; });

TEST(RequestCodecTest, TypedContentsCountMismatch) {
  inference::ModelInferRequest request = TokenRequest(2, 4, false);
  request.mutable_inputs(0)->mutable_contents()->mutable_int64_contents()->RemoveLast();
  Status status = Decode(request);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("contents hold 7 values, expected 8"), std::string::npos)
      << status.message();
}

void ExpectInvalidArgument(const Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(message), std::string::npos) << status.message();
}

// Values in a contents field the input's datatype does not read would be silently left out.
TEST(RequestCodecTest, TypedContentsInAnotherFieldAreRefused) {
  inference::ModelInferRequest request = TokenRequest(2, 4, false);
  request.mutable_inputs(0)->mutable_contents()->add_int_contents(3);
  ExpectInvalidArgument(Decode(request), "inputs[0] 'input_ids'.contents: values outside int64_contents, the "
                                         "one field a INT64 input reads");
}

// A value the input's type cannot hold is refused, never truncated (300 became 44 for UINT8).
TEST(RequestCodecTest, TypedValuesOutsideTheInputsTypeAreRefused) {
  ModelSpec spec = EncoderSpec();
  spec.inputs[1].dtype = DataType::kUint8;
  inference::ModelInferRequest request = TokenRequest(1, 2, false);
  request.mutable_inputs(1)->set_datatype("UINT8");
  request.mutable_inputs(1)->mutable_contents()->clear_int64_contents();
  request.mutable_inputs(1)->mutable_contents()->add_uint_contents(1);
  request.mutable_inputs(1)->mutable_contents()->add_uint_contents(300);
  PendingRequest pending;
  ExpectInvalidArgument(DecodeInferRequest(spec, &request, &pending),
                        "inputs[1] 'attention_mask'.contents.uint_contents: element 1 (300) is not a UINT8 value");
}

TEST(RequestCodecTest, NoInputs) {
  inference::ModelInferRequest request;
  request.set_model_name("encoder");
  Status status = Decode(request);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("missing input 'input_ids'"), std::string::npos) << status.message();
}

// A ragged model (Triton's ragged batching): 8 rows, 128 tokens a row, 512 tokens a batch.
ModelSpec RaggedSpec() {
  inference::ModelConfig config;
  Status status = ParseModelConfig(R"pb(
                                     name: "ragged"
                                     platform: "pytorch_libtorch"
                                     max_batch_size: 8
                                     max_sequence_length: 128
                                     input {
                                       name: "input_ids"
                                       data_type: TYPE_INT64
                                       dims: [ -1 ]
                                       allow_ragged_batch: true
                                     }
                                     batch_input {
                                       kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO
                                       target_name: "cu_seqlens"
                                       data_type: TYPE_INT32
                                       source_input: "input_ids"
                                     }
                                     output {
                                       name: "pooled"
                                       data_type: TYPE_FP32
                                       dims: [ 4 ]
                                     }
                                     buckets { max_batch_tokens: 512 }
                                   )pb",
                                   "ragged", &config);
  EXPECT_TRUE(status.ok()) << status.ToString();
  ModelSpec spec;
  status = ModelSpecFromConfig(config, &spec);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return spec;
}

// input_ids of rows × length, raw; `offsets` adds a cu_seqlens of the client's own.
Status DecodeRagged(int64_t rows, int64_t length, bool offsets = false) {
  inference::ModelInferRequest request;
  request.set_model_name("ragged");
  auto* input = request.add_inputs();
  input->set_name("input_ids");
  input->set_datatype("INT64");
  input->add_shape(rows);
  input->add_shape(length);
  request.add_raw_input_contents(
      std::string(static_cast<size_t>(std::max<int64_t>(rows * length, 0)) * 8, '\0'));
  if (offsets) {
    auto* made = request.add_inputs();
    made->set_name("cu_seqlens");
    made->set_datatype("INT32");
    made->add_shape(1);
    made->add_shape(2);
    request.add_raw_input_contents(std::string(2 * 4, '\0'));
  }
  PendingRequest pending;
  return DecodeInferRequest(RaggedSpec(), &request, &pending);
}

TEST(RequestCodecTest, ARaggedRequestIsBoundedByItsRowsRowLengthAndTheBatchsTokens) {
  EXPECT_TRUE(DecodeRagged(1, 1).ok());
  EXPECT_TRUE(DecodeRagged(1, 128).ok());  // max_sequence_length
  EXPECT_TRUE(DecodeRagged(4, 128).ok());  // exactly the 512-token budget
  EXPECT_TRUE(DecodeRagged(8, 64).ok());   // max_batch_size rows, exactly the budget
  EXPECT_TRUE(DecodeRagged(8, 1).ok());    // many rows of one token
  const std::vector<std::pair<Status, std::string>> refused = {
      {DecodeRagged(5, 103), "5 rows of 103 tokens exceed buckets.max_batch_tokens 512"},
      {DecodeRagged(8, 65), "8 rows of 65 tokens exceed buckets.max_batch_tokens 512"},
      {DecodeRagged(1, 0), "has a dimension below 1"},
      {DecodeRagged(0, 4), "has a dimension below 1"},
      {DecodeRagged(9, 1), "batch 9 exceeds max_batch_size 8"},
      {DecodeRagged(1, 129), "length 129 exceeds max_sequence_length 128"},
      {DecodeRagged(1, 4, /*offsets=*/true), "'cu_seqlens': a batch input, made by the server"}};
  for (const auto& [status, fragment] : refused) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << fragment;
    EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
  }
}

ModelSpec CnnSpec() {
  ModelSpec spec;
  Status status = ModelSpecFromConfig(fixed_shape_test::CnnConfig(), &spec);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return spec;
}

// An FP32 image request of `rows` × [channels, height, width], raw.
inference::ModelInferRequest ImageRequest(const std::vector<int64_t>& shape) {
  inference::ModelInferRequest request;
  request.set_model_name("cnn");
  auto* input = request.add_inputs();
  input->set_name("image");
  input->set_datatype("FP32");
  int64_t elements = 1;
  for (int64_t dim : shape) {
    input->add_shape(dim);
    elements *= dim;
  }
  request.add_raw_input_contents(std::string(static_cast<size_t>(elements) * sizeof(float), '\0'));
  return request;
}

TEST(RequestCodecTest, FixedShapeRequestsGetTheFixedLength) {
  inference::ModelInferRequest request = ImageRequest({3, 3, 224, 224});
  PendingRequest pending;
  const Status status = DecodeInferRequest(CnnSpec(), &request, &pending);
  ASSERT_TRUE(status.ok()) << status.ToString();
  const InferenceItem& item = pending.item;
  EXPECT_EQ(item.rows, 3);
  EXPECT_EQ(item.length, kFixedShapeLength);
  EXPECT_EQ(item.inputs[0].shape, (std::vector<int64_t>{3, 3, 224, 224}));
  EXPECT_EQ(item.inputs[0].bytes.size(), 3u * 3 * 224 * 224 * sizeof(float));
}

TEST(RequestCodecTest, FixedShapeRequestWithOtherDimsNamesTheInputAndDims) {
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{1, 3, 224, 200}, {2, 1, 224, 224}, {1, 3, 224}}) {
    inference::ModelInferRequest request = ImageRequest(shape);
    PendingRequest pending;
    const Status status = DecodeInferRequest(CnnSpec(), &request, &pending);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << ShapeToString(shape);
    EXPECT_NE(status.message().find("inputs[0] 'image': shape " + ShapeToString(shape)),
              std::string::npos)
        << status.message();
    EXPECT_NE(status.message().find("expected [batch, 3, 224, 224]"), std::string::npos)
        << status.message();
  }
}

TEST(RequestCodecTest, FixedShapeMetadataHasNoVariableDimBeyondTheBatch) {
  inference::ModelMetadataResponse metadata;
  FillModelMetadata(CnnSpec(), "1", &metadata);
  ASSERT_EQ(metadata.inputs_size(), 1);
  EXPECT_EQ(std::vector<int64_t>(metadata.inputs(0).shape().begin(), metadata.inputs(0).shape().end()),
            (std::vector<int64_t>{-1, 3, 224, 224}));
  EXPECT_EQ(std::vector<int64_t>(metadata.outputs(0).shape().begin(), metadata.outputs(0).shape().end()),
            (std::vector<int64_t>{-1, 1000}));
}

TEST(RequestCodecTest, MetadataPutsBatchFirstAndMarksVariableDims) {
  inference::ModelMetadataResponse metadata;
  FillModelMetadata(EncoderSpec(), "2", &metadata);
  EXPECT_EQ(metadata.name(), "encoder");
  EXPECT_EQ(std::vector<std::string>(metadata.versions().begin(), metadata.versions().end()),
            (std::vector<std::string>{"2"}));
  EXPECT_EQ(metadata.platform(), "graphserve_encoder");
  ASSERT_EQ(metadata.inputs_size(), 2);
  EXPECT_EQ(metadata.inputs(0).datatype(), "INT64");
  EXPECT_EQ(std::vector<int64_t>(metadata.inputs(0).shape().begin(), metadata.inputs(0).shape().end()),
            (std::vector<int64_t>{-1, -1}));
  ASSERT_EQ(metadata.outputs_size(), 2);
  EXPECT_EQ(std::vector<int64_t>(metadata.outputs(0).shape().begin(), metadata.outputs(0).shape().end()),
            (std::vector<int64_t>{-1, -1, 256}));
  EXPECT_EQ(std::vector<int64_t>(metadata.outputs(1).shape().begin(), metadata.outputs(1).shape().end()),
            (std::vector<int64_t>{-1, 256}));
}

}  // namespace
}  // namespace graphserve
