// Black-box tests: the real graphserve binary on a loopback port, called through a real gRPC client.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <regex>
#include <thread>

#include "async_calls.h"
#include "http_get.h"
#include "infer_helpers.h"
#include "prometheus_text.h"
#include "server_process.h"
#include "shared_server_test.h"

namespace graphserve::testing {
namespace {

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(file), {});
}

template <typename T>
std::vector<T> ReadArray(const std::string& path) {
  const std::vector<char> bytes = ReadFile(path);
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));
  return values;
}

grpc::Status Infer(inference::GRPCInferenceService::Stub* stub, const inference::ModelInferRequest& request,
                   inference::ModelInferResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  return stub->ModelInfer(&context, request, response);
}

// ---------------------------------------------------------------------------------------------------
// The built-in encoder, as a newcomer runs it: no repository at all.

struct BuiltinEncoderSuite {
  static constexpr const char* kLogName = "builtin_encoder_server.log";
  static std::vector<std::string> Flags() { return {"--device", "cpu"}; }
};
using BuiltinEncoderTest = SharedServerTest<BuiltinEncoderSuite>;

TEST_F(BuiltinEncoderTest, HealthAndMetadata) {
  auto stub = server_->NewStub();
  {
    grpc::ClientContext context;
    inference::ServerLiveResponse response;
    ASSERT_TRUE(stub->ServerLive(&context, {}, &response).ok());
    EXPECT_TRUE(response.live());
  }
  {
    grpc::ClientContext context;
    inference::ServerMetadataResponse response;
    ASSERT_TRUE(stub->ServerMetadata(&context, {}, &response).ok());
    EXPECT_EQ(response.name(), "graphserve");
    EXPECT_FALSE(response.version().empty());
  }
  {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name("encoder");
    inference::ModelReadyResponse response;
    ASSERT_TRUE(stub->ModelReady(&context, request, &response).ok());
    EXPECT_TRUE(response.ready());
  }
  {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name("no_such_model");
    inference::ModelReadyResponse response;
    response.set_ready(true);
    ASSERT_TRUE(stub->ModelReady(&context, request, &response).ok());  // Triton's answer: not ready
    EXPECT_FALSE(response.ready());
  }
  {
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name("encoder");
    inference::ModelMetadataResponse response;
    ASSERT_TRUE(stub->ModelMetadata(&context, request, &response).ok());
    EXPECT_EQ(response.platform(), "graphserve_encoder");
    ASSERT_EQ(response.inputs_size(), 2);
    EXPECT_EQ(response.inputs(0).name(), "input_ids");
    EXPECT_EQ(response.inputs(0).datatype(), "INT64");
    EXPECT_EQ(std::vector<int64_t>(response.inputs(0).shape().begin(), response.inputs(0).shape().end()),
              (std::vector<int64_t>{-1, -1}));
    ASSERT_EQ(response.outputs_size(), 2);
    EXPECT_EQ(response.outputs(0).name(), "last_hidden_state");
    EXPECT_EQ(response.outputs(0).datatype(), "FP32");
    EXPECT_EQ(std::vector<int64_t>(response.outputs(0).shape().begin(), response.outputs(0).shape().end()),
              (std::vector<int64_t>{-1, -1, 256}));
    EXPECT_EQ(std::vector<int64_t>(response.outputs(1).shape().begin(), response.outputs(1).shape().end()),
              (std::vector<int64_t>{-1, 256}));
  }
}

TEST_F(BuiltinEncoderTest, InferRawAndTypedGiveTheSameAnswerWithOwnShapes) {
  auto stub = server_->NewStub();
  std::mt19937 random(7);
  const TokenRows ids = RandomTokens(random, 2, 37);
  inference::ModelInferRequest raw_request = TokenRequest("encoder", ids, /*raw=*/true);
  raw_request.set_id("my-request-42");
  inference::ModelInferResponse raw_response, typed_response;
  grpc::Status status = Infer(stub.get(), raw_request, &raw_response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  status = Infer(stub.get(), TokenRequest("encoder", ids, /*raw=*/false), &typed_response);
  ASSERT_TRUE(status.ok()) << status.error_message();

  EXPECT_EQ(raw_response.id(), "my-request-42");
  EXPECT_EQ(raw_response.model_name(), "encoder");
  const FloatOutput hidden = GetFloatOutput(raw_response, "last_hidden_state");
  const FloatOutput pooled = GetFloatOutput(raw_response, "pooler_output");
  ASSERT_TRUE(hidden.found && pooled.found);
  EXPECT_EQ(hidden.shape, (std::vector<int64_t>{2, 37, 256}));
  EXPECT_EQ(hidden.values.size(), 2u * 37 * 256);
  EXPECT_EQ(pooled.shape, (std::vector<int64_t>{2, 256}));
  EXPECT_LT(MaxRelativeDifference(GetFloatOutput(typed_response, "last_hidden_state").values, hidden.values),
            1e-4);
  // The encoder must actually compute something: rows differ and values are finite.
  EXPECT_TRUE(std::all_of(hidden.values.begin(), hidden.values.end(), [](float v) { return std::isfinite(v); }));
  EXPECT_NE(std::vector<float>(pooled.values.begin(), pooled.values.begin() + 256),
            std::vector<float>(pooled.values.begin() + 256, pooled.values.end()));
}

TEST_F(BuiltinEncoderTest, RequestedOutputsAreTheOnlyOnesReturned) {
  auto stub = server_->NewStub();
  std::mt19937 random(8);
  inference::ModelInferRequest request = TokenRequest("encoder", RandomTokens(random, 1, 5));
  request.add_outputs()->set_name("pooler_output");
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(stub.get(), request, &response).ok());
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "pooler_output");
  EXPECT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0).size(), 256u * sizeof(float));
}

