// InferenceClient against an in-process fake GRPCInferenceService on 127.0.0.1: readiness polling,
// per-call deadlines, large responses and the echo of ModelInfer shapes.
#include <atomic>
#include <chrono>
#include <climits>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "graphserve/client/client.h"

namespace graphserve {
namespace {

using std::chrono::milliseconds;

// Answers ServerReady false `not_ready_answers` times, then true. ModelInfer echoes every input as an
// output of the same name, datatype, shape and data (raw stays raw, typed stays typed); model "slow"
// answers only once the client has gone, and model "big" answers 8 MiB, twice gRPC's default limit.
class FakeInferenceService final : public inference::GRPCInferenceService::Service {
 public:
  explicit FakeInferenceService(int not_ready_answers) : not_ready_answers_(not_ready_answers) {}

  int ready_calls() const { return ready_calls_.load(); }
  int ready_calls_without_token() const { return ready_calls_without_token_.load(); }

  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse* response) override {
    response->set_live(true);
    return grpc::Status::OK;
  }

  grpc::Status ServerReady(grpc::ServerContext* context, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* response) override {
    const auto authorization = context->client_metadata().find("authorization");
    if (authorization == context->client_metadata().end()) ++ready_calls_without_token_;
    const int call = ++ready_calls_;
    response->set_ready(call > not_ready_answers_);
    return grpc::Status::OK;
  }

  grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest* request,
                          inference::ModelReadyResponse* response) override {
    response->set_ready(request->name() == "encoder");
    return grpc::Status::OK;
  }

  grpc::Status ServerMetadata(grpc::ServerContext*, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse* response) override {
    response->set_name("fake");
    response->set_version("0.0.1");
    return grpc::Status::OK;
  }

  grpc::Status ModelMetadata(grpc::ServerContext*, const inference::ModelMetadataRequest* request,
                             inference::ModelMetadataResponse* response) override {
    if (request->name() != "encoder") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no model " + request->name());
    }
    response->set_name("encoder");
    auto* input = response->add_inputs();
    input->set_name("input_ids");
    input->set_datatype("INT64");
    input->add_shape(-1);
    input->add_shape(-1);
    return grpc::Status::OK;
  }

  grpc::Status ModelInfer(grpc::ServerContext* context, const inference::ModelInferRequest* request,
                          inference::ModelInferResponse* response) override {
    response->set_model_name(request->model_name());
    response->set_id(request->id());
    if (request->model_name() == "slow") {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!context->IsCancelled() && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(milliseconds(5));
      }
      return grpc::Status::OK;
    }
    if (request->model_name() == "big") {
      auto* output = response->add_outputs();
      output->set_name("big");
      output->set_datatype("FP32");
      for (int64_t dim : {2, 1024, 1024}) output->add_shape(dim);
      response->add_raw_output_contents()->assign(size_t{8} << 20, '\0');
      return grpc::Status::OK;
    }
    for (int i = 0; i < request->inputs_size(); ++i) {
      const auto& input = request->inputs(i);
      auto* output = response->add_outputs();
      output->set_name(input.name());
      output->set_datatype(input.datatype());
      *output->mutable_shape() = input.shape();
      if (request->raw_input_contents_size() > 0) {
        *response->add_raw_output_contents() = request->raw_input_contents(i);
      } else {
        *output->mutable_contents() = input.contents();
      }
    }
    return grpc::Status::OK;
  }

 private:
  const int not_ready_answers_;
  std::atomic<int> ready_calls_{0};
  std::atomic<int> ready_calls_without_token_{0};
};

// Starts `service` on 127.0.0.1:`port` (0: any free port); *bound_port receives the port.
std::unique_ptr<grpc::Server> StartServer(grpc::Service* service, int port, int* bound_port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(),
                           bound_port);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

class InferenceClientTest : public ::testing::Test {
 protected:
  void Start(int not_ready_answers) {
    service_ = std::make_unique<FakeInferenceService>(not_ready_answers);
    server_ = StartServer(service_.get(), 0, &port_);
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }

