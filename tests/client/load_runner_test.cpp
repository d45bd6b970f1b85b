// LoadRunner against an in-process fake KServe v2 server on 127.0.0.1: request counts, warm-up
// exclusion, errors by status code, answers of the wrong shape, the open loop's rate and in-flight cap,
// deadlines, option validation, and REST runs against a fake REST server.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "graphserve/client/load_runner.h"

namespace graphserve::loadgen {
namespace {

// Raises *highest to `value` where that is higher.
void RaiseTo(std::atomic<int64_t>* highest, int64_t value) {
  int64_t seen = highest->load();
  while (value > seen && !highest->compare_exchange_weak(seen, value)) {
  }
}

// Answers ModelInfer for token models with one output "projected" FP32 [rows, length, 4], rows and
// length taken from the first input. By model name:
//   good   always right;
//   flaky  every third call fails with RESOURCE_EXHAUSTED;
//   wrong  rows longer than 20 tokens come back one token short.
// Every answer waits delay_ms first. Counts what it receives.
class FakeModelService final : public inference::GRPCInferenceService::Service {
 public:
  std::atomic<int64_t> delay_ms{0};
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> tokens{0};
  std::atomic<int64_t> rejected{0};
  std::atomic<int64_t> wrong{0};
  std::atomic<int64_t> max_concurrent{0};

  grpc::Status ModelInfer(grpc::ServerContext*, const inference::ModelInferRequest* request,
                          inference::ModelInferResponse* response) override {
    RaiseTo(&max_concurrent, ++concurrent_);
    const int64_t call = ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
    --concurrent_;

    if (request->inputs_size() == 0 || request->inputs(0).shape_size() != 2) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "want [rows, length] inputs");
    }
    const int64_t rows = request->inputs(0).shape(0);
    int64_t length = request->inputs(0).shape(1);
    tokens += rows * length;
    if (request->model_name() == "flaky" && call % 3 == 0) {
      ++rejected;
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full");
    }
    if (request->model_name() == "wrong" && length > 20) {
      ++wrong;
      --length;
    }
    response->set_model_name(request->model_name());
    auto* output = response->add_outputs();
    output->set_name("projected");
    output->set_datatype("FP32");
    for (int64_t dim : {rows, length, int64_t{4}}) output->add_shape(dim);
    response->add_raw_output_contents(std::string(static_cast<size_t>(rows * length * 4 * 4), '\0'));
    return grpc::Status::OK;
  }

 private:
  std::atomic<int64_t> concurrent_{0};
};

inference::ModelMetadataResponse TokenMetadata(const std::string& model) {
  inference::ModelMetadataResponse metadata;
  metadata.set_name(model);
  for (const char* name : {"input_ids", "attention_mask"}) {
    auto* input = metadata.add_inputs();
    input->set_name(name);
    input->set_datatype("INT64");
    input->add_shape(-1);
    input->add_shape(-1);
  }
  auto* output = metadata.add_outputs();
  output->set_name("projected");
  output->set_datatype("FP32");
  for (int64_t dim : {-1, -1, 4}) output->add_shape(dim);
  return metadata;
}

LengthDistribution Lengths(const std::string& text) {
  LengthDistribution lengths;
  EXPECT_TRUE(LengthDistribution::Parse(text, &lengths).ok()) << text;
  return lengths;
}

class LoadRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  void TearDown() override { server_->Shutdown(); }

  static LoadOptions ClosedLoop(const std::string& model, int64_t concurrency, int64_t requests) {
    LoadOptions options;
    options.model = model;
    options.concurrency = concurrency;
    options.requests = requests;
    options.warmup_s = 0;
    options.lengths = Lengths("uniform:4-32");
    return options;
  }

  static LoadOptions OpenLoop(const std::string& model, double rate_rps, const std::string& lengths) {
    LoadOptions options;
    options.model = model;
    options.rate_rps = rate_rps;
    options.warmup_s = 0;
    options.lengths = Lengths(lengths);
    return options;
  }

  Report RunLoad(const LoadOptions& options) {
    std::unique_ptr<LoadRunner> runner;
    grpc::Status status = LoadRunner::Create(address_, options, TokenMetadata(options.model), &runner);
    EXPECT_TRUE(status.ok()) << status.error_message();
    Report report;
    if (!runner) return report;
    status = runner->Run(&report);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(report.ok + ErrorCount(report), report.issued) << ReportToJson(report);
    return report;
  }

  FakeModelService service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(LoadRunnerTest, ClosedLoopSendsTheRequestedCountWithItsCallers) {
  service_.delay_ms = 3;
  LoadOptions options = ClosedLoop("good", 4, 60);
  options.rows = 2;
  const Report report = RunLoad(options);
  EXPECT_EQ(report.mode, "closed");
  EXPECT_EQ(report.issued, 60);
  EXPECT_EQ(report.ok, 60);
  EXPECT_TRUE(report.errors.empty()) << ReportToJson(report);
  EXPECT_EQ(report.warmup_requests, 0);
  EXPECT_EQ(service_.calls.load(), 60);
  // Real tokens: what the server received, rows × length, no padding.
  EXPECT_EQ(report.tokens, service_.tokens.load());
  EXPECT_GE(report.tokens, 60 * 2 * 4);
  // Never more callers than asked for, and they did overlap.
  EXPECT_LE(service_.max_concurrent.load(), 4);
  EXPECT_GE(service_.max_concurrent.load(), 2);
  EXPECT_EQ(report.latency.count, 60);
  EXPECT_GE(report.latency.p50_ms, 3);
  EXPECT_LE(report.latency.p50_ms, report.latency.p90_ms);
  EXPECT_LE(report.latency.p90_ms, report.latency.p99_ms);
  EXPECT_LE(report.latency.p99_ms, report.latency.max_ms);
  EXPECT_GT(report.requests_per_s, 0);
  EXPECT_NEAR(report.tokens_per_s, report.tokens / report.elapsed_s, 1e-6 * report.tokens_per_s);
}

TEST_F(LoadRunnerTest, WarmupRequestsAreSentButNotCounted) {
  service_.delay_ms = 5;
  LoadOptions options = ClosedLoop("good", 2, 20);
  options.warmup_s = 0.8;
  const Report report = RunLoad(options);
  // About 0.8 s / 5 ms × 2 callers = 320 warm-up requests.
  EXPECT_GT(report.warmup_requests, 20);
  EXPECT_EQ(report.issued, 20);
  EXPECT_EQ(report.ok, 20);
  EXPECT_EQ(report.latency.count, 20);
  EXPECT_EQ(service_.calls.load(), report.warmup_requests + report.issued);
  // The window holds only the 20 measured requests: about 20 / 2 × 5 ms, far below the warm-up.
  EXPECT_LT(report.elapsed_s, 0.7);
}

TEST_F(LoadRunnerTest, ErrorsAreCountedByStatusCode) {
  const Report report = RunLoad(ClosedLoop("flaky", 3, 90));
  EXPECT_EQ(report.issued, 90);
  ASSERT_EQ(report.errors.size(), 1u) << ReportToJson(report);
  EXPECT_EQ(report.errors.at("RESOURCE_EXHAUSTED"), service_.rejected.load());
  EXPECT_EQ(report.errors.at("RESOURCE_EXHAUSTED"), 30);
  EXPECT_EQ(report.error_examples.at("RESOURCE_EXHAUSTED"), "queue full");
  EXPECT_EQ(report.ok, 60);
  EXPECT_EQ(report.latency.count, 60) << "failed calls stay out of the latencies";
}

TEST_F(LoadRunnerTest, AnswersOfTheWrongShapeAreErrors) {
  LoadOptions options = ClosedLoop("wrong", 2, 50);
  options.lengths = Lengths("uniform:10-30");
  const Report report = RunLoad(options);
  ASSERT_GT(service_.wrong.load(), 0);
  EXPECT_EQ(report.errors.at(kBadAnswer), service_.wrong.load()) << ReportToJson(report);
  EXPECT_EQ(report.ok, 50 - service_.wrong.load());
  const std::string& example = report.error_examples.at(kBadAnswer);
  EXPECT_NE(example.find("projected"), std::string::npos) << example;
  EXPECT_NE(example.find("expected"), std::string::npos) << example;
}