// Runs `command`, returning its exit code and what it printed.
std::pair<int, std::string> RunCommand(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (pipe && fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  const int status = pipe ? pclose(pipe) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

TEST_F(BuiltinEncoderTest, CliTalksToTheServer) {
  const std::string cli = std::string(GRAPHSERVE_CLI) + " ";
  const std::string address = " --address " + server_->address();
  auto [code, output] = RunCommand(cli + "health" + address);
  EXPECT_EQ(code, 0) << output;
  std::tie(code, output) = RunCommand(cli + "metadata --model encoder --json" + address);
  EXPECT_EQ(code, 0) << output;
  EXPECT_NE(output.find("last_hidden_state"), std::string::npos) << output;
  std::tie(code, output) = RunCommand(cli + "infer --model encoder --rows 2 --length 9 --id cli-1 --json" + address);
  EXPECT_EQ(code, 0) << output;
  EXPECT_TRUE(std::regex_search(output, std::regex(R"("shape":\s*\[\s*2,\s*9,\s*256\s*\])"))) << output;
  EXPECT_NE(output.find("cli-1"), std::string::npos) << output;
  // The infer call itself is sent: the answer shown is ModelInfer's (naming model_name), not the
  // metadata call's.
  std::tie(code, output) = RunCommand(cli + "infer --model nonexistent" + address);
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("NOT_FOUND"), std::string::npos) << output;
  EXPECT_NE(output.find("model_name: unknown model 'nonexistent'"), std::string::npos) << output;
}

// Without a server: each mistake a person makes is named with what to do, once, and exits 1.
TEST(CliErrorsTest, EachMistakeIsNamedWithWhatToDo) {
  const std::string cli = std::string(GRAPHSERVE_CLI) + " ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"frobnicate", "unknown subcommand 'frobnicate' (one of: health, metadata, config, infer, plan-grid)"},
      {"health --address http://localhost:8001", "drop the scheme"},
      {"health --address localhost:99999", "the port must be a number from 1 to 65535"},
      {"health --address 127.0.0.1:1",
       "cannot reach graphserve at 127.0.0.1:1 (connection refused); is it running?\n"},
      {"health --wait-s 0.5 --address 127.0.0.1:1",
       "cannot reach graphserve at 127.0.0.1:1 (connection refused); is it running?\n"}};
  for (const auto& [arguments, expected] : cases) {
    const auto [code, output] = RunCommand(cli + arguments);
    EXPECT_EQ(code, 1) << arguments << ": " << output;
    const size_t found = output.find(expected);
    EXPECT_NE(found, std::string::npos) << arguments << ": " << output;
    // Printed once: health --wait-s used to print the wait's error, then the same again.
    EXPECT_EQ(output.find(expected, found + 1), std::string::npos) << arguments << ": " << output;
  }
}

TEST_F(BuiltinEncoderTest, StartupLogNamesVersionsDeviceAndBuckets) {
  const std::string log = server_->Log();
  EXPECT_NE(log.find("libtorch"), std::string::npos) << log;
  EXPECT_NE(log.find("gRPC"), std::string::npos);
  EXPECT_NE(log.find("on cpu"), std::string::npos);
  // The default grid: 284 points, the largest 512 rows at length 32.
  EXPECT_NE(log.find("model 'encoder' bucket grid: 284 buckets, largest 512x32"), std::string::npos) << log;
  // Ready only after warm-up: the instance's summary comes before the ready line.
  EXPECT_LT(log.find("instance 0 on cpu: 284 buckets ("), log.find("ready: serving")) << log;
}

// ---------------------------------------------------------------------------------------------------
// A repository made at test time by PyTorch: user TorchScript models and a small-grid encoder.

struct RepositorySuite {
  static constexpr const char* kLogName = "repository_server.log";
  static std::vector<std::string> Flags() {
    // GRAPHSERVE_TEST_DEVICE=cuda runs this suite on a GPU (with GRAPHSERVE_TEST_INSTANCE_DEVICES
    // for make_model_repository, on several); CI runs it on the CPU.
    return {"--device", TestDevice(), "--model-repository", MODEL_REPOSITORY,
            "--log-level", "debug"};
  }
};
using RepositoryTest = SharedServerTest<RepositorySuite>;