  InferenceClient MakeClient(int64_t timeout_ms = 5000, const std::string& token = "") {
    ClientOptions options;
    options.timeout_ms = timeout_ms;
    options.token = token;
    options.ready_poll_interval_ms = 10;
    return InferenceClient("127.0.0.1:" + std::to_string(port_), options);
  }

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  std::unique_ptr<FakeInferenceService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(InferenceClientTest, WaitForReadyPollsUntilTheServerSaysReady) {
  Start(/*not_ready_answers=*/3);
  InferenceClient client = MakeClient();
  bool ready = true;
  ASSERT_TRUE(client.ServerReady(&ready).ok());
  EXPECT_FALSE(ready);

  const grpc::Status status = client.WaitForReady(milliseconds(10000));
  EXPECT_TRUE(status.ok()) << status.error_message();
  // 1 call above, 2 more "false" answers, then the "true" one: WaitForReady stops at the first true.
  EXPECT_EQ(service_->ready_calls(), 4);
}

// A server whose health probes need a token (--auth-health) gets it while waiting too: without
// it, `graphserve-cli health --wait-s` polled unauthenticated until the wait ran out.
TEST_F(InferenceClientTest, WaitForReadySendsTheToken) {
  Start(/*not_ready_answers=*/2);
  InferenceClient client = MakeClient(5000, "secret");
  ASSERT_TRUE(client.WaitForReady(milliseconds(10000)).ok());
  EXPECT_EQ(service_->ready_calls(), 3);
  EXPECT_EQ(service_->ready_calls_without_token(), 0);
}

TEST_F(InferenceClientTest, WaitForReadyGivesUpAfterItsTimeout) {
  Start(/*not_ready_answers=*/INT_MAX);
  InferenceClient client = MakeClient();
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status status = client.WaitForReady(milliseconds(300));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(status.error_message().find("ready=false"), std::string::npos) << status.error_message();
  EXPECT_GE(elapsed, milliseconds(300));
  EXPECT_LT(elapsed, milliseconds(3000));
  EXPECT_GT(service_->ready_calls(), 2);
}

TEST(InferenceClientNoServerTest, WaitForReadyReportsTheConnectionErrorAndThenFindsALateServer) {
  // Learn a free port, then free it again.
  FakeInferenceService service(/*not_ready_answers=*/0);
  int port = 0;
  StartServer(&service, 0, &port)->Shutdown();
  ASSERT_GT(port, 0);

  ClientOptions options;
  options.ready_poll_interval_ms = 10;
  InferenceClient client("127.0.0.1:" + std::to_string(port), options);
  const grpc::Status refused = client.WaitForReady(milliseconds(200));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(refused.error_message().find("UNAVAILABLE"), std::string::npos)
      << refused.error_message();

  // Connection failures are retried: a server that comes up while the client waits is found.
  auto waited = std::async(std::launch::async, [&] { return client.WaitForReady(milliseconds(20000)); });
  std::this_thread::sleep_for(milliseconds(1500));
  int bound_port = 0;
  std::unique_ptr<grpc::Server> late = StartServer(&service, port, &bound_port);
  ASSERT_EQ(bound_port, port);
  const grpc::Status status = waited.get();
  EXPECT_TRUE(status.ok()) << status.error_message();
  late->Shutdown();
}

TEST_F(InferenceClientTest, HealthAndMetadataCallsReachTheService) {
  Start(/*not_ready_answers=*/0);
  InferenceClient client = MakeClient();
  bool live = false;
  ASSERT_TRUE(client.ServerLive(&live).ok());
  EXPECT_TRUE(live);
  bool ready = false;
  ASSERT_TRUE(client.ModelReady("encoder", &ready).ok());
  EXPECT_TRUE(ready);
  ASSERT_TRUE(client.ModelReady("other", &ready).ok());
  EXPECT_FALSE(ready);

  inference::ServerMetadataResponse server;
  ASSERT_TRUE(client.ServerMetadata(&server).ok());
  EXPECT_EQ(server.name(), "fake");
  inference::ModelMetadataResponse model;
  ASSERT_TRUE(client.ModelMetadata("encoder", &model).ok());
  ASSERT_EQ(model.inputs_size(), 1);
  EXPECT_EQ(model.inputs(0).name(), "input_ids");
  EXPECT_EQ(client.ModelMetadata("missing", &model).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(InferenceClientTest, ModelInferRoundTripsARawTokenRequest) {
  Start(/*not_ready_answers=*/0);
  InferenceClient client = MakeClient();
  RequestSpec spec;
  spec.model = "encoder";
  spec.request_id = "abc";
  spec.rows = 2;
  spec.length = 5;
  inference::ModelInferRequest request;
  ASSERT_TRUE(MakeTokenRequest(spec, &request).ok());

  inference::ModelInferResponse response;
  const grpc::Status status = client.ModelInfer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.id(), "abc");
  EXPECT_EQ(response.model_name(), "encoder");

  OutputView ids;
  ASSERT_TRUE(FindOutput(response, "input_ids", &ids).ok());
  EXPECT_EQ(ids.datatype, "INT64");
  EXPECT_EQ(ids.shape, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(ids.raw, request.raw_input_contents(0));
  OutputView mask;
  ASSERT_TRUE(FindOutput(response, "attention_mask", &mask).ok());
  std::vector<int64_t> ones;
  ASSERT_TRUE(OutputAsInt64s(mask, &ones).ok());
  EXPECT_EQ(ones, std::vector<int64_t>(10, 1));
}

TEST_F(InferenceClientTest, ModelInferRoundTripsATypedRequestBuiltFromMetadata) {
  Start(/*not_ready_answers=*/0);
  InferenceClient client = MakeClient();
  inference::ModelMetadataResponse metadata;
  ASSERT_TRUE(client.ModelMetadata("encoder", &metadata).ok());
  RequestSpec spec;
  spec.ids = {101, 7, 102};
  spec.encoding = InputEncoding::kTyped;
  inference::ModelInferRequest request;
  ASSERT_TRUE(MakeRequestFromMetadata(metadata, spec, &request).ok());

  inference::ModelInferResponse response;
  ASSERT_TRUE(client.ModelInfer(request, &response).ok());
  OutputView ids;
  ASSERT_TRUE(FindOutput(response, "input_ids", &ids).ok());
  EXPECT_NE(ids.typed, nullptr);
  EXPECT_EQ(ids.shape, (std::vector<int64_t>{1, 3}));
  std::vector<int64_t> values;
  ASSERT_TRUE(OutputAsInt64s(ids, &values).ok());
  EXPECT_EQ(values, (std::vector<int64_t>{101, 7, 102}));
}

TEST_F(InferenceClientTest, EachCallHasTheConfiguredDeadline) {
  Start(/*not_ready_answers=*/0);
  InferenceClient client = MakeClient(/*timeout_ms=*/100);
  inference::ModelInferRequest request;
  request.set_model_name("slow");
  inference::ModelInferResponse response;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(client.ModelInfer(request, &response).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(5000));
  // The next call gets a fresh deadline, not what is left of an old one.
  bool live = false;
  EXPECT_TRUE(client.ServerLive(&live).ok());
}

TEST_F(InferenceClientTest, ResponsesLargerThanFourMebibytesArrive) {
  Start(/*not_ready_answers=*/0);
  InferenceClient client = MakeClient();
  inference::ModelInferRequest request;
  request.set_model_name("big");
  inference::ModelInferResponse response;
  const grpc::Status status = client.ModelInfer(request, &response);
  ASSERT_TRUE(status.ok()) << graphserve::StatusCodeName(status.error_code()) << ": "
                           << status.error_message();
  OutputView big;
  ASSERT_TRUE(FindOutput(response, "big", &big).ok());
  EXPECT_EQ(big.raw.size(), size_t{8} << 20);
}

// What a person types: a missing port gets graphserve's default, the rest passes as typed.
TEST(ServerAddressTest, AcceptedAddressesAreWhatGrpcConnectsTo) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"localhost", "localhost:8001"},       {"localhost:9000", "localhost:9000"},
      {"10.0.0.7", "10.0.0.7:8001"},         {"[::1]", "[::1]:8001"},
      {"[::1]:65535", "[::1]:65535"},        {"unix:/run/graphserve.sock", "unix:/run/graphserve.sock"}};
  for (const auto& [typed, expected] : cases) {
    std::string normalized;
    std::string error;
    EXPECT_TRUE(NormalizeServerAddress(typed, &normalized, &error)) << typed << ": " << error;
    EXPECT_EQ(normalized, expected) << typed;
  }
}