TEST_F(LoadRunnerTest, OpenLoopOffersItsRate) {
  LoadOptions options;
  options.model = "good";
  options.rate_rps = 200;
  options.duration_s = 1;
  options.warmup_s = 0.2;
  options.lengths = Lengths("fixed:16");
  options.seed = 5;
  const Report report = RunLoad(options);
  EXPECT_EQ(report.mode, "open");
  // 200 expected, standard deviation about 14.
  EXPECT_GT(report.issued, 140);
  EXPECT_LT(report.issued, 260);
  EXPECT_GT(report.warmup_requests, 10);
  EXPECT_EQ(report.ok, report.issued);
  EXPECT_EQ(report.tokens, report.ok * 16);
  // From the first measured arrival to the last answer: the 1 s schedule, give or take a gap and a
  // latency.
  EXPECT_GT(report.elapsed_s, 0.8);
  EXPECT_LT(report.elapsed_s, 1.5);
  EXPECT_NEAR(report.requests_per_s, report.ok / report.elapsed_s, 1e-9 * report.requests_per_s);
  EXPECT_LE(report.latency.p50_ms, report.latency.p99_ms);
  EXPECT_EQ(service_.calls.load(), report.warmup_requests + report.issued);
  // Every measured arrival's send lag is recorded; at 200/s one thread keeps to its schedule.
  EXPECT_EQ(report.send_lag.count, report.issued);
  EXPECT_GE(report.send_lag.min_ms, 0);
  EXPECT_LT(report.send_lag.p50_ms, 5);
}

TEST_F(LoadRunnerTest, OpenLoopKeepsSendingWhileAnswersAreSlow) {
  // A closed loop of one would send at most 1 s / 100 ms = 10; the open loop offers 100 in 1 s.
  service_.delay_ms = 100;
  LoadOptions options = OpenLoop("good", 100, "fixed:8");
  options.requests = 100;
  const Report report = RunLoad(options);
  EXPECT_EQ(report.ok, 100);
  EXPECT_GT(service_.max_concurrent.load(), 3);
  // Latency counts from the due time, so it is at least the server's delay.
  EXPECT_GE(report.latency.min_ms, 100);
}

TEST_F(LoadRunnerTest, OpenLoopDropsArrivalsBeyondMaxInFlight) {
  service_.delay_ms = 100;
  LoadOptions options = OpenLoop("good", 300, "fixed:8");
  options.requests = 60;
  options.max_in_flight = 3;
  const Report report = RunLoad(options);
  EXPECT_EQ(report.issued, 60);
  EXPECT_GT(report.errors.at(kNotSent), 30) << ReportToJson(report);
  EXPECT_LE(service_.max_concurrent.load(), 3);
  EXPECT_EQ(service_.calls.load(), report.ok);
}

TEST_F(LoadRunnerTest, DeadlinesAreErrorsToo) {
  service_.delay_ms = 400;
  LoadOptions options = ClosedLoop("good", 2, 4);
  options.timeout_ms = 50;
  const Report report = RunLoad(options);
  EXPECT_EQ(report.ok, 0);
  EXPECT_EQ(report.errors.at("DEADLINE_EXCEEDED"), 4) << ReportToJson(report);
  EXPECT_EQ(report.latency.count, 0);
}