// `output` of `response` has `shape` and the values PyTorch answered (make_model_repository.py's
// reference file).
void ExpectReferenceOutput(const inference::ModelInferResponse& response, const std::string& output,
                           const std::string& reference_file, const std::vector<int64_t>& shape) {
  const FloatOutput actual = GetFloatOutput(response, output);
  EXPECT_EQ(actual.shape, shape) << output;
  const std::vector<float> expected =
      ReadArray<float>(std::string(MODEL_REPOSITORY) + "_reference/" + reference_file);
  EXPECT_LT(MaxRelativeDifference(actual.values, expected), 1e-4) << output;
}

TEST_F(RepositoryTest, TorchScriptModelsAnswerWhatPyTorchAnswers) {
  auto stub = server_->NewStub();
  const std::vector<int64_t> ids = ReadArray<int64_t>(std::string(MODEL_REPOSITORY) + "_reference/ids.bin");
  ASSERT_EQ(ids.size(), 5u);
  // Length 5 is padded to the 8-bucket (tiny_scripted) and the 16-bucket (tiny_traced): padding must
  // not change the answer PyTorch gave for the unpadded input.
  inference::ModelInferResponse scripted, traced;
  grpc::Status status = Infer(stub.get(), TokenRequest("tiny_scripted", {ids}), &scripted);
  ASSERT_TRUE(status.ok()) << status.error_message();
  status = Infer(stub.get(), TokenRequest("tiny_traced", {ids}), &traced);
  ASSERT_TRUE(status.ok()) << status.error_message();

  ExpectReferenceOutput(scripted, "hidden", "hidden.bin", {1, 5, 16});
  ExpectReferenceOutput(scripted, "pooled", "pooled.bin", {1, 16});
  ExpectReferenceOutput(traced, "projected", "projected.bin", {1, 5, 4});
}

// A config written for Triton's PyTorch backend loads unchanged: backend "pytorch" finds model.pt,
// and INPUT__N / OUTPUT__N, listed out of order, bind by N, so that the answers are tiny_scripted's.
TEST_F(RepositoryTest, TritonConfiguredModelAnswersAsPyTorchDoes) {
  auto stub = server_->NewStub();
  const std::vector<int64_t> ids = ReadArray<int64_t>(std::string(MODEL_REPOSITORY) + "_reference/ids.bin");
  inference::ModelInferRequest request = TokenRequest("tiny_triton", {ids});
  request.mutable_inputs(0)->set_name("INPUT__0");  // input_ids
  request.mutable_inputs(1)->set_name("INPUT__1");  // attention_mask
  inference::ModelInferResponse response;
  const grpc::Status status = Infer(stub.get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ExpectReferenceOutput(response, "OUTPUT__0", "hidden.bin", {1, 5, 16});
  ExpectReferenceOutput(response, "OUTPUT__1", "pooled.bin", {1, 16});
  // What it ignored is in the log, by name.
  const std::string log = server_->Log();
  EXPECT_NE(log.find("\"model_warmup\""), std::string::npos) << log;
  EXPECT_NE(log.find("model 'tiny_triton': parameters[\"INFERENCE_MODE\"]"), std::string::npos);
}

grpc::Status GetModelConfig(inference::GRPCInferenceService::Stub* stub, const std::string& model,
                            inference::ModelConfig* config) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  inference::ModelConfigRequest request;
  request.set_name(model);
  inference::ModelConfigResponse response;
  const grpc::Status status = stub->ModelConfig(&context, request, &response);
  *config = response.config();
  return status;
}

