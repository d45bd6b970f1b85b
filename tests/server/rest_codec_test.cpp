// The REST binding's translation to and from the gRPC messages: JSON tensors (nested or flat), the
// binary tensor data extension, parameters passed on for gRPC to judge, every refusal naming its
// field, and protobuf → JSON with 64-bit integers as numbers.
#include "graphserve/server/http/rest_codec.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <vector>

#include "model_config.pb.h"

namespace graphserve {
namespace {

using nlohmann::json;

template <typename T>
std::string Raw(const std::vector<T>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

Status Parse(const std::string& body, inference::ModelInferRequest* request, RestOutputFormat* format,
             std::optional<size_t> json_length = std::nullopt) {
  return ParseRestInferRequest(body, json_length, "m", "2", request, format);
}

// The refusal's message for `body`; fails the test when it is accepted or not INVALID_ARGUMENT.
std::string Refusal(const std::string& body, std::optional<size_t> json_length = std::nullopt) {
  inference::ModelInferRequest request;
  RestOutputFormat format;
  const Status status = Parse(body, &request, &format, json_length);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << body;
  return status.message();
}

TEST(RestCodecTest, JsonTensorsNestedOrFlatBecomeRawInputs) {
  inference::ModelInferRequest request;
  RestOutputFormat format;
  const Status status = Parse(R"({"id": "r1", "inputs": [
      {"name": "ids", "datatype": "INT64", "shape": [2, 2], "data": [[1, 2], [3, -4]]},
      {"name": "x", "datatype": "FP32", "shape": [3], "data": [0.5, 1, -2.25]},
      {"name": "b", "datatype": "BOOL", "shape": [2], "data": [true, false]},
      {"name": "u", "datatype": "UINT8", "shape": [1, 2], "data": [0, 255]}]})",
                              &request, &format);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(request.model_name(), "m");
  EXPECT_EQ(request.model_version(), "2");
  EXPECT_EQ(request.id(), "r1");
  ASSERT_EQ(request.inputs_size(), 4);
  ASSERT_EQ(request.raw_input_contents_size(), 4);
  EXPECT_EQ(request.inputs(0).name(), "ids");
  EXPECT_EQ(request.inputs(0).datatype(), "INT64");
  EXPECT_EQ(std::vector<int64_t>(request.inputs(0).shape().begin(), request.inputs(0).shape().end()),
            (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(request.raw_input_contents(0), Raw<int64_t>({1, 2, 3, -4}));
  EXPECT_EQ(request.raw_input_contents(1), Raw<float>({0.5f, 1.0f, -2.25f}));
  EXPECT_EQ(request.raw_input_contents(2), std::string("\x01\x00", 2));
  EXPECT_EQ(request.raw_input_contents(3), std::string("\x00\xff", 2));
  EXPECT_FALSE(format.binary_by_default);
}

TEST(RestCodecTest, BinaryInputsAreTakenInOrderAfterTheHeader) {
  const std::string header = R"({"inputs": [
      {"name": "a", "datatype": "INT32", "shape": [2], "parameters": {"binary_data_size": 8}},
      {"name": "j", "datatype": "INT32", "shape": [1], "data": [7]},
      {"name": "c", "datatype": "FP16", "shape": [1, 1], "parameters": {"binary_data_size": 2}}]})";
  const std::string body = header + Raw<int32_t>({5, 6}) + std::string("\x00\x3c", 2);
  inference::ModelInferRequest request;
  RestOutputFormat format;
  const Status status = Parse(body, &request, &format, header.size());
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(request.raw_input_contents_size(), 3);
  EXPECT_EQ(request.raw_input_contents(0), Raw<int32_t>({5, 6}));
  EXPECT_EQ(request.raw_input_contents(1), Raw<int32_t>({7}));
  EXPECT_EQ(request.raw_input_contents(2), std::string("\x00\x3c", 2));
  // binary_data_size is the extension's, not a parameter for the gRPC handler to refuse.
  EXPECT_TRUE(request.inputs(0).parameters().empty());
}

