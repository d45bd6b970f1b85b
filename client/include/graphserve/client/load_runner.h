// LoadRunner: drives ModelInfer load against one model of a KServe v2 gRPC server and reports what it
// measured. Calls go through gRPC's asynchronous API: a completion queue served by a few polling
// threads carries every outstanding call, so neither a high rate nor a high concurrency needs an OS
// thread per call. With LoadOptions::http_address the same calls go over the REST binding instead
// (rest_transport.h), with the same traffic, checks and report.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/support/status.h>

#include "graphserve/client/client.h"
#include "graphserve/client/loadgen.h"
#include "grpc_service.grpc.pb.h"

namespace graphserve::loadgen {

// What load to send. Exactly one of concurrency and rate_rps is set, and exactly one of duration_s and
// requests; LoadRunner::Create checks.
struct LoadOptions {
  std::string model;
  // Closed loop: this many callers, each sending its next request when its last is answered.
  int64_t concurrency = 0;
  // Open loop: Poisson arrivals at this mean rate, sent when due whether or not earlier calls have
  // been answered (so a slow server cannot slow the offered load down).
  double rate_rps = 0;
  // Tokens per row of each request; every request has `rows` rows of one length.
  LengthDistribution lengths;
  int64_t rows = 1;
  // How long to measure (issuing stops after it, answers are still awaited), or how many requests to
  // measure; both after the warm-up.
  double duration_s = 0;
  int64_t requests = 0;
  // Requests issued (closed) or due (open) in the first warmup_s seconds are sent but not counted.
  double warmup_s = 1;
  // Deadline of each call from its send; 0 means none. Over REST it also goes to the server as
  // Triton's `timeout` request parameter (µs), since HTTP carries no deadline.
  int64_t timeout_ms = 10000;
  // Open loop: an arrival that finds this many calls outstanding is not sent and counts as the error
  // kNotSent, so that an overloaded server cannot exhaust the client's memory.
  int64_t max_in_flight = 4096;
  // Threads polling the completion queue (REST: running libcurl's event loops), and HTTP/2
  // connections the calls are spread over (gRPC only; REST opens one keep-alive connection per call
  // in flight).
  int64_t polling_threads = 1;
  int64_t connections = 1;
  // gRPC only: the polling threads spin on the completion queue instead of sleeping in it, so that
  // latency leaves out the client's own thread wake-ups (at a core per thread).
  bool busy_poll = false;
  // The request built for a length is kept for later calls of that length while all those kept hold
  // at most this many bytes; beyond, each call builds its own (uniform:1-8192 at 8 rows would keep
  // 4 GiB).
  int64_t request_cache_bytes = int64_t{256} << 20;
  // Seeds the lengths, the arrivals and the token ids.
  uint64_t seed = 0;
  InputEncoding encoding = InputEncoding::kRaw;
  // Non-empty: the infer calls go to this HOST:PORT over the KServe v2 HTTP/REST binding (binary
  // tensors) instead of gRPC; metadata still comes from the gRPC address. Either loop.
  std::string http_address;
  // Outputs to ask for (KServe's `outputs` field); empty asks for all. An embedding service that
  // needs only the pooled vector saves the server and the network the per-token output.
  std::vector<std::string> outputs;
};

// A live view of a run, for a progress line.
struct Progress {
  double elapsed_s = 0;  // since the run started, warm-up included
  bool warming_up = false;
  int64_t issued = 0;    // measured requests only, like ok and errors
  int64_t ok = 0;
  int64_t errors = 0;
  int64_t in_flight = 0;
  double recent_requests_per_s = 0;  // answers (ok or not) per second since the previous Progress
};

// One load run against one model. Owns its channels; each run makes its own completion queue and
// threads and joins them before Run returns.
// Not thread-safe: Run may be called once, from one thread.
class LoadRunner {
 public:
  // Validates `options` (INVALID_ARGUMENT naming the flag at fault) and that requests can be built
  // from `metadata` (the model's ModelMetadata answer, which also decides how answers are checked),
  // and creates the channels to `address`; connecting waits for Run.
  static grpc::Status Create(const std::string& address, const LoadOptions& options,
                             const inference::ModelMetadataResponse& metadata,
                             std::unique_ptr<LoadRunner>* runner);

  // Connects (UNAVAILABLE if a connection cannot be made within the call timeout, or 10 s without
  // one), sends the load, waits for every answer, and fills *report. Blocks for the whole run.
  // Failed calls and wrong answers are counted in the report, not returned: a non-OK status means the
  // run could not take place. `progress`, when set, is called about every `progress_interval_ms` from
  // a thread of the runner's, and once more at the end.
  grpc::Status Run(Report* report, const std::function<void(const Progress&)>& progress = {},
                   int64_t progress_interval_ms = 250);

 private:
  LoadRunner(const std::string& address, const LoadOptions& options,
             const inference::ModelMetadataResponse& metadata);

  const std::string address_;
  const LoadOptions options_;
  const inference::ModelMetadataResponse metadata_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>> stubs_;
  bool ran_ = false;
};

}  // namespace graphserve::loadgen