TEST_F(LoadRunnerTest, ProgressIsReportedAndEndsDrained) {
  service_.delay_ms = 2;
  LoadOptions options = ClosedLoop("good", 2, 100);
  std::unique_ptr<LoadRunner> runner;
  ASSERT_TRUE(LoadRunner::Create(address_, options, TokenMetadata("good"), &runner).ok());
  std::mutex mutex;
  std::vector<Progress> seen;
  Report report;
  ASSERT_TRUE(runner
                  ->Run(&report,
                        [&](const Progress& progress) {
                          std::lock_guard<std::mutex> lock(mutex);
                          seen.push_back(progress);
                        },
                        20)
                  .ok());
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen.back().in_flight, 0);
  EXPECT_EQ(seen.back().ok, report.ok);
  EXPECT_EQ(seen.back().issued, report.issued);
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i].ok, seen[i - 1].ok);

  EXPECT_EQ(runner->Run(&report).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(LoadRunnerTest, CreateRejectsBadOptions) {
  const LoadOptions good = ClosedLoop("good", 2, 10);
  std::vector<LoadOptions> bad(16, good);
  bad[0].rate_rps = 10;      // both loops
  bad[1].concurrency = 0;    // neither loop
  bad[2].duration_s = 1;     // both limits
  bad[3].requests = 0;       // no limit
  bad[4].rows = 0;
  bad[5].warmup_s = -1;
  bad[6].timeout_ms = -1;
  bad[7].polling_threads = 0;
  bad[8].connections = 0;
  bad[9].max_in_flight = 0;
  bad[10].concurrency = -2;
  bad[11].rate_rps = std::numeric_limits<double>::infinity();
  bad[11].concurrency = 0;
  bad[12].request_cache_bytes = -1;
  bad[13].warmup_s = 1e9;
  bad[14].busy_poll = true;  // REST's threads are libcurl's
  bad[14].http_address = "127.0.0.1:1";
  bad[15].timeout_ms = int64_t{1} << 60;  // its µs would overflow
  for (size_t i = 0; i < bad.size(); ++i) {
    std::unique_ptr<LoadRunner> runner;
    EXPECT_EQ(LoadRunner::Create(address_, bad[i], TokenMetadata("good"), &runner).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << "case " << i;
    EXPECT_EQ(runner, nullptr);
  }
  // Inputs the generator cannot fill.
  inference::ModelMetadataResponse strings = TokenMetadata("good");
  strings.mutable_inputs(0)->set_datatype("BYTES");
  std::unique_ptr<LoadRunner> runner;
  EXPECT_EQ(LoadRunner::Create(address_, good, strings, &runner).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(LoadRunner::Create(address_, good, TokenMetadata("good"), &runner).ok());
}

TEST_F(LoadRunnerTest, BusyPollingThreadsCompleteEveryCallAndEndTheRun) {
  LoadOptions options = ClosedLoop("good", 4, 100);
  options.polling_threads = 2;
  options.busy_poll = true;
  const Report report = RunLoad(options);
  EXPECT_EQ(report.ok, 100);
  EXPECT_EQ(service_.calls.load(), 100);
}

TEST_F(LoadRunnerTest, SeveralConnectionsAndPollingThreads) {
  service_.delay_ms = 1;
  LoadOptions options = ClosedLoop("good", 8, 200);
  options.connections = 3;
  options.polling_threads = 2;
  const Report report = RunLoad(options);
  EXPECT_EQ(report.ok, 200);
  EXPECT_EQ(service_.calls.load(), 200);
}

TEST_F(LoadRunnerTest, RequestsBeyondTheCacheAreBuiltPerCall) {
  service_.delay_ms = 1;
  for (int64_t cache_bytes : {int64_t{0}, int64_t{2000}}) {
    LoadOptions options = ClosedLoop("good", 4, 80);
    options.lengths = Lengths("uniform:1-64");
    options.request_cache_bytes = cache_bytes;
    const int64_t calls_before = service_.calls.load();
    const int64_t tokens_before = service_.tokens.load();
    const Report report = RunLoad(options);
    EXPECT_EQ(report.ok, 80) << ReportToJson(report);
    EXPECT_EQ(service_.calls.load() - calls_before, 80);
    EXPECT_EQ(report.tokens, service_.tokens.load() - tokens_before);
  }
}

// A KServe v2 REST server on 127.0.0.1 for the token models' infer calls, a thread per keep-alive
// connection: each call is answered "projected" FP32 [rows, length, 4] in binary after delay_ms, and
// the JSON header of every request is kept.
class FakeRestServer {
 public:
  std::atomic<int64_t> delay_ms{0};
  std::atomic<int64_t> max_concurrent{0};

  FakeRestServer() {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(listen(listener_, 512), 0);
    socklen_t size = sizeof address;
    getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }

  ~FakeRestServer() {
    shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    close(listener_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (int fd : connections_) shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& thread : threads_) thread.join();
    for (int fd : connections_) close(fd);
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  std::vector<nlohmann::json> headers() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return headers_;
  }

 private:
  void Accept() {
    while (true) {
      const int fd = accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      std::lock_guard<std::mutex> lock(mutex_);
      connections_.push_back(fd);
      threads_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  // The value of the header `name` (lower case) in `head`, as a byte count; 0 when absent.
  static size_t HeaderBytes(const std::string& head, const std::string& name) {
    std::string lower = head;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    const size_t at = lower.find("\r\n" + name + ":");
    return at == std::string::npos ? 0 : std::stoull(head.substr(at + name.size() + 3));
  }

  void Serve(int fd) {
    std::string buffer;
    char chunk[65536];
    const auto fill = [&](size_t bytes) {
      while (buffer.size() < bytes) {
        const ssize_t got = recv(fd, chunk, sizeof chunk, 0);
        if (got <= 0) return false;
        buffer.append(chunk, static_cast<size_t>(got));
      }
      return true;
    };
    while (true) {
      size_t end;
      while ((end = buffer.find("\r\n\r\n")) == std::string::npos) {
        if (!fill(buffer.size() + 1)) return;
      }
      const std::string head = buffer.substr(0, end + 4);
      const size_t body_start = end + 4;
      if (!fill(body_start + HeaderBytes(head, "content-length"))) return;
      const size_t json_bytes = HeaderBytes(head, "inference-header-content-length");
      const nlohmann::json request = nlohmann::json::parse(buffer.substr(body_start, json_bytes));
      buffer.erase(0, body_start + HeaderBytes(head, "content-length"));
      RaiseTo(&max_concurrent, ++concurrent_);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        headers_.push_back(request);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
      --concurrent_;
      const int64_t rows = request["inputs"][0]["shape"][0];
      const int64_t length = request["inputs"][0]["shape"][1];
      const size_t bytes = static_cast<size_t>(rows * length * 4 * 4);
      const std::string answer = nlohmann::json{{"model_name", "good"},
                                                {"outputs",
                                                 {{{"name", "projected"},
                                                   {"datatype", "FP32"},
                                                   {"shape", {rows, length, 4}},
                                                   {"parameters", {{"binary_data_size", bytes}}}}}}}
                                     .dump();
      const std::string response =
          "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
          "Inference-Header-Content-Length: " +
          std::to_string(answer.size()) + "\r\nContent-Length: " + std::to_string(answer.size() + bytes) +
          "\r\n\r\n" + answer + std::string(bytes, '\0');
      for (size_t sent = 0; sent < response.size();) {
        const ssize_t wrote = send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
        if (wrote <= 0) return;
        sent += static_cast<size_t>(wrote);
      }
    }
  }

  int listener_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  std::atomic<int64_t> concurrent_{0};
  mutable std::mutex mutex_;
  std::vector<int> connections_;         // guarded by mutex_
  std::vector<std::thread> threads_;     // guarded by mutex_
  std::vector<nlohmann::json> headers_;  // guarded by mutex_
};

// REST in an open loop: arrivals go out on their schedule whatever is outstanding, as over gRPC,
// and each carries its deadline as Triton's `timeout` parameter, so that the server can refuse or
// drop what its caller will not wait for.
TEST_F(LoadRunnerTest, RestOpenLoopOffersItsRateAndSendsEachCallsDeadline) {
  FakeRestServer rest;
  rest.delay_ms = 100;
  LoadOptions options = OpenLoop("good", 100, "fixed:16");
  options.duration_s = 1;
  options.warmup_s = 0.2;
  options.timeout_ms = 750;
  options.seed = 5;
  options.http_address = rest.address();
  const Report report = RunLoad(options);
  EXPECT_EQ(report.mode, "open");
  // 100 expected, standard deviation 10.
  EXPECT_GT(report.issued, 60);
  EXPECT_LT(report.issued, 140);
  EXPECT_EQ(report.ok, report.issued) << ReportToJson(report);
  // A closed loop would keep one call out; the open loop kept sending behind the 100 ms answers.
  EXPECT_GT(rest.max_concurrent.load(), 3);
  // Latency counts from the due time, so it is at least the server's delay.
  EXPECT_GE(report.latency.min_ms, 100);
  const std::vector<nlohmann::json> headers = rest.headers();
  EXPECT_EQ(static_cast<int64_t>(headers.size()), report.warmup_requests + report.issued);
  for (const nlohmann::json& header : headers) {
    EXPECT_EQ(header["parameters"]["timeout"], 750'000) << header.dump();
  }
}

TEST_F(LoadRunnerTest, RestCallsWithoutADeadlineSendNoTimeout) {
  FakeRestServer rest;
  LoadOptions options = ClosedLoop("good", 2, 10);
  options.timeout_ms = 0;
  options.http_address = rest.address();
  const Report report = RunLoad(options);
  EXPECT_EQ(report.ok, 10) << ReportToJson(report);
  const std::vector<nlohmann::json> headers = rest.headers();
  ASSERT_EQ(headers.size(), 10u);
  for (const nlohmann::json& header : headers) {
    EXPECT_FALSE(header["parameters"].contains("timeout")) << header.dump();
  }
}

TEST(LoadRunnerConnectTest, RunFailsWhenNothingListens) {
  // A port that was free a moment ago: bound, then closed without listening.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t size = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  close(fd);

  LoadOptions options;
  options.model = "good";
  options.concurrency = 1;
  options.requests = 1;
  options.timeout_ms = 300;
  std::unique_ptr<LoadRunner> runner;
  ASSERT_TRUE(LoadRunner::Create("127.0.0.1:" + std::to_string(ntohs(address.sin_port)), options,
                                 TokenMetadata("good"), &runner)
                  .ok());
  Report report;
  EXPECT_EQ(runner->Run(&report).error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace graphserve::loadgen