TEST(RestCodecTest, ParametersGraphserveDoesNotConsumeArePassedOnForGrpcToJudge) {
  inference::ModelInferRequest request;
  RestOutputFormat format;
  const Status status = Parse(R"({
      "parameters": {"binary_data_output": true, "priority": 3, "timeout": 5000, "tag": "x", "w": 0.5},
      "inputs": [{"name": "a", "datatype": "INT64", "shape": [1], "data": [1], "parameters": {"k": false}}],
      "outputs": [{"name": "o1", "parameters": {"binary_data": false, "classification": 2}}, {"name": "o2"}]})",
                              &request, &format);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(request.parameters().count("binary_data_output"), 0u);
  EXPECT_EQ(request.parameters().at("priority").int64_param(), 3);
  EXPECT_EQ(request.parameters().at("timeout").int64_param(), 5000);
  EXPECT_EQ(request.parameters().at("tag").string_param(), "x");
  EXPECT_EQ(request.parameters().at("w").double_param(), 0.5);
  EXPECT_FALSE(request.inputs(0).parameters().at("k").bool_param());
  ASSERT_EQ(request.outputs_size(), 2);
  EXPECT_EQ(request.outputs(0).parameters().count("binary_data"), 0u);
  EXPECT_EQ(request.outputs(0).parameters().at("classification").int64_param(), 2);
  // o1 chose JSON; o2 follows binary_data_output.
  EXPECT_FALSE(format.IsBinary("o1"));
  EXPECT_TRUE(format.IsBinary("o2"));
}

// A REST call's deadline: its `timeout` parameter as parsed from the body, capped by the server's
// (--http-infer-deadline-ms), which is also the deadline of a call without one.
TEST(RestCodecTest, TheTimeoutParameterIsTheCallsDeadlineCappedByTheServers) {
  const auto deadline = [](const std::string& parameters, int64_t longest_us) {
    inference::ModelInferRequest request;
    RestOutputFormat format;
    const Status status =
        Parse(R"({"parameters": )" + parameters +
                  R"(, "inputs": [{"name": "a", "datatype": "INT64", "shape": [1], "data": [1]}]})",
              &request, &format);
    EXPECT_TRUE(status.ok()) << parameters << ": " << status.message();
    return RestInferDeadlineUs(request, longest_us);
  };
  EXPECT_EQ(deadline(R"({"timeout": 500000})", 60'000'000), 500'000);
  EXPECT_EQ(deadline(R"({"timeout": 60000000})", 60'000'000), 60'000'000);
  EXPECT_EQ(deadline(R"({"timeout": 60000001})", 60'000'000), 60'000'000);  // past the cap: the cap
  EXPECT_EQ(deadline("{}", 60'000'000), 60'000'000);                        // none: the server's
  EXPECT_EQ(deadline(R"({"timeout": 0})", 60'000'000), 60'000'000);         // Triton's "none"
  // Refused by the gRPC service, naming the parameter; here they only give no deadline of their own.
  EXPECT_EQ(deadline(R"({"timeout": -5})", 60'000'000), 60'000'000);
  EXPECT_EQ(deadline(R"({"timeout": "5000"})", 60'000'000), 60'000'000);
  // No server deadline: the client's alone, up to a day.
  EXPECT_EQ(deadline("{}", 0), 0);
  EXPECT_EQ(deadline(R"({"timeout": 1500})", 0), 1500);
  EXPECT_EQ(deadline(R"({"timeout": 9223372036854775807})", 0), kLongestRestDeadlineUs);
}

// A value quoted in a refusal is described, not dumped: dumping recurses, and 100,000 brackets in
// one ~200 KB body overflowed the handler thread's stack and killed the server.
TEST(RestCodecTest, DeeplyNestedValuesAreRefusedWithoutQuotingThem) {
  const int depth = 100000;
  const std::string nested = std::string(depth, '[') + std::string(depth, ']');
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [)" + nested + "]}]}"),
            "inputs[0].shape: dimensions must be non-negative integers, got an array");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [1], "data": [{"x": )" + nested +
                    "}]}]}"),
            "inputs[0].data: element 0 (an object) is not a INT64 value");
  const std::string long_string(1000, 'x');
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [1], "data": [")" + long_string +
                    "\"]}]}"),
            "inputs[0].data: element 0 (\"" + std::string(39, 'x') + "...) is not a INT64 value");
}