// Each mistake is refused with what to type instead, never turned into another address.
TEST(ServerAddressTest, MistakesSayWhatToTypeInstead) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"http://localhost:8001", "drop the scheme"}, {"grpc://host", "drop the scheme"},
      {"localhost:99999", "from 1 to 65535"},       {"localhost:0", "from 1 to 65535"},
      {"localhost:", "from 1 to 65535"},            {"localhost:80a", "from 1 to 65535"},
      {"::1", "in brackets"},                       {"[::1", "closing ']'"},
      {"[::1]x", "':PORT' after ']'"},              {":8001", "no host"},
      {"", "no host"}};
  for (const auto& [typed, expected] : cases) {
    std::string normalized = "unchanged";
    std::string error;
    EXPECT_FALSE(NormalizeServerAddress(typed, &normalized, &error)) << typed;
    EXPECT_NE(error.find(expected), std::string::npos) << typed << ": " << error;
    EXPECT_EQ(normalized, "unchanged") << typed;
  }
}

// graphserve-loadgen's --http-address: the REST port's default, no unix: paths, the same checks.
TEST(ServerAddressTest, HttpAddressesGetTheRestPort) {
  std::string normalized;
  std::string error;
  EXPECT_TRUE(NormalizeHttpAddress("127.0.0.1", &normalized, &error)) << error;
  EXPECT_EQ(normalized, "127.0.0.1:8000");
  EXPECT_TRUE(NormalizeHttpAddress("[::1]:9000", &normalized, &error)) << error;
  EXPECT_EQ(normalized, "[::1]:9000");
  for (const auto& [typed, expected] :
       std::vector<std::pair<std::string, std::string>>{{"http://127.0.0.1:8000", "graphserve's REST address is"},
                                                        {"::1", "e.g. [::1]:8000"},
                                                        {"unix:/run/graphserve.sock", "from 1 to 65535"}}) {
    EXPECT_FALSE(NormalizeHttpAddress(typed, &normalized, &error)) << typed;
    EXPECT_NE(error.find(expected), std::string::npos) << typed << ": " << error;
  }
}