template <typename Repeated>
std::vector<int64_t> Values(const Repeated& values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

// The ModelConfig RPC answers what is served: Triton's fields filled from the loaded model, the
// grid as preferred batch sizes and (with graphs) as graph_spec, graphserve's fields beside them.
TEST_F(RepositoryTest, ModelConfigAnswersTheEffectiveConfig) {
  auto stub = server_->NewStub();
  inference::ModelConfig config;
  grpc::Status status = GetModelConfig(stub.get(), "tiny_triton", &config);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(config.name(), "tiny_triton");
  EXPECT_EQ(config.platform(), "pytorch_libtorch");
  EXPECT_EQ(config.backend(), "pytorch");
  EXPECT_EQ(config.max_batch_size(), 4);
  ASSERT_EQ(config.input_size(), 2);
  EXPECT_EQ(config.input(0).name(), "INPUT__1");
  EXPECT_EQ(config.input(0).data_type(), inference::TYPE_INT64);
  EXPECT_EQ(Values(config.input(0).dims()), (std::vector<int64_t>{-1}));
  ASSERT_EQ(config.output_size(), 2);
  EXPECT_EQ(Values(config.output(1).dims()), (std::vector<int64_t>{-1, 16}));
  // Its preferred sizes [2, 4] with the default steps below max_batch_size.
  EXPECT_EQ(Values(config.dynamic_batching().preferred_batch_size()), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(config.dynamic_batching().max_queue_delay_microseconds(), 1000u);
  EXPECT_EQ(config.dynamic_batching().default_queue_policy().max_queue_size(), 100u);
  // graphserve's own settings as parameters: Triton's schema has no field for them.
  EXPECT_EQ(config.parameters().at("max_sequence_length").string_value(), "32");
  EXPECT_EQ(config.parameters().at("bucket_sequence_lengths").string_value(), "8,32");
  EXPECT_EQ(config.max_sequence_length(), 0);
  ASSERT_EQ(config.instance_group_size(), 1);
  EXPECT_EQ(config.instance_group(0).count(), 2);
  const bool cuda = std::string(RepositorySuite::Flags()[1]).rfind("cuda", 0) == 0;
  EXPECT_EQ(config.instance_group(0).kind(), cuda ? inference::ModelInstanceGroup::KIND_GPU
                                                  : inference::ModelInstanceGroup::KIND_CPU);
  // Graphs only on a GPU: then one graph_spec per grid point, the -1 replaced by its length.
  EXPECT_EQ(config.optimization().cuda().graphs(), cuda);
  ASSERT_EQ(config.optimization().cuda().graph_spec_size(), cuda ? 8 : 0);  // batch sizes 1-4 x lengths 8, 32
  if (cuda) {
    const auto& last = config.optimization().cuda().graph_spec(7);
    EXPECT_EQ(last.batch_size(), 4);
    EXPECT_EQ(Values(last.input().at("INPUT__0").dim()), (std::vector<int64_t>{32}));
  }

  status = GetModelConfig(stub.get(), "encoder", &config);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(config.platform(), "graphserve_encoder");
  EXPECT_EQ(config.dynamic_batching().default_queue_policy().max_queue_size(), 2000u);
  EXPECT_EQ(config.parameters().at("bucket_batch_sizes").string_value(), "1,2,4,8");

  status = GetModelConfig(stub.get(), "no_such_model", &config);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("name: unknown model 'no_such_model'"), std::string::npos);

  // graphserve-cli prints it as config.pbtxt text.
  const auto [code, output] = RunCommand(std::string(GRAPHSERVE_CLI) + " config --model tiny_triton" +
                                         " --address " + server_->address());
  EXPECT_EQ(code, 0) << output;
  EXPECT_NE(output.find("platform: \"pytorch_libtorch\""), std::string::npos) << output;
  EXPECT_NE(output.find("key: \"max_sequence_length\"\n  value {\n    string_value: \"32\""), std::string::npos)
      << output;
}

using Answer = std::pair<grpc::Status, inference::ModelInferResponse>;

// Every request from its own thread and channel at once, so that the server batches them together.
std::vector<std::future<Answer>> SendAllAtOnce(ServerProcess& server,
                                               const std::vector<inference::ModelInferRequest>& requests) {
  std::vector<std::future<Answer>> answers;
  for (const auto& request : requests) {
    answers.push_back(std::async(std::launch::async, [&server, &request] {
      inference::ModelInferResponse response;
      auto own_stub = server.NewStub();
      grpc::Status status = Infer(own_stub.get(), request, &response);
      return std::make_pair(status, response);
    }));
  }
  return answers;
}

// The heart of the batching path: whatever else shares the batch, a request gets its solo answer.
TEST_F(RepositoryTest, ConcurrentMixedLengthsGetTheirSoloAnswers) {
  auto stub = server_->NewStub();
  const std::vector<inference::ModelInferRequest> requests = MixedLengthRequests("encoder", 48, 11);
  // Solo, one at a time, and the same request twice.
  std::vector<inference::ModelInferResponse> solo(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    grpc::Status status = Infer(stub.get(), requests[i], &solo[i]);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  inference::ModelInferResponse again;
  ASSERT_TRUE(Infer(stub.get(), requests[0], &again).ok());
  EXPECT_LT(MaxRelativeDifference(GetFloatOutput(again, "last_hidden_state").values,
                                  GetFloatOutput(solo[0], "last_hidden_state").values),
            1e-4);

  // All at once from many threads, so that they are batched and padded together.
  std::vector<std::future<Answer>> answers = SendAllAtOnce(*server_, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto [status, response] = answers[i].get();
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.id(), requests[i].id());
    for (const char* name : {"last_hidden_state", "pooler_output"}) {
      const FloatOutput mixed = GetFloatOutput(response, name);
      const FloatOutput alone = GetFloatOutput(solo[i], name);
      EXPECT_EQ(mixed.shape, alone.shape) << name;
      EXPECT_LT(MaxRelativeDifference(mixed.values, alone.values), 1e-4) << name << " of request " << i;
    }
  }
  // The scheduler logged batches holding more than one request: the test really mixed them.
  const std::string log = server_->Log();
  EXPECT_TRUE(std::regex_search(log, std::regex("model 'encoder' on (cpu|cuda:[0-9]+): batch requests=([2-9]|[1-9][0-9])")))
      << "no batch of several requests was formed";
}

// A request that makes its batch fail (a token id beyond the model's embedding) fails alone: the
// requests batched with it get their answers, and the culprit's message carries neither the model's
// TorchScript source nor a host path.
TEST_F(RepositoryTest, OneBadRequestFailsAloneAndItsBatchMatesGetTheirAnswers) {
  if (TestDevice() != "cpu") {
    GTEST_SKIP() << "on a GPU the bad token id is a device-side assert that no later batch survives: "
                    "DeviceFaultTest checks what the server does then";
  }
  auto stub = server_->NewStub();
  std::mt19937 random(21);
  std::vector<inference::ModelInferRequest> requests;
  for (int i = 0; i < 6; ++i) {
    TokenRows ids = RandomTokens(random, 1, 4 + i);
    if (i == 3) ids[0][1] = 5000;
    requests.push_back(TokenRequest("tiny_strict", ids));
    requests.back().set_id("r" + std::to_string(i));
  }
  std::vector<inference::ModelInferResponse> solo(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i == 3) continue;
    ASSERT_TRUE(Infer(stub.get(), requests[i], &solo[i]).ok());
  }

  std::vector<std::future<Answer>> answers = SendAllAtOnce(*server_, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto [status, response] = answers[i].get();
    if (i == 3) {
      // TorchScript's interpreter rethrows the embedding's IndexError as a plain error: INTERNAL.
      EXPECT_TRUE(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                  status.error_code() == grpc::StatusCode::INTERNAL)
          << status.error_code() << ": " << status.error_message();
      EXPECT_TRUE(std::regex_search(status.error_message(),
                                    std::regex("^model 'tiny_strict' (rejected this request's input values|"
                                               "failed to run this request) \\(error [0-9]+ in the server log\\)$")))
          << status.error_message();
      for (const char* leak : {"/", "Traceback", "forward", "embedding"}) {
        EXPECT_EQ(status.error_message().find(leak), std::string::npos) << leak << " in " << status.error_message();
      }
      continue;
    }
    ASSERT_TRUE(status.ok()) << "request " << i << ": " << status.error_message();
    EXPECT_EQ(GetFloatOutput(response, "projected").values, GetFloatOutput(solo[i], "projected").values)
        << "request " << i;
  }
  // The whole story, source included, is in the log, and the first batch held several requests.
  const std::string log = server_->Log();
  EXPECT_TRUE(std::regex_search(log, std::regex("model 'tiny_strict' on \\S+: batch of [2-6] requests padded to 8x16 failed")))
      << "the bad request never shared a batch";
  EXPECT_TRUE(std::regex_search(log, std::regex("model 'tiny_strict' on \\S+: 1 request\\(s\\) fails alone")));

  // Out-of-range values under a config that bounds them never reach the model.
  TokenRows ids = RandomTokens(random, 1, 3);
  ids[0][2] = 5000;
  inference::ModelInferResponse response;
  grpc::Status status = Infer(stub.get(), TokenRequest("tiny_bounded", ids), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("inputs[0] 'input_ids': element 2 is outside the model's range [0, 999]"),
            std::string::npos)
      << status.error_message();
}