TEST(RestCodecTest, EveryMalformedRequestIsRefusedNamingTheField) {
  EXPECT_EQ(Refusal("{\"inputs\": [}"), "body: not valid JSON (at byte 13)");
  EXPECT_EQ(Refusal("[1]"), "body: expected a JSON object");
  EXPECT_EQ(Refusal(R"({"input": []})"), "body.input: not a field of the KServe v2 REST request");
  EXPECT_EQ(Refusal(R"({"inputs": {}})"), "inputs: expected an array");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [2], "data": [1]}]})"),
            "inputs[0].data: 1 values, but shape [2] has 2");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [1], "data": ["1"]}]})"),
            "inputs[0].data: element 0 (\"1\") is not a INT64 value");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "UINT8", "shape": [1], "data": [256]}]})"),
            "inputs[0].data: element 0 (256) is not a UINT8 value");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "INT32", "shape": [1], "data": [1.5]}]})"),
            "inputs[0].data: element 0 (1.5) is not a INT32 value");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [-1], "data": []}]})"),
            "inputs[0].shape: dimensions must be non-negative integers, got -1");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [1048576, 1048576, 4], "data": []}]})"),
            "inputs[0].shape: [1048576,1048576,4] has too many elements");
  EXPECT_EQ(Refusal(R"({"inputs": [{"datatype": "INT64", "shape": [1], "data": [1]}]})"), "inputs[0].name: required");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [1], "data": [1],
                                    "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 8}}]})"),
            "inputs[0]: give one of data, parameters['binary_data_size'] and parameters['shared_memory_region']");
  EXPECT_EQ(Refusal(R"({"outputs": [{"name": "o", "parameters": {"binary_data": true, "shared_memory_region": "r",
                                                                  "shared_memory_byte_size": 8}}]})"),
            "outputs[0].parameters['binary_data']: an output in shared memory (parameters['shared_memory_region']) "
            "has no data in the response");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "INT64", "data": [1]}]})"), "inputs[0].shape: required");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "BYTES", "shape": [1], "data": ["x"]}]})"),
            "inputs[0].datatype: 'BYTES' is not a datatype graphserve serves");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "FP16", "shape": [1], "data": [1.0]}]})"),
            "inputs[0].data: FP16 tensors have no JSON form; send them as binary data");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [1]}]})"),
            "inputs[0].data: required (or parameters['binary_data_size'] with the binary data extension, or "
            "parameters['shared_memory_region'] with the shared-memory one)");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [1], "dims": [1]}]})"),
            "inputs[0].dims: not a field of the KServe v2 REST request");
  EXPECT_EQ(Refusal(R"({"parameters": {"binary_data_output": 1}})"),
            "parameters['binary_data_output']: expected true or false");
  EXPECT_EQ(Refusal(R"({"parameters": {"p": [1]}})"), "parameters['p']: expected a bool, a number or a string");
  EXPECT_EQ(Refusal(R"({"outputs": [{"name": "o", "parameters": {"binary_data": "yes"}}]})"),
            "outputs[0].parameters['binary_data']: expected true or false");

  // The binary data extension: sizes must agree with the shapes and with the body.
  const std::string header =
      R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [2], "parameters": {"binary_data_size": 16}}]})";
  EXPECT_EQ(Refusal(header + std::string(8, '\0'), header.size()),
            "inputs[0].parameters['binary_data_size']: 16 bytes, but only 8 bytes of binary data are left "
            "after the JSON header");
  EXPECT_EQ(Refusal(header + std::string(20, '\0'), header.size()),
            "body: 20 bytes follow the JSON header, but the inputs' binary_data_size add up to 16");
  EXPECT_EQ(Refusal(header, header.size() + 1),
            "Inference-Header-Content-Length: " + std::to_string(header.size() + 1) + " is more than the body's " +
                std::to_string(header.size()) + " bytes");
  const std::string wrong_size =
      R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [2], "parameters": {"binary_data_size": 12}}]})";
  EXPECT_EQ(Refusal(wrong_size + std::string(12, '\0'), wrong_size.size()),
            "inputs[0].parameters['binary_data_size']: 12 bytes, but shape [2] of INT64 is 16");
  const std::string both =
      R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [1], "data": [1], "parameters": {"binary_data_size": 8}}]})";
  EXPECT_EQ(Refusal(both + std::string(8, '\0'), both.size()),
            "inputs[0]: give one of data, parameters['binary_data_size'] and parameters['shared_memory_region']");
}

