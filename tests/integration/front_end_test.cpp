// The non-blocking front end, black-box: the real graphserve binary holds more than a thousand
// ModelInfer calls at once on one connection, and answers each with its own result; a call cancelled
// while queued never runs (with busy polling on); and many short calls at once batch beyond max_batch_size within the
// default grid's token budget.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <thread>

#include "async_calls.h"
#include "http_get.h"
#include "infer_helpers.h"
#include "prometheus_text.h"
#include "server_process.h"

namespace graphserve::testing {
namespace {

constexpr int kCalls = 1200;

TEST(FrontEndTest, HoldsOverAThousandCallsInFlightAndAnswersEachWithItsOwnResult) {
  const std::string root = std::string(TEST_OUTPUT_DIR) + "/front_end_repository";
  ASSERT_TRUE(WriteProjectionRepository(root, ProjectionConfig(8, 2 * kCalls, 2),
                                        std::string(MODEL_REPOSITORY) + "/tiny_traced/model.pt"));
  ServerProcess server(GRAPHSERVE_BINARY,
                       {"--device", "cpu", "--model-repository", root, "--log-level", "debug"},
                       std::string(TEST_OUTPUT_DIR) + "/front_end_server.log");
  ASSERT_TRUE(server.WaitUntilReady(std::chrono::seconds(240))) << server.Log();

  // Random token ids of random shapes: the model maps each token on its own, so a token's 4 numbers
  // are the same wherever it appears, and a request answered with another's rows would break that.
  std::mt19937 random(7);
  std::uniform_int_distribution<int64_t> rows(1, 4), length(1, 64);
  std::vector<inference::ModelInferRequest> requests;
  for (int i = 0; i < kCalls; ++i) {
    requests.push_back(
        TokenRequest("projection", RandomTokens(random, rows(random), length(random)), i % 3 != 0));
    requests.back().set_id("call-" + std::to_string(i));
  }

  AsyncCaller caller(server.address());
  for (int i = 0; i < kCalls; ++i)
    caller.Start(requests[i], static_cast<size_t>(i), std::chrono::seconds(120));
  // Every call was sent before any answer was read.
  EXPECT_EQ(caller.in_flight(), kCalls);

  std::vector<int> answers(kCalls, 0);
  std::map<int64_t, std::vector<float>> token_values;
  for (int received = 0; received < kCalls; ++received) {
    std::unique_ptr<AsyncCall> call = caller.Next();
    ASSERT_NE(call, nullptr);
    const size_t i = call->index;
    ++answers[i];
    ASSERT_TRUE(call->status.ok()) << "call " << i << ": " << call->status.error_message();
    EXPECT_EQ(call->response.id(), requests[i].id());

    const inference::InferTensorContents& ids_contents = requests[i].inputs(0).contents();
    std::vector<int64_t> ids(ids_contents.int64_contents().begin(),
                             ids_contents.int64_contents().end());
    if (ids.empty()) {  // raw input contents
      const std::string& raw = requests[i].raw_input_contents(0);
      ids.resize(raw.size() / sizeof(int64_t));
      std::memcpy(ids.data(), raw.data(), raw.size());
    }
    const int64_t request_rows = requests[i].inputs(0).shape(0);
    const int64_t request_length = requests[i].inputs(0).shape(1);
    const FloatOutput projected = GetFloatOutput(call->response, "projected");
    ASSERT_EQ(projected.shape, (std::vector<int64_t>{request_rows, request_length, 4}))
        << "call " << i;
    for (size_t t = 0; t < ids.size(); ++t) {
      const std::vector<float> values(projected.values.begin() + 4 * t,
                                      projected.values.begin() + 4 * t + 4);
      auto [known, inserted] = token_values.emplace(ids[t], values);
      if (!inserted) {
        ASSERT_EQ(known->second, values) << "token " << ids[t] << " in call " << i;
      }
    }
  }
  for (int i = 0; i < kCalls; ++i) EXPECT_EQ(answers[i], 1) << "call " << i;
  // Distinct tokens seen many times over: the consistency check above had teeth.
  EXPECT_GT(token_values.size(), 900u);

  // The server held many at once: it batched them.
  EXPECT_TRUE(std::regex_search(server.Log(),
                                std::regex("model 'projection' on cpu: batch requests=[2-8] ")))
      << "no batch of several requests was formed";
  EXPECT_EQ(server.Stop(SIGTERM, std::chrono::seconds(60)), 0) << server.Log();
}

// The default grid's token budget, black-box: a model whose requests carry at most 4 rows batches
// short requests that arrive together by the hundred (the default budget is 16384 tokens), and
// with the budget turned off (max_batch_tokens: 0) never more than 4 rows.
// A call its client cancels while it waits in the queue reaches the scheduler (the completion
// queue's done notification): it leaves the queue without running and is counted as cancelled.
// With busy polling on (the default on hosts of 8 cores or more, off on CI's), so that the polling
// completion queues and batcher see the arrival, the cancellation and the shutdown too.
TEST(FrontEndTest, ACallCancelledWhileQueuedLeavesTheQueueUnrun) {
  ServerProcess server(GRAPHSERVE_BINARY,
                       {"--device", "cpu", "--model-repository", MODEL_REPOSITORY, "--model-control-mode",
                        "explicit", "--load-model", "tiny_spin", "--busy-poll-us", "2000"},
                       std::string(TEST_OUTPUT_DIR) + "/front_end_cancel_server.log");
  ASSERT_TRUE(server.WaitUntilReady(std::chrono::seconds(240))) << server.Log();
  const auto metric = [&server](const char* name, const std::map<std::string, std::string>& labels) {
    return Exposition(HttpGet(server.metrics_port(), "/metrics").body).Sum(name, labels);
  };
  const auto wait_for = [](const std::function<bool()>& done) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
  };
  AsyncCaller caller(server.address());
  // tiny_spin loops as many times as the largest token id, one row per batch: a few seconds on a
  // CPU, while the second call waits behind it.
  caller.Start(TokenRequest("tiny_spin", {{50'000, 1, 1}}), 0, std::chrono::seconds(300));
  ASSERT_TRUE(wait_for([&] { return metric("graphserve_batch_rows_total", {{"model", "tiny_spin"}}) >= 1.0; }))
      << server.Log();
  AsyncCall* queued = caller.Start(TokenRequest("tiny_spin", {{1, 1, 1}}), 1, std::chrono::seconds(300));
  ASSERT_TRUE(wait_for([&] { return metric("graphserve_requests_in_flight", {{"model", "tiny_spin"}}) >= 2.0; }))
      << server.Log();
  queued->context.TryCancel();

  std::map<size_t, grpc::StatusCode> codes;
  for (int i = 0; i < 2; ++i) {
    std::unique_ptr<AsyncCall> call = caller.Next();
    ASSERT_NE(call, nullptr);
    codes[call->index] = call->status.error_code();
  }
  EXPECT_EQ(codes[0], grpc::StatusCode::OK);
  EXPECT_EQ(codes[1], grpc::StatusCode::CANCELLED);
  // The success is counted once its answer is written, which its client may see first.
  EXPECT_TRUE(wait_for([&] {
    return metric("graphserve_requests_total", {{"model", "tiny_spin"}, {"code", "cancelled"}}) == 1.0 &&
           metric("graphserve_requests_total", {{"model", "tiny_spin"}, {"code", "success"}}) == 1.0;
  })) << server.Log();
  EXPECT_EQ(metric("graphserve_batch_rows_total", {{"model", "tiny_spin"}}), 1.0);  // it never ran
  EXPECT_EQ(server.Stop(SIGTERM, std::chrono::seconds(60)), 0) << server.Log();
}

TEST(FrontEndTest, ShortRequestsArrivingTogetherBatchBeyondMaxBatchSize) {
  constexpr int kShortCalls = 256;
  for (const bool budget : {true, false}) {
    SCOPED_TRACE(budget ? "default token budget" : "max_batch_tokens: 0");
    // A long delay, so that what is sent at once is queued before a batch goes.
    std::string config = std::regex_replace(ProjectionConfig(4, 2 * kShortCalls, 1),
                                            std::regex("max_queue_delay_microseconds: 500"),
                                            "max_queue_delay_microseconds: 200000");
    if (!budget) config += "buckets { max_batch_tokens: 0 }\n";
    const std::string root = std::string(TEST_OUTPUT_DIR) + "/token_budget_repository_" +
                             (budget ? "default" : "none");
    ASSERT_TRUE(WriteProjectionRepository(root, config,
                                          std::string(MODEL_REPOSITORY) + "/tiny_traced/model.pt"));
    ServerProcess server(GRAPHSERVE_BINARY, {"--device", "cpu", "--model-repository", root},
                         std::string(TEST_OUTPUT_DIR) + "/token_budget_server_" +
                             (budget ? "default" : "none") + ".log");
    ASSERT_TRUE(server.WaitUntilReady(std::chrono::seconds(240))) << server.Log();

    std::mt19937 random(5);
    AsyncCaller caller(server.address());
    for (int i = 0; i < kShortCalls; ++i) {
      caller.Start(TokenRequest("projection", RandomTokens(random, 1, 8)), static_cast<size_t>(i),
                   std::chrono::seconds(120));
    }
    for (int received = 0; received < kShortCalls; ++received) {
      std::unique_ptr<AsyncCall> call = caller.Next();
      ASSERT_NE(call, nullptr);
      ASSERT_TRUE(call->status.ok()) << call->status.error_message();
    }

    const HttpResponse response = HttpGet(server.metrics_port(), "/metrics");
    ASSERT_EQ(response.status, 200) << response.headers;
    const Exposition metrics(response.body);
    const Labels model = {{"model", "projection"}};
    const double rows = metrics.Sum("graphserve_batch_rows_total", model);
    const double batches = metrics.Sum("graphserve_batches_total", model);
    EXPECT_EQ(rows, kShortCalls);
    EXPECT_EQ(metrics.One("graphserve_bucket_grid_max_batch_tokens", model), budget ? 16384.0 : 0.0);
    if (budget) {
      // Hundreds of rows in a batch: on average far more than the 4 a request may carry.
      EXPECT_GT(rows / batches, 16.0) << rows << " rows in " << batches << " batches";
      EXPECT_TRUE(std::regex_search(
          server.Log(), std::regex("model 'projection' bucket grid: [0-9]+ buckets, largest "
                                   "[0-9]+x[0-9]+ \\([0-9]+ tokens\\), max_batch_tokens 16384")))
          << server.Log();
    } else {
      EXPECT_GE(batches, kShortCalls / 4.0);
    }
    EXPECT_EQ(server.Stop(SIGTERM, std::chrono::seconds(60)), 0) << server.Log();
  }
}

}  // namespace
}  // namespace graphserve::testing