// An AOTInductor package of the built-in encoder's architecture and weights, batched with requests
// of other lengths, answers each request as the built-in encoder answers it alone.
TEST_F(RepositoryTest, AotInductorPackageAnswersAsTheBuiltInEncoder) {
  auto stub = server_->NewStub();
  const std::vector<inference::ModelInferRequest> requests = MixedLengthRequests("encoder_pt2", 16, 14);
  std::vector<std::future<Answer>> answers = SendAllAtOnce(*server_, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto [status, from_package] = answers[i].get();
    ASSERT_TRUE(status.ok()) << status.error_message();
    inference::ModelInferRequest builtin_request = requests[i];
    builtin_request.set_model_name("encoder");
    inference::ModelInferResponse from_builtin;
    status = Infer(stub.get(), builtin_request, &from_builtin);
    ASSERT_TRUE(status.ok()) << status.error_message();
    for (const char* name : {"last_hidden_state", "pooler_output"}) {
      const FloatOutput package = GetFloatOutput(from_package, name);
      const FloatOutput builtin = GetFloatOutput(from_builtin, name);
      EXPECT_EQ(package.shape, builtin.shape) << name;
      EXPECT_LT(MaxRelativeDifference(package.values, builtin.values), 1e-4) << name << " of request " << i;
    }
  }
}

inference::ModelStatistics StatisticsOf(inference::GRPCInferenceService::Stub* stub,
                                       const std::string& model) {
  grpc::ClientContext context;
  inference::ModelStatisticsRequest request;
  request.set_name(model);
  inference::ModelStatisticsResponse response;
  const grpc::Status status = stub->ModelStatistics(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.model_stats_size(), 1);
  return response.model_stats_size() == 1 ? response.model_stats(0) : inference::ModelStatistics();
}

// What the model's statistics gained from `before` to `after`, per StatisticDuration.
uint64_t Gained(const inference::StatisticDuration& after, const inference::StatisticDuration& before,
                uint64_t* ns) {
  *ns = after.ns() - before.ns();
  return after.count() - before.count();
}