// Triton's shared-memory extension: the parameters go on to gRPC, which reads the region; the inputs in
// shared memory have no raw_input_contents entry.
TEST(RestCodecTest, SharedMemoryTensorsPassTheirParametersOnWithoutData) {
  inference::ModelInferRequest request;
  RestOutputFormat format;
  ASSERT_TRUE(Parse(R"({"inputs": [
      {"name": "a", "datatype": "INT64", "shape": [2],
       "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 16, "shared_memory_offset": 8}},
      {"name": "b", "datatype": "INT64", "shape": [1], "data": [5]}],
    "outputs": [{"name": "o", "parameters": {"shared_memory_region": "out", "shared_memory_byte_size": 64}}]})",
                    &request, &format)
                  .ok());
  ASSERT_EQ(request.inputs_size(), 2);
  const auto& a = request.inputs(0).parameters();
  EXPECT_EQ(a.at("shared_memory_region").string_param(), "in");
  EXPECT_EQ(a.at("shared_memory_byte_size").int64_param(), 16);
  EXPECT_EQ(a.at("shared_memory_offset").int64_param(), 8);
  ASSERT_EQ(request.raw_input_contents_size(), 1);
  EXPECT_EQ(request.raw_input_contents(0), Raw<int64_t>({5}));
  EXPECT_EQ(request.outputs(0).parameters().at("shared_memory_region").string_param(), "out");
  EXPECT_EQ(request.outputs(0).parameters().at("shared_memory_byte_size").int64_param(), 64);

  // The answer: an output in shared memory has neither data nor parameters (Triton's C++ client reads
  // any as binary data's), even where the request asks for binary outputs.
  inference::ModelInferResponse response;
  response.set_model_name("m");
  auto* output = response.add_outputs();
  output->set_name("o");
  output->set_datatype("FP32");
  output->add_shape(4);
  (*output->mutable_parameters())["shared_memory_region"].set_string_param("out");
  (*output->mutable_parameters())["shared_memory_byte_size"].set_int64_param(64);
  response.add_raw_output_contents();
  format.binary_by_default = true;
  const RestInferBody encoded = EncodeRestInferResponse(response, format);
  EXPECT_FALSE(encoded.json_length.has_value());
  const json body = json::parse(encoded.body);
  EXPECT_EQ(body["outputs"][0], json({{"name", "o"}, {"datatype", "FP32"}, {"shape", {4}}}));
  EXPECT_EQ(body["outputs"][0]["shape"], json::array({4}));
}

TEST(RestCodecTest, SharedMemoryRegistrationsAndStatusesTravelAsTritonsRestBindingHasThem) {
  inference::SystemSharedMemoryRegisterRequest request;
  ASSERT_TRUE(ParseSystemSharedMemoryRegister(R"({"key": "/k", "offset": 8, "byte_size": 64})", &request).ok());
  EXPECT_EQ(request.key(), "/k");
  EXPECT_EQ(request.offset(), 8u);
  EXPECT_EQ(request.byte_size(), 64u);
  request.Clear();
  ASSERT_TRUE(ParseSystemSharedMemoryRegister(R"({"key": "/k", "byte_size": 64})", &request).ok());
  EXPECT_EQ(request.offset(), 0u);
  for (const auto& [body, expected] : std::vector<std::pair<std::string, std::string>>{
           {"", "key: required"},
           {R"({"key": "/k"})", "byte_size: required"},
           {R"({"key": 3, "byte_size": 64})", "key: expected a string"},
           {R"({"key": "/k", "byte_size": -1})", "byte_size: expected a byte count"},
           {R"({"key": "/k", "byte_size": 64, "offset": 1.5})", "offset: expected a byte count"},
           {R"({"key": "/k", "byte_size": 64, "device_id": 0})", "body.device_id: not a field"}}) {
    const Status status = ParseSystemSharedMemoryRegister(body, &request);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << body;
    EXPECT_NE(status.message().find(expected), std::string::npos) << status.message();
  }

  inference::SystemSharedMemoryStatusResponse system;
  EXPECT_EQ(json::parse(SystemSharedMemoryStatusJson(system)), json::array());
  for (const char* name : {"b", "a"}) {
    auto& region = (*system.mutable_regions())[name];
    region.set_name(name);
    region.set_key(std::string("/") + name);
    region.set_offset(4);
    region.set_byte_size(uint64_t{1} << 40);
  }
  EXPECT_EQ(json::parse(SystemSharedMemoryStatusJson(system)),
            json::parse(R"([{"name": "a", "key": "/a", "offset": 4, "byte_size": 1099511627776},
                            {"name": "b", "key": "/b", "offset": 4, "byte_size": 1099511627776}])"));
  EXPECT_EQ(json::parse(CudaSharedMemoryStatusJson(inference::CudaSharedMemoryStatusResponse())), json::array());
}

