// Black-box tests of ModelStreamInfer against the real graphserve binary: many requests on one
// stream, answered as they finish and matched by id, equal to the same requests sent unary, the bad
// ones answered in error_message with the unary call's message while the stream goes on, and counted
// in /metrics as the unary calls are; a stream the client cancels; and streams open when the server
// drains.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "async_calls.h"
#include "http_get.h"
#include "infer_helpers.h"
#include "prometheus_text.h"
#include "server_process.h"
#include "shared_server_test.h"

namespace graphserve::testing {
namespace {

using std::chrono::seconds;
using Stub = inference::GRPCInferenceService::Stub;

Exposition Scrape(const ServerProcess& server) {
  return Exposition(HttpGet(server.metrics_port(), "/metrics").body);
}

grpc::Status Infer(Stub* stub, const inference::ModelInferRequest& request,
                   inference::ModelInferResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(120));
  return stub->ModelInfer(&context, request, response);
}

struct Streamed {
  grpc::Status status;
  std::vector<inference::ModelStreamInferResponse> answers;  // in the order they arrived
};

// Writes every request on one stream from a thread of its own while this thread reads the answers as
// they come, half-closes after the last, and returns the answers and the stream's status.
Streamed StreamAll(Stub* stub, const std::vector<inference::ModelInferRequest>& requests) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(120));
  auto stream = stub->ModelStreamInfer(&context);
  std::thread writer([&stream, &requests] {
    for (const auto& request : requests) {
      if (!stream->Write(request)) break;
    }
    stream->WritesDone();
  });
  Streamed streamed;
  inference::ModelStreamInferResponse answer;
  while (stream->Read(&answer)) streamed.answers.push_back(answer);
  writer.join();
  streamed.status = stream->Finish();
  return streamed;
}