// Triton's statistics of the encoder (CUDA graphs when the suite runs on a GPU, stages timed with
// CUDA events) gain exactly what sequential traffic adds: each request a batch of its own.
TEST_F(RepositoryTest, StatisticsGainEachRequestAndEachStageOfItsBatch) {
  auto stub = server_->NewStub();
  const inference::ModelStatistics before = StatisticsOf(stub.get(), "encoder");
  std::mt19937 random(21);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 12}, {2, 30}, {3, 64}};
  for (const auto& [rows, length] : shapes) {
    inference::ModelInferResponse response;
    const grpc::Status status =
        Infer(stub.get(), TokenRequest("encoder", RandomTokens(random, rows, length)), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  const inference::ModelStatistics after = StatisticsOf(stub.get(), "encoder");
  EXPECT_EQ(after.version(), "1");
  EXPECT_EQ(after.inference_count() - before.inference_count(), 6u);
  EXPECT_EQ(after.execution_count() - before.execution_count(), 3u);
  EXPECT_GE(after.last_inference(), before.last_inference());

  const inference::InferStatistics& a = after.inference_stats();
  const inference::InferStatistics& b = before.inference_stats();
  uint64_t success_ns = 0;
  EXPECT_EQ(Gained(a.success(), b.success(), &success_ns), 3u);
  uint64_t fail_ns = 0;
  EXPECT_EQ(Gained(a.fail(), b.fail(), &fail_ns), 0u);
  uint64_t parts_ns = 0;
  auto expect_stage = [&](const char* name, const inference::StatisticDuration& now,
                          const inference::StatisticDuration& then) {
    uint64_t ns = 0;
    EXPECT_EQ(Gained(now, then, &ns), 3u) << name;
    EXPECT_GT(ns, 0u) << name;
    parts_ns += ns;
  };
  expect_stage("queue", a.queue(), b.queue());
  expect_stage("compute_input", a.compute_input(), b.compute_input());
  expect_stage("compute_infer", a.compute_infer(), b.compute_infer());
  expect_stage("compute_output", a.compute_output(), b.compute_output());
  EXPECT_LE(parts_ns, success_ns);

  std::map<uint64_t, uint64_t> executions_before;
  for (const auto& batch : before.batch_stats()) executions_before[batch.batch_size()] = batch.compute_infer().count();
  std::map<uint64_t, uint64_t> gained;
  for (const auto& batch : after.batch_stats()) {
    const uint64_t more = batch.compute_infer().count() - executions_before[batch.batch_size()];
    if (more > 0) gained[batch.batch_size()] = more;
  }
  EXPECT_EQ(gained, (std::map<uint64_t, uint64_t>{{1, 1}, {2, 1}, {3, 1}}));
}

struct BadInfer {
  std::string name;
  std::function<void(inference::ModelInferRequest*)> corrupt;
  grpc::StatusCode code;
  std::string field;  // must appear in the message
};

class BadInputTest : public RepositoryTest, public ::testing::WithParamInterface<BadInfer> {};

TEST_P(BadInputTest, ClearStatusAndServerKeepsServing) {
  auto stub = server_->NewStub();
  std::mt19937 random(3);
  inference::ModelInferRequest request = TokenRequest("encoder", RandomTokens(random, 2, 6));
  GetParam().corrupt(&request);
  inference::ModelInferResponse response;
  grpc::Status status = Infer(stub.get(), request, &response);
  EXPECT_EQ(status.error_code(), GetParam().code) << status.error_message();
  EXPECT_NE(status.error_message().find(GetParam().field), std::string::npos) << status.error_message();

  // The server is still there and serves a good request.
  inference::ModelInferResponse good;
  EXPECT_TRUE(Infer(stub.get(), TokenRequest("encoder", RandomTokens(random, 1, 4)), &good).ok());
}

void SetShape(inference::ModelInferRequest* r, int input, std::vector<int64_t> shape, bool resize_data) {
  r->mutable_inputs(input)->clear_shape();
  int64_t count = 1;
  for (int64_t d : shape) {
    r->mutable_inputs(input)->add_shape(d);
    count *= std::max<int64_t>(d, 0);
  }
  if (resize_data) r->mutable_raw_input_contents(input)->resize(count * sizeof(int64_t));
}

INSTANTIATE_TEST_SUITE_P(
    Requests, BadInputTest,
    ::testing::Values(
        BadInfer{"UnknownModel", [](auto* r) { r->set_model_name("bert-large"); }, grpc::StatusCode::NOT_FOUND,
                 "model_name"},
        BadInfer{"UnknownInput", [](auto* r) { r->mutable_inputs(1)->set_name("token_type_ids"); },
                 grpc::StatusCode::INVALID_ARGUMENT, "token_type_ids"},
        BadInfer{"MissingInput",
                 [](auto* r) {
                   r->mutable_inputs()->RemoveLast();
                   r->mutable_raw_input_contents()->RemoveLast();
                 },
                 grpc::StatusCode::INVALID_ARGUMENT, "attention_mask"},
        BadInfer{"WrongDatatype", [](auto* r) { r->mutable_inputs(0)->set_datatype("FP32"); },
                 grpc::StatusCode::INVALID_ARGUMENT, "datatype"},
        BadInfer{"DataSizeDisagreesWithShape", [](auto* r) { r->mutable_raw_input_contents(0)->pop_back(); },
                 grpc::StatusCode::INVALID_ARGUMENT, "raw_input_contents[0]"},
        BadInfer{"ZeroDim", [](auto* r) { SetShape(r, 0, {2, 0}, true); }, grpc::StatusCode::INVALID_ARGUMENT,
                 "inputs[0]"},
        BadInfer{"NegativeDim", [](auto* r) { SetShape(r, 1, {-2, 6}, false); },
                 grpc::StatusCode::INVALID_ARGUMENT, "inputs[1]"},
        BadInfer{"LengthsDisagree", [](auto* r) { SetShape(r, 1, {2, 5}, true); },
                 grpc::StatusCode::INVALID_ARGUMENT, "variable length"},
        BadInfer{"BatchAboveMax",
                 [](auto* r) {
                   SetShape(r, 0, {9, 6}, true);
                   SetShape(r, 1, {9, 6}, true);
                 },
                 grpc::StatusCode::INVALID_ARGUMENT, "max_batch_size"},
        BadInfer{"LengthAboveMax",
                 [](auto* r) {
                   SetShape(r, 0, {2, 65}, true);
                   SetShape(r, 1, {2, 65}, true);
                 },
                 grpc::StatusCode::INVALID_ARGUMENT, "max_sequence_length"},
        BadInfer{"UnknownOutput", [](auto* r) { r->add_outputs()->set_name("logits"); },
                 grpc::StatusCode::INVALID_ARGUMENT, "outputs[0]"}),
    [](const ::testing::TestParamInfo<BadInfer>& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------------
// A device fault: on a GPU a token id beyond an embedding table (a model whose config sets no
// max_value) is a device-side assert, after which every batch of the process fails whatever its
// inputs. The culprit gets a short message, and the server turns liveness and readiness off so that
// an orchestrator restarts it. A server of its own: the fault would fail every later test.

TEST(DeviceFaultTest, ADeviceSideAssertTurnsLivenessAndReadinessOff) {
  if (TestDevice() == "cpu") GTEST_SKIP() << "a CUDA fault needs a GPU (GRAPHSERVE_TEST_DEVICE=cuda)";
  ServerProcess server(GRAPHSERVE_BINARY,
                       {"--device", TestDevice(), "--model-repository", MODEL_REPOSITORY, "--model-control-mode",
                        "explicit", "--load-model", "tiny_strict"},
                       std::string(TEST_OUTPUT_DIR) + "/device_fault_server.log");
  ASSERT_TRUE(server.WaitUntilReady(kServerStartTimeout)) << server.Log();
  // The load warned of it: tiny_strict's config bounds neither integer input.
  EXPECT_NE(server.Log().find("model 'tiny_strict': integer input(s) 'input_ids', 'attention_mask' have no max_value"),
            std::string::npos)
      << server.Log();
  auto stub = server.NewStub();
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(stub.get(), TokenRequest("tiny_strict", {{1, 2, 3}}), &response).ok()) << server.Log();

  const grpc::Status culprit = Infer(stub.get(), TokenRequest("tiny_strict", {{1, 5000, 3}}), &response);
  EXPECT_TRUE(culprit.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
              culprit.error_code() == grpc::StatusCode::INTERNAL)
      << culprit.error_code() << ": " << culprit.error_message();
  EXPECT_EQ(culprit.error_message().find('/'), std::string::npos) << culprit.error_message();

  const auto live = [&stub] {
    grpc::ClientContext context;
    inference::ServerLiveRequest request;
    inference::ServerLiveResponse answer;
    return stub->ServerLive(&context, request, &answer).ok() && answer.live();
  };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (live() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(live()) << server.Log();
  EXPECT_EQ(Exposition(HttpGet(server.metrics_port(), "/metrics").body).One("graphserve_device_faulted", {}), 1.0);
  grpc::ClientContext context;
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(stub->ServerReady(&context, inference::ServerReadyRequest(), &ready).ok());
  EXPECT_FALSE(ready.ready());
  EXPECT_EQ(Infer(stub.get(), TokenRequest("tiny_strict", {{1, 2, 3}}), &response).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(std::regex_search(server.Log(), std::regex("CUDA fault on cuda:[0-9]+: cudaError")))
      << server.Log();
  // The calls are drained, then the process leaves without freeing the faulted device's memory
  // (every free would throw), and says so in its status.
  EXPECT_EQ(server.Stop(SIGTERM, std::chrono::seconds(60)), 1) << server.Log();
  EXPECT_NE(server.Log().find("exiting with status 1 without releasing the models"), std::string::npos)
      << server.Log();
}

// ---------------------------------------------------------------------------------------------------
// Shutdown: SIGTERM stops accepting, finishes what is in flight, and exits 0.

TEST(ShutdownTest, SigtermFinishesInFlightRequestsAndExitsZero) {
  ServerProcess server(GRAPHSERVE_BINARY, {"--device", "cpu", "--model-repository", MODEL_REPOSITORY},
                       std::string(TEST_OUTPUT_DIR) + "/shutdown_server.log");
  ASSERT_TRUE(server.WaitUntilReady(kServerStartTimeout)) << server.Log();
  std::mt19937 random(5);
  std::vector<std::future<grpc::Status>> in_flight;
  for (int i = 0; i < 16; ++i) {
    inference::ModelInferRequest request = TokenRequest("encoder", RandomTokens(random, 8, 64));
    in_flight.push_back(std::async(std::launch::async, [&server, request] {
      inference::ModelInferResponse response;
      auto stub = server.NewStub();
      return Infer(stub.get(), request, &response);
    }));
  }
  // The signal goes only once the server holds every call (queued, executing or answered), so each
  // of them must be answered: a drain that drops or refuses one fails the test.
  const auto all_reached = [&server, &in_flight] {
    const Exposition scrape(HttpGet(server.metrics_port(), "/metrics").body);
    const double held =
        scrape.Sum("graphserve_requests_in_flight") + scrape.Sum("graphserve_requests_total");
    return held >= static_cast<double>(in_flight.size());
  };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!all_reached() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(all_reached()) << server.Log();
  EXPECT_EQ(server.Stop(SIGTERM, std::chrono::seconds(120)), 0) << server.Log();
  for (auto& call : in_flight) {
    const grpc::Status status = call.get();
    EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  }
  EXPECT_NE(server.Log().find("draining"), std::string::npos);
}

// A queue far longer than the drain timeout: SIGTERM ends the process within the drain timeout plus
// about one batch, whatever is still queued (answered CANCELLED or UNAVAILABLE, never left hanging).
TEST(ShutdownTest, SigtermWithALongQueueExitsWithinTheDrainTimeout) {
  ServerProcess server(GRAPHSERVE_BINARY,
                       {"--device", "cpu", "--model-repository", MODEL_REPOSITORY, "--drain-timeout-s", "1"},
                       std::string(TEST_OUTPUT_DIR) + "/bounded_drain_server.log");
  ASSERT_TRUE(server.WaitUntilReady(kServerStartTimeout)) << server.Log();
  std::mt19937 random(6);
  const inference::ModelInferRequest request = TokenRequest("encoder", RandomTokens(random, 8, 64));
  auto stub = server.NewStub();
  inference::ModelInferResponse response;
  const auto batch_start = std::chrono::steady_clock::now();
  ASSERT_TRUE(Infer(stub.get(), request, &response).ok());
  const auto one_batch = std::chrono::steady_clock::now() - batch_start;

  // Enough full batches for many seconds of work, all queued at once from one channel.
  AsyncCaller caller(server.address());
  const int calls = static_cast<int>(std::max<int64_t>(
      200, 20 * std::chrono::seconds(1) / std::max<std::chrono::nanoseconds>(one_batch, std::chrono::milliseconds(1))));
  for (int i = 0; i < calls; ++i) caller.Start(request, static_cast<size_t>(i), std::chrono::seconds(600));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto signalled = std::chrono::steady_clock::now();
  EXPECT_EQ(server.Stop(SIGTERM, std::chrono::seconds(120)), 0) << server.Log();
  const auto exit_after = std::chrono::steady_clock::now() - signalled;
  EXPECT_LT(exit_after, std::chrono::seconds(1) + 2 * one_batch + std::chrono::seconds(2))
      << "one batch takes " << std::chrono::duration_cast<std::chrono::milliseconds>(one_batch).count() << " ms";
  int answered = 0;
  while (caller.in_flight() > 0 && caller.Next() != nullptr) ++answered;
  EXPECT_EQ(answered, calls);
}

// A batch that never ends (a hung device) cannot hold the exit: past the drain timeout plus the
// 10 s grace for one batch the process leaves, status 1, saying why.
TEST(ShutdownTest, AHungBatchDoesNotHoldTheExitPastTheDrainTimeoutAndItsGrace) {
  ServerProcess server(GRAPHSERVE_BINARY,
                       {"--device", "cpu", "--model-repository", MODEL_REPOSITORY, "--drain-timeout-s", "1"},
                       std::string(TEST_OUTPUT_DIR) + "/hung_batch_server.log");
  ASSERT_TRUE(server.WaitUntilReady(kServerStartTimeout)) << server.Log();
  AsyncCaller caller(server.address());
  caller.Start(TokenRequest("tiny_spin", {{2'000'000'000, 1, 1}}), 0, std::chrono::seconds(600));
  // The batch is running once the scheduler has dispatched it.
  const auto dispatched = [&server] {
    const Exposition scrape(HttpGet(server.metrics_port(), "/metrics").body);
    return scrape.Sum("graphserve_batch_rows_total", {{"model", "tiny_spin"}}) >= 1.0;
  };
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!dispatched() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto signalled = std::chrono::steady_clock::now();
  EXPECT_EQ(server.Stop(SIGTERM, std::chrono::seconds(60)), 1) << server.Log();
  const auto exit_after = std::chrono::steady_clock::now() - signalled;
  EXPECT_GE(exit_after, std::chrono::seconds(10));
  EXPECT_LT(exit_after, std::chrono::seconds(16));
  EXPECT_NE(server.Log().find("exiting without it"), std::string::npos) << server.Log();
}

}  // namespace
}  // namespace graphserve::testing