// Triton's CUDA register body: the handle in base64 under raw_handle.b64, decoded strictly (the bytes
// are a client's and checked again by the service); and the CUDA status array.
TEST(RestCodecTest, CudaSharedMemoryRegisterBodiesAndStatus) {
  inference::CudaSharedMemoryRegisterRequest request;
  // "AAECAw==" is 00 01 02 03; "/+/+" is ff ef fe; "YWI=" is "ab".
  ASSERT_TRUE(ParseCudaSharedMemoryRegister(
                  R"({"raw_handle": {"b64": "AAECAw=="}, "device_id": 1, "byte_size": 64})", &request)
                  .ok());
  EXPECT_EQ(request.raw_handle(), std::string("\0\1\2\3", 4));
  EXPECT_EQ(request.device_id(), 1);
  EXPECT_EQ(request.byte_size(), 64u);
  ASSERT_TRUE(ParseCudaSharedMemoryRegister(
                  R"({"raw_handle": {"b64": "/+/+YWI="}, "device_id": 0, "byte_size": 1})", &request)
                  .ok());
  EXPECT_EQ(request.raw_handle(),
            "\xff\xef\xfe"
            "ab");
  // Base64 of 64 bytes, as a client sends a cudaIpcMemHandle_t: 88 characters.
  ASSERT_TRUE(ParseCudaSharedMemoryRegister(R"({"raw_handle": {"b64": ")" + std::string(84, 'A') +
                                                R"(AA=="}, "device_id": 0, "byte_size": 8})",
                                            &request)
                  .ok());
  EXPECT_EQ(request.raw_handle(), std::string(64, '\0'));
  for (const auto& [body, expected] : std::vector<std::pair<std::string, std::string>>{
           {"", "raw_handle: required"},
           {R"({"raw_handle": {"b64": "AAAA"}, "byte_size": 64})", "device_id: required"},
           {R"({"raw_handle": {"b64": "AAAA"}, "device_id": 0})", "byte_size: required"},
           {R"({"raw_handle": "AAAA", "device_id": 0, "byte_size": 64})", "raw_handle: expected {\"b64\""},
           {R"({"raw_handle": {"b64": 3}, "device_id": 0, "byte_size": 64})", "raw_handle: expected"},
           {R"({"raw_handle": {"b64": "AAAA", "x": 1}, "device_id": 0, "byte_size": 64})",
            "raw_handle: expected"},
           {R"({"raw_handle": {"b64": "AAA"}, "device_id": 0, "byte_size": 64})",
            "raw_handle.b64: not base64"},
           {R"({"raw_handle": {"b64": "AA=A"}, "device_id": 0, "byte_size": 64})",
            "raw_handle.b64: not base64"},
           {R"({"raw_handle": {"b64": "A==="}, "device_id": 0, "byte_size": 64})",
            "raw_handle.b64: not base64"},
           {R"({"raw_handle": {"b64": "AA==AAAA"}, "device_id": 0, "byte_size": 64})",
            "raw_handle.b64: not base64"},
           {R"({"raw_handle": {"b64": "AA\nA"}, "device_id": 0, "byte_size": 64})",
            "raw_handle.b64: not base64"},
           {R"({"raw_handle": {"b64": "AAAA"}, "device_id": "0", "byte_size": 64})",
            "device_id: expected an integer"},
           {R"({"raw_handle": {"b64": "AAAA"}, "device_id": 0.5, "byte_size": 64})",
            "device_id: expected an integer"},
           {R"({"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": -1})",
            "byte_size: expected a byte count"},
           {R"({"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 64, "key": "/k"})",
            "body.key: not a field"}}) {
    const Status status = ParseCudaSharedMemoryRegister(body, &request);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << body;
    EXPECT_NE(status.message().find(expected), std::string::npos) << body << ": " << status.message();
  }

  inference::CudaSharedMemoryStatusResponse cuda;
  for (const char* name : {"b", "a"}) {
    auto& region = (*cuda.mutable_regions())[name];
    region.set_name(name);
    region.set_device_id(name[0] == 'a' ? 0 : 3);
    region.set_byte_size(uint64_t{1} << 33);
  }
  EXPECT_EQ(json::parse(CudaSharedMemoryStatusJson(cuda)),
            json::parse(R"([{"name": "a", "device_id": 0, "byte_size": 8589934592},
                            {"name": "b", "device_id": 3, "byte_size": 8589934592}])"));
}