// Polls `condition` until it holds or a minute passes; returns whether it held.
bool Eventually(const std::function<bool()>& condition) {
  const auto give_up = std::chrono::steady_clock::now() + seconds(60);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Every request the server holds for `model`: answered (counted under some code) or in flight.
double HeldRequests(const Exposition& scrape, const std::string& model) {
  return scrape.Sum("graphserve_requests_total", {{"model", model}}) +
         scrape.Sum("graphserve_requests_in_flight", {{"model", model}});
}

// A request that must fail, how, and what its message must name.
struct BadRequest {
  std::function<void(inference::ModelInferRequest*)> corrupt;
  grpc::StatusCode code;
  std::string field;
};

std::vector<BadRequest> BadRequests() {
  return {
      {[](inference::ModelInferRequest* r) { r->mutable_inputs(0)->set_datatype("FP32"); },
       grpc::StatusCode::INVALID_ARGUMENT, "input_ids"},
      {[](inference::ModelInferRequest* r) { r->set_model_name("no_such_model"); },
       grpc::StatusCode::NOT_FOUND, "no_such_model"},
      {[](inference::ModelInferRequest* r) {
         r->mutable_inputs()->RemoveLast();
         if (r->raw_input_contents_size() == 2) r->mutable_raw_input_contents()->RemoveLast();
       },
       grpc::StatusCode::INVALID_ARGUMENT, "attention_mask"},
      {[](inference::ModelInferRequest* r) {
         std::mt19937 random(1);
         const std::string id = r->id();
         *r = TokenRequest("encoder", RandomTokens(random, 1, 65));
         r->set_id(id);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "max_sequence_length"},
      {[](inference::ModelInferRequest* r) { (*r->mutable_parameters())["sequence_id"].set_int64_param(1); },
       grpc::StatusCode::INVALID_ARGUMENT, "sequence_id"},
  };
}

// ---------------------------------------------------------------------------------------------------
// One server for the suite: the integration repository on the CPU.

struct StreamSuite {
  static constexpr const char* kLogName = "stream_server.log";
  static std::vector<std::string> Flags() {
    return {"--device", "cpu", "--model-repository", MODEL_REPOSITORY};
  }
};
using StreamInferTest = SharedServerTest<StreamSuite>;

TEST_F(StreamInferTest, ManyRequestsOnOneStreamAnswerAsUnaryCallsAndCountAlike) {
  auto stub = server_->NewStub();
  std::vector<inference::ModelInferRequest> requests = MixedLengthRequests("encoder", 50, 23);
  // Bad requests interleaved with good ones: each must fail alone.
  const std::vector<BadRequest> bad_kinds = BadRequests();
  std::map<size_t, BadRequest> bad;
  for (size_t k = 0; k < bad_kinds.size(); ++k) {
    const size_t i = 3 + 9 * k;
    bad_kinds[k].corrupt(&requests[i]);
    bad.emplace(i, bad_kinds[k]);
  }
  size_t good = 0;
  double good_rows = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (bad.count(i) == 0) {
      ++good;
      good_rows += static_cast<double>(requests[i].inputs(0).shape(0));
    }
  }

  // The same requests unary, one at a time: the reference answers, statuses and counts.
  const Exposition before_unary = Scrape(*server_);
  std::vector<grpc::Status> unary_status(requests.size());
  std::vector<inference::ModelInferResponse> unary(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    unary_status[i] = Infer(stub.get(), requests[i], &unary[i]);
    if (bad.count(i) == 0) {
      ASSERT_TRUE(unary_status[i].ok()) << "request " << i << ": " << unary_status[i].error_message();
    } else {
      ASSERT_EQ(unary_status[i].error_code(), bad.at(i).code) << unary_status[i].error_message();
    }
  }
  // A success is counted once its answer is written, which its client may see first.
  const Labels encoder_success = {{"model", "encoder"}, {"code", "success"}};
  ASSERT_TRUE(Eventually([&] {
    return Scrape(*server_).Sum("graphserve_requests_total", encoder_success) -
               before_unary.Sum("graphserve_requests_total", encoder_success) ==
           static_cast<double>(requests.size() - bad.size());
  }));
  const Exposition after_unary = Scrape(*server_);

  const Streamed streamed = StreamAll(stub.get(), requests);
  const Exposition after_stream = Scrape(*server_);
  ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  ASSERT_EQ(streamed.answers.size(), requests.size());

  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < requests.size(); ++i) index_of[requests[i].id()] = i;
  std::set<size_t> answered;
  for (const inference::ModelStreamInferResponse& answer : streamed.answers) {
    const inference::ModelInferResponse& response = answer.infer_response();
    ASSERT_EQ(index_of.count(response.id()), 1u) << "unknown id '" << response.id() << "'";
    const size_t i = index_of.at(response.id());
    EXPECT_TRUE(answered.insert(i).second) << "request " << i << " answered twice";
    EXPECT_EQ(response.model_name(), requests[i].model_name()) << "request " << i;
    if (bad.count(i) != 0) {
      // The unary call's message, no more; naming the field.
      EXPECT_EQ(answer.error_message(), unary_status[i].error_message()) << "request " << i;
      EXPECT_NE(answer.error_message().find(bad.at(i).field), std::string::npos) << answer.error_message();
      EXPECT_EQ(response.outputs_size(), 0) << "request " << i;
      continue;
    }
    ASSERT_EQ(answer.error_message(), "") << "request " << i;
    EXPECT_EQ(response.model_version(), unary[i].model_version());
    ASSERT_EQ(response.outputs_size(), unary[i].outputs_size()) << "request " << i;
    for (const char* name : {"last_hidden_state", "pooler_output"}) {
      const FloatOutput streamed_output = GetFloatOutput(response, name);
      const FloatOutput unary_output = GetFloatOutput(unary[i], name);
      ASSERT_TRUE(streamed_output.found) << name << " of request " << i;
      EXPECT_EQ(streamed_output.shape, unary_output.shape) << name << " of request " << i;
      EXPECT_LT(MaxRelativeDifference(streamed_output.values, unary_output.values), 1e-4)
          << name << " of request " << i;
    }
  }
  EXPECT_EQ(answered.size(), requests.size());

  // Counted as the unary calls were, code by code, for the model and for unrouted requests.
  for (const std::string& model : {std::string("encoder"), std::string("")}) {
    std::set<std::string> codes;
    for (const Sample& sample : after_stream.Find("graphserve_requests_total", {{"model", model}})) {
      codes.insert(sample.labels.at("code"));
    }
    for (const std::string& code : codes) {
      const Labels labels = {{"model", model}, {"code", code}};
      EXPECT_EQ(after_stream.Sum("graphserve_requests_total", labels) -
                    after_unary.Sum("graphserve_requests_total", labels),
                after_unary.Sum("graphserve_requests_total", labels) -
                    before_unary.Sum("graphserve_requests_total", labels))
          << "model '" << model << "', code " << code;
    }
  }
  const Labels encoder = {{"model", "encoder"}};
  EXPECT_EQ(after_stream.Sum("graphserve_requests_total", {{"model", "encoder"}, {"code", "success"}}) -
                after_unary.Sum("graphserve_requests_total", {{"model", "encoder"}, {"code", "success"}}),
            static_cast<double>(good));
  EXPECT_EQ(after_stream.One("graphserve_requests_in_flight", encoder), 0.0);

  // Each good stream request ran exactly once, and some batch held several of them.
  EXPECT_EQ(after_stream.Sum("graphserve_batch_rows_total", encoder) -
                after_unary.Sum("graphserve_batch_rows_total", encoder),
            good_rows);
  EXPECT_LT(after_stream.Sum("graphserve_batches_total", encoder) -
                after_unary.Sum("graphserve_batches_total", encoder),
            static_cast<double>(good))
      << "no batch held more than one stream request";
}

