// graphserve-loadgen: closed- or open-loop ModelInfer load against one model of any KServe v2 gRPC
// server, with every answer's shapes checked against the model's metadata.
// Exit status: 0 when every measured request was answered correctly, 1 when the run finished but some
// failed (the report says which), 2 when it could not run (bad flags, server or model unreachable,
// report not writable).
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "graphserve/client/client.h"
#include "graphserve/client/load_runner.h"
#include "graphserve/client/loadgen.h"

namespace {

namespace loadgen = graphserve::loadgen;

constexpr int kRequestsFailed = 1;
constexpr int kCannotRun = 2;

constexpr int64_t kDefaultDurationS = 10;

int CannotRun(const std::string& what, const grpc::Status& status) {
  std::cerr << "graphserve-loadgen: " << what << ": "
            << graphserve::StatusCodeName(status.error_code()) << ": " << status.error_message()
            << "\n";
  return kCannotRun;
}

// One line, rewritten in place with \r; padded so that a shorter line hides the previous one's end.
void PrintProgress(const loadgen::Progress& progress) {
  char line[160];
  std::snprintf(line, sizeof line,
                "\r%-7s %6.1f s | issued %lld  ok %lld  errors %lld | in flight %lld | %.0f req/s   ",
                progress.warming_up ? "warm-up" : "run", progress.elapsed_s,
                static_cast<long long>(progress.issued), static_cast<long long>(progress.ok),
                static_cast<long long>(progress.errors), static_cast<long long>(progress.in_flight),
                progress.recent_requests_per_s);
  std::fputs(line, stdout);
  std::fflush(stdout);
}

void ClearProgress() {
  std::fputs("\r\033[K", stdout);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "graphserve-loadgen: send ModelInfer load to a KServe v2 gRPC server and report throughput, "
      "latency percentiles and errors"};
  std::string address = "localhost:8001";
  loadgen::LoadOptions options;
  std::string lengths = "skewed";
  std::string contents = "raw";
  std::string json_path;
  double wait_s = 0;
  bool no_progress = false;

  app.add_option("--address", address, "Server address, host:port")->capture_default_str();
  app.add_option("--model", options.model, "Model to load")->required();
  CLI::Option* concurrency =
      app.add_option("--concurrency", options.concurrency,
                     "Closed loop: this many callers, each waiting for its answer (default 1)")
          ->check(CLI::PositiveNumber);
  app.add_option("--rate", options.rate_rps, "Open loop: Poisson arrivals, requests per second")
      ->check(CLI::PositiveNumber)
      ->excludes(concurrency);
  app.add_option("--lengths", lengths,
                 "Tokens per row: fixed:N, uniform:A-B, file:PATH, lognormal:MEDIAN,SIGMA,A-B or "
                 "skewed (= lognormal:48,0.8,8-512)")
      ->capture_default_str();
  app.add_option("--rows", options.rows, "Rows (batch) per request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI::Option* duration =
      app.add_option("--duration-s", options.duration_s,
                     "Measure for this many seconds after the warm-up (default 10)")
          ->check(CLI::PositiveNumber);
  app.add_option("--requests", options.requests, "Measure this many requests after the warm-up")
      ->check(CLI::PositiveNumber)
      ->excludes(duration);
  app.add_option("--warmup-s", options.warmup_s, "Seconds of load sent first and not counted")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--timeout-ms", options.timeout_ms, "Deadline of each call in ms; 0: none")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-in-flight", options.max_in_flight,
                 "Open loop: arrivals finding this many calls outstanding are not sent (error " +
                     std::string(loadgen::kNotSent) + ")")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--threads", options.polling_threads, "Threads polling the completion queue")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--connections", options.connections, "HTTP/2 connections to spread calls over")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", options.seed, "Seed of the lengths, arrivals and token ids")
      ->capture_default_str();
  app.add_option("--outputs", options.outputs, "Outputs to ask for, comma-separated (default: all)")
      ->delimiter(',');
  app.add_option("--contents", contents, "How inputs travel: raw bytes or typed contents")
      ->check(CLI::IsMember({"raw", "typed"}))
      ->capture_default_str();
  app.add_option("--wait-s", wait_s, "Wait up to this many seconds for the server to be ready")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--json", json_path, "Also write the report as JSON to this file ('-': stdout)");
  app.add_flag("--no-progress", no_progress, "No progress line, even on a terminal");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : kCannotRun;
  }
  if (options.rate_rps == 0 && options.concurrency == 0) options.concurrency = 1;
  if (options.requests == 0 && options.duration_s == 0) options.duration_s = kDefaultDurationS;
  options.encoding =
      contents == "typed" ? graphserve::InputEncoding::kTyped : graphserve::InputEncoding::kRaw;
  grpc::Status status = loadgen::LengthDistribution::Parse(lengths, &options.lengths);
  if (!status.ok()) return CannotRun("--lengths", status);

  graphserve::ClientOptions client_options;
  client_options.timeout_ms = options.timeout_ms;
  graphserve::InferenceClient client(address, client_options);
  if (wait_s > 0) {
    status = client.WaitForReady(std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000)));
    if (!status.ok()) return CannotRun("server " + address, status);
  }
  // The metadata decides the inputs to send and the shapes every answer must have.
  inference::ModelMetadataResponse metadata;
  status = client.ModelMetadata(options.model, &metadata);
  if (!status.ok()) return CannotRun("metadata of model '" + options.model + "'", status);

  std::unique_ptr<loadgen::LoadRunner> runner;
  status = loadgen::LoadRunner::Create(address, options, metadata, &runner);
  if (!status.ok()) return CannotRun("options", status);

  const bool show_progress = !no_progress && isatty(STDOUT_FILENO) && json_path != "-";
  loadgen::Report report;
  status = runner->Run(&report, show_progress ? PrintProgress
                                              : std::function<void(const loadgen::Progress&)>());
  if (show_progress) ClearProgress();
  if (!status.ok()) return CannotRun("run", status);

  // With --json -, stdout carries only the JSON, for pipes; the text goes to stderr.
  (json_path == "-" ? std::cerr : std::cout) << loadgen::FormatReport(report);
  if (json_path == "-") {
    std::cout << loadgen::ReportToJson(report) << "\n";
  } else if (!json_path.empty()) {
    std::ofstream file(json_path);
    file << loadgen::ReportToJson(report) << "\n";
    file.close();
    if (!file) {
      std::cerr << "graphserve-loadgen: cannot write " << json_path << "\n";
      return kCannotRun;
    }
  }
  return loadgen::ErrorCount(report) == 0 && report.issued > 0 ? 0 : kRequestsFailed;
}