// JSON allows 1e400, but the parser throws on it (out_of_range, not parse_error); uncaught, that
// aborted the server on any REST body holding such a number (found by
// tests/fuzz/rest_infer_request_fuzzer; its corpus keeps the input).
TEST(RestCodecTest, NumbersBeyondADoubleAreRefusedNotThrown) {
  EXPECT_EQ(Refusal("1e400"), "body: a number is out of range");
  EXPECT_EQ(Refusal(R"({"inputs": [{"name": "a", "datatype": "FP64", "shape": [1], "data": [-1e400]}]})"),
            "body: a number is out of range");
  inference::RepositoryIndexRequest index;
  EXPECT_EQ(ParseRepositoryIndexRequest(R"({"ready": 1e400})", &index).code(), StatusCode::kInvalidArgument);
  inference::LogSettingsRequest log_settings;
  EXPECT_EQ(ParseLogSettingsRequest(R"({"log_verbose_level": 1e400})", &log_settings).code(),
            StatusCode::kInvalidArgument);
  google::protobuf::Map<std::string, inference::ModelRepositoryParameter> parameters;
  EXPECT_EQ(ParseRepositoryParameters(R"({"parameters": {"p": 1e400}})", &parameters).code(),
            StatusCode::kInvalidArgument);
}

TEST(RestCodecTest, TraceSettingsTravelAsTritonsRestBindingHasThem) {
  inference::TraceSettingRequest request;
  ASSERT_TRUE(ParseTraceSettingRequest(R"({"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": null})",
                                       &request)
                  .ok());
  ASSERT_EQ(request.settings().size(), 3u);
  EXPECT_EQ(request.settings().at("trace_level").value(0), "OFF");
  EXPECT_EQ(request.settings().at("trace_rate").value(0), "1000");
  EXPECT_EQ(request.settings().at("trace_count").value_size(), 0);  // back to its default
  for (const char* bad : {R"({"trace_rate": 5})", R"({"trace_level": [1]})", "[]"}) {
    inference::TraceSettingRequest refused;
    EXPECT_EQ(ParseTraceSettingRequest(bad, &refused).code(), StatusCode::kInvalidArgument) << bad;
  }
  inference::TraceSettingResponse response;
  (*response.mutable_settings())["trace_level"].add_value("OFF");
  (*response.mutable_settings())["trace_rate"].add_value("1000");
  const nlohmann::json answer = nlohmann::json::parse(TraceSettingJson(response));
  EXPECT_EQ(answer, nlohmann::json::parse(R"({"trace_level": ["OFF"], "trace_rate": "1000"})"));
}

// Nested data must nest as its shape does; the same values flat are always a tensor of the shape.
TEST(RestCodecTest, RaggedNestedDataIsRefusedEvenWhenItsCountMatches) {
  const auto body = [](const std::string& shape, const std::string& data) {
    return R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": )" + shape + R"(, "data": )" + data + "}]}";
  };
  EXPECT_NE(Refusal(body("[2, 2]", "[[1, 2, 3], [4]]")).find("an array of 3 at nesting depth 1 does not match shape [2, 2]"),
            std::string::npos);
  EXPECT_NE(Refusal(body("[2, 2]", "[[1, 2], 3, 4]")).find("does not match shape [2, 2]"), std::string::npos);
  EXPECT_NE(Refusal(body("[2, 2]", "[[1, 2], [3, [4]]]")).find("nesting depth 2 does not match"), std::string::npos);
  EXPECT_NE(Refusal(body("[1, 2, 2]", "[[1, 2], [3, 4]]")).find("does not match shape [1, 2, 2]"), std::string::npos);
  for (const char* data : {"[[1, 2], [3, 4]]", "[1, 2, 3, 4]"}) {
    inference::ModelInferRequest request;
    RestOutputFormat format;
    ASSERT_TRUE(Parse(body("[2, 2]", data), &request, &format).ok()) << data;
    EXPECT_EQ(request.raw_input_contents(0), Raw<int64_t>({1, 2, 3, 4})) << data;
  }
}

