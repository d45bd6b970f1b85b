// Front end + scheduler throughput: a closed loop of N outstanding small ModelInfer calls for T
// seconds against the real graphserve binary (started here with a cheap per-token model, unless
// --address names a running server), printing requests/s and latency percentiles. A benchmark run
// by hand, not a test: the figure depends on the host.
//
//   front_end_benchmark --concurrency 512 --seconds 10 --client-threads 4 --instances 4
//
// The model file is the fixture's TorchScript `tiny_traced` (ctest -R make_model_repository makes
// it).
#include <CLI/CLI.hpp>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "async_calls.h"
#include "infer_helpers.h"
#include "server_process.h"

namespace graphserve::testing {
namespace {

struct Options {
  std::string address;  // empty: start a server
  std::string binary = GRAPHSERVE_BINARY;
  std::string model_file = std::string(MODEL_REPOSITORY) + "/tiny_traced/model.pt";
  std::string model = "projection";
  std::string device = "cpu";
  int instances = 2;
  int64_t max_batch = 32;
  int64_t concurrency = 512;
  int client_threads = 2;
  double seconds = 10;
  double warmup_seconds = 2;
  int64_t rows = 1;
  int64_t length = 16;
};

struct ThreadResult {
  std::vector<double> latencies_ms;  // measured calls only
  std::map<int, int64_t> errors;     // by gRPC status code
};

// One client thread: its own connection and completion queue, `concurrency` calls kept in flight
// until `stop`, latencies recorded after `measure_from`.
ThreadResult RunClient(const Options& options, int64_t concurrency, int thread_index,
                       std::chrono::steady_clock::time_point measure_from,
                       std::chrono::steady_clock::time_point stop) {
  std::mt19937 random(static_cast<uint32_t>(thread_index + 1));
  std::vector<inference::ModelInferRequest> pool;
  for (int i = 0; i < 64; ++i) {
    pool.push_back(TokenRequest(options.model, RandomTokens(random, options.rows, options.length)));
  }
  // A distinct channel argument per thread gives each its own HTTP/2 connection.
  grpc::ChannelArguments arguments;
  arguments.SetInt("graphserve.benchmark.client", thread_index);
  AsyncCaller caller(options.address, arguments);

  ThreadResult result;
  size_t next = 0;
  for (int64_t i = 0; i < concurrency; ++i)
    caller.Start(pool[next++ % pool.size()], 0, std::chrono::seconds(60));
  while (caller.in_flight() > 0) {
    std::unique_ptr<AsyncCall> call = caller.Next();
    if (call == nullptr) break;
    const auto now = std::chrono::steady_clock::now();
    if (call->sent >= measure_from && now <= stop) {
      if (call->status.ok()) {
        result.latencies_ms.push_back(
            std::chrono::duration<double, std::milli>(now - call->sent).count());
      } else {
        ++result.errors[call->status.error_code()];
      }
    }
    if (now < stop) caller.Start(pool[next++ % pool.size()], 0, std::chrono::seconds(60));
  }
  return result;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(p / 100.0 * static_cast<double>(sorted.size() - 1));
  return sorted[rank];
}

int Main(int argc, char** argv) {
  Options options;
  CLI::App app{"closed-loop throughput of graphserve's front end and scheduler"};
  app.add_option("--address", options.address, "a running server (default: start one)");
  app.add_option("--binary", options.binary, "graphserve binary to start");
  app.add_option("--model-file", options.model_file,
                 "TorchScript per-token model (the fixture's tiny_traced)");
  app.add_option("--model", options.model, "model name to call");
  app.add_option("--device", options.device, "--device of the started server");
  app.add_option("--instances", options.instances,
                 "instance_group count of the started server's model");
  app.add_option("--max-batch", options.max_batch, "max_batch_size of the started server's model");
  app.add_option("--concurrency", options.concurrency, "calls kept in flight");
  app.add_option("--client-threads", options.client_threads,
                 "client threads, each with its own connection");
  app.add_option("--seconds", options.seconds, "measured duration");
  app.add_option("--warmup-seconds", options.warmup_seconds, "unmeasured start");
  app.add_option("--rows", options.rows, "rows per request");
  app.add_option("--length", options.length, "tokens per row");
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<ServerProcess> server;
  if (options.address.empty()) {
    const std::string root = std::string(TEST_OUTPUT_DIR) + "/benchmark_repository";
    if (!WriteProjectionRepository(root,
                                   ProjectionConfig(options.max_batch, 65536, options.instances),
                                   options.model_file)) {
      std::fprintf(stderr, "cannot write %s from %s (run: ctest -R make_model_repository)\n",
                   root.c_str(), options.model_file.c_str());
      return 1;
    }
    server = std::make_unique<ServerProcess>(
        options.binary,
        std::vector<std::string>{"--device", options.device, "--model-repository", root},
        std::string(TEST_OUTPUT_DIR) + "/benchmark_server.log");
    if (!server->WaitUntilReady(std::chrono::seconds(240))) {
      std::fprintf(stderr, "server did not become ready:\n%s\n", server->Log().c_str());
      return 1;
    }
    options.address = server->address();
  }

  const auto start = std::chrono::steady_clock::now();
  const auto measure_from = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::chrono::duration<double>(options.warmup_seconds));
  const auto stop = measure_from + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                       std::chrono::duration<double>(options.seconds));
  std::vector<ThreadResult> results(static_cast<size_t>(options.client_threads));
  std::vector<std::thread> threads;
  for (int t = 0; t < options.client_threads; ++t) {
    const int64_t share = options.concurrency / options.client_threads +
                          (t < options.concurrency % options.client_threads);
    threads.emplace_back([&, t, share] {
      results[static_cast<size_t>(t)] = RunClient(options, share, t, measure_from, stop);
    });
  }
  for (std::thread& thread : threads) thread.join();

  std::vector<double> latencies;
  std::map<int, int64_t> errors;
  for (const ThreadResult& result : results) {
    latencies.insert(latencies.end(), result.latencies_ms.begin(), result.latencies_ms.end());
    for (const auto& [code, count] : result.errors) errors[code] += count;
  }
  std::sort(latencies.begin(), latencies.end());
  std::printf(
      "server %s, model %s, %lld x %lld tokens per request, %lld in flight over %d connection(s)\n",
      options.address.c_str(), options.model.c_str(), static_cast<long long>(options.rows),
      static_cast<long long>(options.length), static_cast<long long>(options.concurrency),
      options.client_threads);
  std::printf("answered %zu in %.1f s: %.0f requests/s\n", latencies.size(), options.seconds,
              static_cast<double>(latencies.size()) / options.seconds);
  std::printf("latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", Percentile(latencies, 50),
              Percentile(latencies, 90), Percentile(latencies, 99),
              latencies.empty() ? 0.0 : latencies.back());
  for (const auto& [code, count] : errors)
    std::printf("errors with gRPC code %d: %lld\n", code, static_cast<long long>(count));
  if (server != nullptr) server->Stop(SIGTERM, std::chrono::seconds(60));
  return errors.empty() ? 0 : 1;
}

}  // namespace
}  // namespace graphserve::testing

int main(int argc, char** argv) { return graphserve::testing::Main(argc, argv); }