TEST_F(StreamInferTest, ACancelledStreamHasEachRequestAnsweredOnceAndTheServerServesOn) {
  auto stub = server_->NewStub();
  std::mt19937 random(31);
  constexpr int kRequests = 40;
  const Exposition before = Scrape(*server_);
  {
    grpc::ClientContext context;
    auto stream = stub->ModelStreamInfer(&context);
    for (int i = 0; i < kRequests; ++i) {
      ASSERT_TRUE(stream->Write(TokenRequest("encoder", RandomTokens(random, 3, 64))));
    }
    // Cancelled only once the server holds all of them, queued, running or answered.
    ASSERT_TRUE(Eventually([&] {
      return HeldRequests(Scrape(*server_), "encoder") - HeldRequests(before, "encoder") >= kRequests;
    }));
    context.TryCancel();
    inference::ModelStreamInferResponse answer;
    while (stream->Read(&answer)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  // Every request leaves the server answered exactly once, cancelled in the queue or run (a run
  // one's answer is counted once its write failed or was dropped).
  const Labels encoder = {{"model", "encoder"}};
  ASSERT_TRUE(Eventually([&] {
    const Exposition now = Scrape(*server_);
    return now.One("graphserve_requests_in_flight", encoder) == 0.0 &&
           now.One("graphserve_queue_depth", encoder) == 0.0 &&
           now.Sum("graphserve_requests_total", encoder) - before.Sum("graphserve_requests_total", encoder) >=
               kRequests;
  }));
  const Exposition after = Scrape(*server_);
  EXPECT_EQ(after.Sum("graphserve_requests_total", encoder) -
                before.Sum("graphserve_requests_total", encoder),
            kRequests);
  // Most of them were still queued when the stream went (a CPU runs 40 such requests in tens of
  // batches): the cancellation reached the scheduler.
  const Labels cancelled = {{"model", "encoder"}, {"code", "cancelled"}};
  EXPECT_GT(after.Sum("graphserve_requests_total", cancelled) -
                before.Sum("graphserve_requests_total", cancelled),
            0.0);
  for (const Sample& sample : after.Find("graphserve_requests_total", encoder)) {
    const std::string& code = sample.labels.at("code");
    if (code != "success" && code != "cancelled") {
      EXPECT_EQ(sample.value, before.Sum("graphserve_requests_total", sample.labels)) << code;
    }
  }
  inference::ModelInferResponse response;
  const grpc::Status status =
      Infer(stub.get(), TokenRequest("encoder", RandomTokens(random, 1, 8)), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

// ---------------------------------------------------------------------------------------------------
// Streams open when the server is told to stop: each a server of its own.

TEST(StreamShutdownTest, AStreamOpenAtSigtermGetsItsAnswersAndFinishesOk) {
  ServerProcess server(GRAPHSERVE_BINARY, {"--device", "cpu", "--model-repository", MODEL_REPOSITORY},
                       std::string(TEST_OUTPUT_DIR) + "/stream_shutdown_server.log");
  ASSERT_TRUE(server.WaitUntilReady(kServerStartTimeout)) << server.Log();
  auto stub = server.NewStub();
  std::mt19937 random(37);
  constexpr int kRequests = 16;
  grpc::ClientContext context;
  auto stream = stub->ModelStreamInfer(&context);
  for (int i = 0; i < kRequests; ++i) {
    inference::ModelInferRequest request = TokenRequest("encoder", RandomTokens(random, 8, 64));
    request.set_id("drained-" + std::to_string(i));
    ASSERT_TRUE(stream->Write(request));
  }
  ASSERT_TRUE(Eventually([&] { return HeldRequests(Scrape(server), "encoder") >= kRequests; }))
      << server.Log();
  // The signal, without waiting for the exit: the server must wait for this stream.
  EXPECT_EQ(server.Stop(SIGTERM, seconds(0)), -2);
  ASSERT_TRUE(Eventually([&] { return server.Log().find("draining") != std::string::npos; }));

  std::set<std::string> ids;
  inference::ModelStreamInferResponse answer;
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(stream->Read(&answer)) << "answer " << i << " of " << kRequests;
    EXPECT_EQ(answer.error_message(), "");
    ids.insert(answer.infer_response().id());
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(kRequests));
  // What the stream sends while the server drains is refused, each request on its own.
  inference::ModelInferRequest late = TokenRequest("encoder", RandomTokens(random, 1, 8));
  late.set_id("late");
  ASSERT_TRUE(stream->Write(late));
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_EQ(answer.infer_response().id(), "late");
  EXPECT_NE(answer.error_message().find("shutting down"), std::string::npos) << answer.error_message();

  ASSERT_TRUE(stream->WritesDone());
  EXPECT_FALSE(stream->Read(&answer));
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_code() << ": " << status.error_message();
  EXPECT_EQ(server.Stop(SIGTERM, seconds(120)), 0) << server.Log();
}

TEST(StreamShutdownTest, TheDrainTimeoutCancelsAStreamLeftOpen) {
  const std::string root = std::string(TEST_OUTPUT_DIR) + "/stream_drain_repository";
  ASSERT_TRUE(WriteProjectionRepository(root, ProjectionConfig(8, 64, 1),
                                        std::string(MODEL_REPOSITORY) + "/tiny_traced/model.pt"));
  ServerProcess server(GRAPHSERVE_BINARY,
                       {"--device", "cpu", "--model-repository", root, "--drain-timeout-s", "1"},
                       std::string(TEST_OUTPUT_DIR) + "/stream_drain_server.log");
  ASSERT_TRUE(server.WaitUntilReady(kServerStartTimeout)) << server.Log();
  auto stub = server.NewStub();
  grpc::ClientContext context;
  auto stream = stub->ModelStreamInfer(&context);
  ASSERT_TRUE(stream->Write(TokenRequest("projection", {{5, 6, 7}})));
  inference::ModelStreamInferResponse answer;
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_EQ(answer.error_message(), "");

  // Never half-closed: the drain gives up on it after a second, and the server still exits 0.
  EXPECT_EQ(server.Stop(SIGTERM, seconds(60)), 0) << server.Log();
  EXPECT_FALSE(stream->Read(&answer));
  EXPECT_FALSE(stream->Finish().ok());
}

}  // namespace
}  // namespace graphserve::testing