// A body nesting `levels` arrays around one INT64 value, of shape [1].
std::string Nested(int levels) {
  return R"({"inputs": [{"name": "a", "datatype": "INT64", "shape": [1], "data": )" +
         std::string(levels, '[') + "7" + std::string(levels, ']') + "}]}";
}

// A client chooses how deep `data` nests; a million levels (2 MB, far below the body limit) used to
// recurse once per level and overflow the stack, taking the server down (found while writing
// tests/fuzz/rest_infer_request_fuzzer, whose corpus keeps a 65-level body).
TEST(RestCodecTest, DataNestedDeeperThanAnyTensorIsRefusedNotRecursed) {
  EXPECT_NE(Refusal(Nested(64)).find("inputs[0].data: an array of 1 at nesting depth 1 does not match shape [1]"),
            std::string::npos);
  EXPECT_EQ(Refusal(Nested(65)), "inputs[0].data: arrays nested more than 64 deep");
  EXPECT_EQ(Refusal(Nested(1 << 20)), "inputs[0].data: arrays nested more than 64 deep");
}

inference::ModelInferResponse TwoOutputs() {
  inference::ModelInferResponse response;
  response.set_model_name("m");
  response.set_model_version("3");
  response.set_id("r9");
  auto* first = response.add_outputs();
  first->set_name("f");
  first->set_datatype("FP32");
  first->add_shape(1);
  first->add_shape(2);
  response.add_raw_output_contents(Raw<float>({1.5f, -2.0f}));
  auto* second = response.add_outputs();
  second->set_name("h");
  second->set_datatype("FP16");
  second->add_shape(2);
  response.add_raw_output_contents(std::string("\x00\x3c\x00\xc0", 4));  // 1.0, -2.0
  return response;
}

TEST(RestCodecTest, OutputsAnswerAsJsonDataUnlessAskedForBinary) {
  const RestInferBody encoded = EncodeRestInferResponse(TwoOutputs(), RestOutputFormat{});
  EXPECT_FALSE(encoded.json_length.has_value());
  const json body = json::parse(encoded.body);
  EXPECT_EQ(body["model_name"], "m");
  EXPECT_EQ(body["model_version"], "3");
  EXPECT_EQ(body["id"], "r9");
  EXPECT_EQ(body["outputs"][0]["name"], "f");
  EXPECT_EQ(body["outputs"][0]["shape"], json::array({1, 2}));
  EXPECT_EQ(body["outputs"][0]["data"], json::array({1.5, -2.0}));
  // FP16 has no JSON type of its own: its values as numbers.
  EXPECT_EQ(body["outputs"][1]["data"], json::array({1.0, -2.0}));
}

TEST(RestCodecTest, BinaryOutputsFollowTheHeaderInOutputOrder) {
  RestOutputFormat format;
  format.binary_by_default = true;
  format.binary_by_output = {{"h", false}};
  const RestInferBody encoded = EncodeRestInferResponse(TwoOutputs(), format);
  ASSERT_TRUE(encoded.json_length.has_value());
  const json header = json::parse(encoded.body.substr(0, *encoded.json_length));
  EXPECT_EQ(header["outputs"][0]["parameters"]["binary_data_size"], 8);
  EXPECT_FALSE(header["outputs"][0].contains("data"));
  EXPECT_EQ(header["outputs"][1]["data"], json::array({1.0, -2.0}));
  EXPECT_EQ(encoded.body.substr(*encoded.json_length), Raw<float>({1.5f, -2.0f}));
}