// gRPC's own transport wording becomes a sentence naming the address; a server's answer is kept.
TEST(DescribeCallErrorTest, RefusedConnectionNamesTheAddressAndAServerAnswerIsKept) {
  ClientOptions options;
  options.timeout_ms = 5000;
  InferenceClient client("127.0.0.1:1", options);  // port 1: nothing listens there
  bool live = false;
  const grpc::Status refused = client.ServerLive(&live);
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_EQ(DescribeCallError(refused, client.address()),
            "cannot reach graphserve at 127.0.0.1:1 (connection refused); is it running?")
      << refused.error_message();

  // gRPC 1.51's words for an HTTP/1.x peer, e.g. the metrics endpoint.
  const grpc::Status http1(grpc::StatusCode::UNAVAILABLE,
                           "failed to connect to all addresses; last error: UNAVAILABLE: "
                           "ipv4:127.0.0.1:8002: Trying to connect an http1.x server");
  EXPECT_NE(DescribeCallError(http1, "localhost:8002").find("is it graphserve's metrics port?"),
            std::string::npos);

  const grpc::Status answered(grpc::StatusCode::NOT_FOUND, "model_name: unknown model 'x'");
  EXPECT_EQ(DescribeCallError(answered, "localhost:8001"), "NOT_FOUND: model_name: unknown model 'x'");
}

}  // namespace
}  // namespace graphserve
