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

#include "address_flag.h"
#include "graphserve/client/client.h"
#include "graphserve/client/load_runner.h"
#include "graphserve/client/loadgen.h"
#include "graphserve/client/number_flags.h"
#include "graphserve/grpc_process.h"

namespace {

namespace loadgen = graphserve::loadgen;

constexpr int kRequestsFailed = 1;
constexpr int kCannotRun = 2;

constexpr int64_t kDefaultDurationS = 10;

int CannotRun(const std::string& what, const grpc::Status& status, const std::string& address) {
  std::cerr << "graphserve-loadgen: " << what << ": " << graphserve::DescribeCallError(status, address)
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

// The command line: the load's options and what main needs besides them.
struct Flags {
  std::string address = "localhost:8001";
  loadgen::LoadOptions options;
  std::string lengths = "skewed";
  std::string contents = "raw";
  std::string json_path;
  double wait_s = 0;
  bool no_progress = false;
  bool grpc_executor_offload = false;
};

// Where the load goes, its pacing, its requests and how long it lasts.
void AddLoadFlags(CLI::App& app, Flags* flags) {
  loadgen::LoadOptions& options = flags->options;
  graphserve::AddAddressFlag(&app, &flags->address);
  app.add_option("--model", options.model, "Model to load")->required();
  CLI::Option* concurrency =
      app.add_option("--concurrency", options.concurrency,
                     "Closed loop: this many callers, each waiting for its answer (default 1)")
          ->check(graphserve::PositiveFlag());
  app.add_option("--rate", options.rate_rps, "Open loop: Poisson arrivals, requests per second")
      ->check(graphserve::PositiveFlag())
      ->excludes(concurrency);
  app.add_option("--lengths", flags->lengths,
                 "Tokens per row: fixed:N, uniform:A-B, file:PATH, lognormal:MEDIAN,SIGMA,A-B or "
                 "skewed (= lognormal:48,0.8,8-512)")
      ->capture_default_str();
  app.add_option("--rows", options.rows, "Rows (batch) per request")
      ->check(graphserve::PositiveFlag())
      ->capture_default_str();
  CLI::Option* duration =
      app.add_option("--duration-s", options.duration_s,
                     "Measure for this many seconds after the warm-up (default 10)")
          ->check(graphserve::PositiveFlag());
  app.add_option("--requests", options.requests, "Measure this many requests after the warm-up")
      ->check(graphserve::PositiveFlag())
      ->excludes(duration);
  app.add_option("--warmup-s", options.warmup_s, "Seconds of load sent first and not counted")
      ->check(graphserve::NonNegativeFlag())
      ->capture_default_str();
}

// How the calls travel, and where the report goes. Added after AddLoadFlags: --help keeps this order.
void AddTransportAndReportFlags(CLI::App& app, Flags* flags) {
  loadgen::LoadOptions& options = flags->options;
  app.add_option("--timeout-ms", options.timeout_ms,
                 "Deadline of each call in ms (over REST also sent as Triton's `timeout` parameter); 0: none")
      ->check(graphserve::NonNegativeFlag())
      ->capture_default_str();
  app.add_option("--max-in-flight", options.max_in_flight,
                 "Open loop: arrivals finding this many calls outstanding are not sent (error " +
                     std::string(loadgen::kNotSent) + ")")
      ->check(graphserve::PositiveFlag())
      ->capture_default_str();
  app.add_option("--threads", options.polling_threads, "Threads polling the completion queue")
      ->check(graphserve::PositiveFlag())
      ->capture_default_str();
  app.add_flag("--busy-poll", options.busy_poll,
               "Polling threads spin instead of sleeping, so that latency leaves out the client's wake-ups "
               "(a core per thread; gRPC only)");
  app.add_flag("--grpc-executor-offload", flags->grpc_executor_offload,
               "let gRPC move a busy connection's transport work to its executor thread (gRPC's default); "
               "without it the polling thread that picked the work up finishes it");
  graphserve::AddHttpAddressFlag(
      &app, &options.http_address,
      "Send the infer calls over the KServe v2 REST binding to this HOST[:PORT] (port "
      "8000 when left out; binary tensors); --address still answers "
      "readiness and metadata");
  app.add_option("--connections", options.connections, "HTTP/2 connections to spread calls over")
      ->check(graphserve::PositiveFlag())
      ->capture_default_str();
  app.add_option("--seed", options.seed, "Seed of the lengths, arrivals and token ids")
      ->capture_default_str();
  app.add_option("--outputs", options.outputs, "Outputs to ask for, comma-separated (default: all)")
      ->delimiter(',');
  app.add_option("--contents", flags->contents, "How inputs travel: raw bytes or typed contents")
      ->check(CLI::IsMember({"raw", "typed"}))
      ->capture_default_str();
  app.add_option("--wait-s", flags->wait_s, "Wait up to this many seconds for the server to be ready")
      ->check(graphserve::NonNegativeFlag());
  app.add_option("--json", flags->json_path, "Also write the report as JSON to this file ('-': stdout)");
  app.add_flag("--no-progress", flags->no_progress, "No progress line, even on a terminal");
}

// The defaults that depend on which flags were given, and the text flags turned into options; fails
// only on a bad --lengths.
grpc::Status CompleteOptions(Flags* flags) {
  loadgen::LoadOptions& options = flags->options;
  if (options.rate_rps == 0 && options.concurrency == 0) options.concurrency = 1;
  if (options.requests == 0 && options.duration_s == 0) options.duration_s = kDefaultDurationS;
  options.encoding =
      flags->contents == "typed" ? graphserve::InputEncoding::kTyped : graphserve::InputEncoding::kRaw;
  return loadgen::LengthDistribution::Parse(flags->lengths, &options.lengths);
}

// Waits for the server if asked, then builds the runner for the model; returns 0 or the exit status.
int CreateRunner(graphserve::InferenceClient& client, const Flags& flags,
                 std::unique_ptr<loadgen::LoadRunner>* runner) {
  grpc::Status status;
  if (flags.wait_s > 0) {
    status = client.WaitForReady(std::chrono::milliseconds(static_cast<int64_t>(flags.wait_s * 1000)));
    if (!status.ok()) return CannotRun("server " + flags.address, status, flags.address);
  }
  // The metadata decides the inputs to send and the shapes every answer must have.
  inference::ModelMetadataResponse metadata;
  status = client.ModelMetadata(flags.options.model, &metadata);
  if (!status.ok()) {
    return CannotRun("metadata of model '" + flags.options.model + "'", status, flags.address);
  }
  status = loadgen::LoadRunner::Create(flags.address, flags.options, metadata, runner);
  if (!status.ok()) return CannotRun("options", status, flags.address);
  return 0;
}

grpc::Status RunLoad(loadgen::LoadRunner& runner, const Flags& flags, loadgen::Report* report) {
  const bool show_progress = !flags.no_progress && isatty(STDOUT_FILENO) && flags.json_path != "-";
  const grpc::Status status = runner.Run(
      report, show_progress ? PrintProgress : std::function<void(const loadgen::Progress&)>());
  if (show_progress) ClearProgress();
  return status;
}

// The text report, and the JSON one where --json asks; returns 0 or the exit status.
int PrintReport(const loadgen::Report& report, const std::string& json_path) {
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
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The load generator shares a host with the server it loads: its gRPC should not spend cores on
  // Abseil's debug checks either.
  graphserve::TurnOffAbseilDeadlockDetection();
  CLI::App app{
      "graphserve-loadgen: send ModelInfer load to a KServe v2 gRPC server and report throughput, "
      "latency percentiles and errors"};
  Flags flags;
  AddLoadFlags(app, &flags);
  AddTransportAndReportFlags(app, &flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : kCannotRun;
  }
  // Before the first gRPC object (see grpc_process.h); where the switch is missing, gRPC's default.
  if (!flags.grpc_executor_offload) graphserve::KeepGrpcTransportWorkOnPollingThreads();
  grpc::Status status = CompleteOptions(&flags);
  if (!status.ok()) return CannotRun("--lengths", status, flags.address);
  // Tried before the run, not found unwritable after it: opened for appending, so that an existing
  // file keeps its content, and a file made only for the try is removed again.
  if (!flags.json_path.empty() && flags.json_path != "-") {
    const bool existed = static_cast<bool>(std::ifstream(flags.json_path));
    if (!std::ofstream(flags.json_path, std::ios::app)) {
      std::cerr << "graphserve-loadgen: --json: cannot write " << flags.json_path << "\n";
      return kCannotRun;
    }
    if (!existed) std::remove(flags.json_path.c_str());
  }

  graphserve::ClientOptions client_options;
  client_options.timeout_ms = flags.options.timeout_ms;
  graphserve::InferenceClient client(flags.address, client_options);
  std::unique_ptr<loadgen::LoadRunner> runner;
  if (const int failed = CreateRunner(client, flags, &runner)) return failed;

  loadgen::Report report;
  status = RunLoad(*runner, flags, &report);
  if (!status.ok()) return CannotRun("run", status, flags.address);
  if (const int failed = PrintReport(report, flags.json_path)) return failed;
  return loadgen::ErrorCount(report) == 0 && report.issued > 0 ? 0 : kRequestsFailed;
}