TEST(RestCodecTest, ProtobufJsonHasNumbersForInt64AndNamesForEnums) {
  inference::ModelMetadataResponse metadata;
  metadata.set_name("m");
  metadata.add_versions("1");
  auto* input = metadata.add_inputs();
  input->set_name("ids");
  input->set_datatype("INT64");
  input->add_shape(-1);
  input->add_shape(128);
  const json metadata_json = json::parse(ProtoToRestJson(metadata));
  EXPECT_EQ(metadata_json["inputs"][0]["shape"], json::array({-1, 128}));
  EXPECT_EQ(metadata_json["versions"], json::array({"1"}));

  inference::ModelConfig config;
  config.set_name("m");
  config.set_max_batch_size(8);
  auto* tensor = config.add_input();
  tensor->set_name("ids");
  tensor->set_data_type(inference::TYPE_INT64);
  tensor->add_dims(-1);
  (*config.mutable_parameters())["k"].set_string_value("v");
  const json config_json = json::parse(ProtoToRestJson(config));
  EXPECT_EQ(config_json["max_batch_size"], 8);
  EXPECT_EQ(config_json["input"][0]["data_type"], "TYPE_INT64");
  EXPECT_EQ(config_json["input"][0]["dims"], json::array({-1}));
  EXPECT_EQ(config_json["parameters"]["k"]["string_value"], "v");
  // Unset sub-messages stay out; scalars are always present, as Triton prints configs.
  EXPECT_FALSE(config_json.contains("dynamic_batching"));
  EXPECT_EQ(config_json["platform"], "");
  // graphserve's own fields (numbered from 1000) never appear, set or not: Triton's schema lacks them.
  config.set_max_sequence_length(128);
  config.mutable_buckets()->add_batch_sizes(4);
  config.mutable_input(0)->set_pad_value(3);
  config.mutable_dynamic_batching()->set_max_queue_delay_microseconds(100);
  const json own_json = json::parse(ProtoToRestJson(config));
  EXPECT_FALSE(own_json.contains("max_sequence_length"));
  EXPECT_FALSE(own_json.contains("buckets"));
  EXPECT_FALSE(own_json.contains("precision"));
  EXPECT_FALSE(own_json.contains("cuda_graphs"));
  EXPECT_FALSE(own_json.contains("sequence_mask_input"));
  EXPECT_FALSE(own_json["input"][0].contains("pad_value"));
  EXPECT_EQ(own_json["dynamic_batching"]["max_queue_delay_microseconds"], 100);
  EXPECT_FALSE(own_json["dynamic_batching"].contains("policy"));
  EXPECT_FALSE(own_json["dynamic_batching"].contains("disable"));
  EXPECT_FALSE(own_json["dynamic_batching"].contains("max_queue_size"));

  inference::RepositoryIndexResponse index;
  auto* model = index.add_models();
  model->set_name("m");
  model->set_state("READY");
  EXPECT_EQ(json::parse(RepositoryIndexJson(index)),
            json::parse(R"([{"name": "m", "version": "", "state": "READY", "reason": ""}])"));
}

TEST(RestCodecTest, HttpStatusesFollowTriton) {
  EXPECT_EQ(HttpStatusFor(StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusFor(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnimplemented), 501);
  EXPECT_EQ(HttpStatusFor(StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatusFor(StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFor(StatusCode::kCancelled), 400);
  EXPECT_EQ(json::parse(ErrorBody("a \"quoted\" name")), json({{"error", "a \"quoted\" name"}}));
}

TEST(RestCodecTest, RepositoryBodiesAreReadOrRefused) {
  inference::RepositoryIndexRequest index;
  EXPECT_TRUE(ParseRepositoryIndexRequest("", &index).ok());
  EXPECT_FALSE(index.ready());
  EXPECT_TRUE(ParseRepositoryIndexRequest(R"({"ready": true})", &index).ok());
  EXPECT_TRUE(index.ready());
  EXPECT_EQ(ParseRepositoryIndexRequest(R"({"ready": 1})", &index).message(), "ready: expected true or false");
  EXPECT_EQ(ParseRepositoryIndexRequest(R"({"repository": "x"})", &index).message(),
            "body.repository: not a field of the KServe v2 REST request");

  inference::RepositoryModelLoadRequest load;
  ASSERT_TRUE(ParseRepositoryParameters(R"({"parameters": {"config": "{}", "n": 2, "b": true}})",
                                        load.mutable_parameters())
                  .ok());
  EXPECT_EQ(load.parameters().at("config").string_param(), "{}");
  EXPECT_EQ(load.parameters().at("n").int64_param(), 2);
  EXPECT_TRUE(load.parameters().at("b").bool_param());
}

}  // namespace
}  // namespace graphserve
