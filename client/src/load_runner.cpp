// LoadRunner: one completion queue, polling threads that finish calls (and, in a closed loop, send
// each caller's next request at once), an issuing thread for the open loop's schedule, and a progress
// thread. One mutex guards the run's counters; a call's own state belongs to whoever holds its tag.
#include "graphserve/client/load_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include <grpcpp/client_context.h>
#include <grpcpp/completion_queue.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/async_unary_call.h>
#include <grpcpp/support/channel_arguments.h>

#include "rest_transport.h"

namespace graphserve::loadgen {

namespace {

using Clock = std::chrono::steady_clock;
using Stub = inference::GRPCInferenceService::Stub;

constexpr int64_t kMaxThreads = 64;
constexpr int64_t kMaxSeconds = 1000000;  // 11.6 days
constexpr auto kDefaultConnectTimeout = std::chrono::seconds(10);

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

// One outstanding ModelInfer. Its tag in the completion queue is its own address; whoever pops the tag
// owns (and deletes) it.
struct Call {
  grpc::ClientContext context;
  inference::ModelInferResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<inference::ModelInferResponse>> reader;
  // The request sent: LoadRun's cached one for this length, or owned_request.
  const inference::ModelInferRequest* request = nullptr;
  std::unique_ptr<inference::ModelInferRequest> owned_request;
  // REST only: the request as the binding's body (shared by the calls of one length).
  std::shared_ptr<const std::string> rest_body;
  size_t rest_json_length = 0;
  Stub* stub = nullptr;
  // Latency is measured from here: the send (closed loop) or the due time (open loop), so that an
  // issuing thread running late adds to the latency rather than hiding it.
  Clock::time_point start;
  int64_t length = 0;
  bool measured = false;
};

// The mutable state of one LoadRunner::Run. Thread-safe: the issuing, polling and progress threads
// share it through mutex_.
class LoadRun {
 public:
  LoadRun(const std::string& model, const LoadOptions& options,
          const inference::ModelMetadataResponse& metadata,
          const std::vector<std::unique_ptr<Stub>>& stubs)
      : model_(model), options_(options), metadata_(metadata), stubs_(stubs),
        length_rng_(options.seed) {
    if (!options.http_address.empty()) {
      rest_path_ = "/v2/models/" + model + "/infer";
      rest_ = std::make_unique<RestTransport>(
          "http://" + options.http_address, options.timeout_ms, options.polling_threads,
          [this](void* tag, RestTransport::Answer&& answer) { CompleteRest(static_cast<Call*>(tag), std::move(answer)); });
    }
  }

  // Sends the whole load and returns once every call has been answered and every thread joined.
  void Execute(const std::function<void(const Progress&)>& progress, int64_t interval_ms) {
    start_ = Clock::now();
    warmup_end_ = start_ + ToDuration(options_.warmup_s);
    measure_end_ = warmup_end_ + ToDuration(options_.duration_s);

    std::vector<std::thread> pollers;
    for (int64_t i = 0; i < options_.polling_threads; ++i) pollers.emplace_back([this] { Poll(); });
    std::thread reporter;
    if (progress) reporter = std::thread([&] { ReportProgress(progress, interval_ms); });

    if (options_.concurrency > 0) {
      StartCallers();
    } else {
      IssueSchedule();
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      drained_.wait(lock, [this] { return issuing_done_ && in_flight_ == 0; });
      finished_ = true;
    }
    progress_wake_.notify_all();
    if (reporter.joinable()) reporter.join();
    // Nothing is outstanding and nothing more is sent: the queue drains at once.
    rest_.reset();
    queue_.Shutdown();
    for (std::thread& poller : pollers) poller.join();
  }

  void FillReport(Report* report) const {
    std::lock_guard<std::mutex> lock(mutex_);
    report->warmup_requests = warmup_issued_;
    report->issued = issued_;
    report->ok = ok_;
    report->errors = errors_;
    report->error_examples = error_examples_;
    report->tokens = tokens_;
    report->elapsed_s = 0;
    if (first_measured_start_ && last_measured_answer_) {
      report->elapsed_s =
          std::chrono::duration<double>(*last_measured_answer_ - *first_measured_start_).count();
    }
    report->requests_per_s = report->elapsed_s > 0 ? ok_ / report->elapsed_s : 0;
    report->tokens_per_s = report->elapsed_s > 0 ? tokens_ / report->elapsed_s : 0;
    report->latency = Summarize(latencies_);
    report->send_lag = Summarize(send_lags_);
  }

 private:
  static Clock::duration ToDuration(double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }

  void CountErrorLocked(const std::string& key, const std::string& message) {
    ++errors_[key];
    error_examples_.emplace(key, message);  // keeps the first
  }

  // Whether a request issued or due at `when` is past the end of the run. Requires mutex_.
  bool StopsAtLocked(Clock::time_point when) const {
    if (issuing_done_) return true;
    if (when < warmup_end_) return false;
    return options_.requests > 0 ? issued_ >= options_.requests : when >= measure_end_;
  }

  // Decides about a request issued or due at `when`: *call is set to a call ready for Send, or left
  // null when the run has ended (issuing_done_ is then set) or the arrival was dropped. Requires mutex_.
  void AdmitLocked(Clock::time_point when, Call** call) {
    *call = nullptr;
    if (StopsAtLocked(when)) {
      issuing_done_ = true;
      if (in_flight_ == 0) drained_.notify_all();
      return;
    }
    const bool measured = when >= warmup_end_;
    if (measured) {
      ++issued_;
      if (!first_measured_start_) first_measured_start_ = when;
    } else {
      ++warmup_issued_;
    }
    if (options_.concurrency == 0 && in_flight_ >= options_.max_in_flight) {
      if (measured) {
        CountErrorLocked(kNotSent, std::to_string(in_flight_) + " calls already in flight");
      }
      return;
    }
    if (measured && options_.concurrency == 0) send_lags_.Record(Clock::now() - when);
    const int64_t length = options_.lengths.Sample(length_rng_);
    auto made = std::make_unique<Call>();
    const auto cached = requests_.find(length);
    if (cached != requests_.end()) {
      made->request = cached->second.get();
      if (rest_) std::tie(made->rest_body, made->rest_json_length) = rest_bodies_.at(length);
    } else {
      RequestSpec spec;
      spec.model = model_;
      spec.rows = options_.rows;
      spec.length = length;
      spec.seed = options_.seed + static_cast<uint64_t>(length);
      spec.encoding = options_.encoding;
      spec.outputs = options_.outputs;
      auto request = std::make_unique<inference::ModelInferRequest>();
      const grpc::Status status = MakeRequestFromMetadata(metadata_, spec, request.get());
      if (!status.ok()) {
        // Not expected: Create() built the shortest and the longest request. A closed-loop caller
        // would be lost without a call, so the run ends here, with the error counted as measured.
        if (!measured) {
          --warmup_issued_;
          ++issued_;
          if (!first_measured_start_) first_measured_start_ = when;
        }
        CountErrorLocked(StatusCodeName(status.error_code()), status.error_message());
        issuing_done_ = true;
        if (in_flight_ == 0) drained_.notify_all();
        return;
      }
      made->request = request.get();
      if (rest_) {
        // The call's deadline as Triton's `timeout` parameter, so that the server knows it as it knows
        // a gRPC call's (the client's own timer alone would leave the server running calls for
        // callers that have left).
        made->rest_body = std::make_shared<const std::string>(
            RestInferBody(*request, &made->rest_json_length, options_.timeout_ms * 1000));
      }
      // Kept for every later call of this length while the cache has room (a call serialises its
      // request when it starts, so one message can serve them all); otherwise the call owns it.
      const int64_t bytes = static_cast<int64_t>(request->ByteSizeLong());
      if (cached_bytes_ + bytes <= options_.request_cache_bytes) {
        cached_bytes_ += bytes;
        requests_.emplace(length, std::move(request));
        if (rest_) rest_bodies_[length] = {made->rest_body, made->rest_json_length};
      } else {
        made->owned_request = std::move(request);
      }
    }
    made->stub = stubs_[next_stub_++ % stubs_.size()].get();
    made->start = when;
    made->length = length;
    made->measured = measured;
    ++in_flight_;
    *call = made.release();
  }

  // Starts `call` on the completion queue; done outside mutex_, since it serialises the request.
  void Send(Call* call) {
    if (rest_) {
      rest_->Send(call, rest_path_, call->rest_body, call->rest_json_length);
      return;
    }
    if (options_.timeout_ms > 0) {
      call->context.set_deadline(std::chrono::system_clock::now() +
                                 std::chrono::milliseconds(options_.timeout_ms));
    }
    call->reader = call->stub->PrepareAsyncModelInfer(&call->context, *call->request, &queue_);
    call->reader->StartCall();
    call->reader->Finish(&call->response, &call->status, call);
  }

  // Closed loop: each caller's first request; the polling threads send the rest.
  void StartCallers() {
    for (int64_t i = 0; i < options_.concurrency; ++i) {
      Call* call = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        AdmitLocked(Clock::now(), &call);
      }
      if (call == nullptr) break;
      Send(call);
    }
  }

  // Open loop: sends each arrival when it is due, whatever is still outstanding.
  void IssueSchedule() {
    PoissonArrivals arrivals(options_.rate_rps, options_.seed + 1);
    while (true) {
      const Clock::time_point due = start_ + arrivals.Next();
      {
        // Checked before sleeping, so that the run does not wait for an arrival past its end.
        std::lock_guard<std::mutex> lock(mutex_);
        if (StopsAtLocked(due)) {
          issuing_done_ = true;
          if (in_flight_ == 0) drained_.notify_all();
          return;
        }
      }
      std::this_thread::sleep_until(due);
      Call* call = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        AdmitLocked(due, &call);
      }
      if (call != nullptr) Send(call);
    }
  }

  // A REST answer, as the gRPC status and response the gRPC path would have seen.
  void CompleteRest(Call* call, RestTransport::Answer&& answer) {
    if (answer.http_status == 0) {
      call->status = grpc::Status(answer.timed_out ? grpc::StatusCode::DEADLINE_EXCEEDED : grpc::StatusCode::UNAVAILABLE,
                                  answer.transport_error);
    } else {
      call->status = ParseRestInferAnswer(answer.http_status, answer.body, answer.json_length, &call->response);
    }
    Complete(call);
  }

  void Poll() {
    void* tag = nullptr;
    bool ok = false;
    if (!options_.busy_poll) {
      while (queue_.Next(&tag, &ok)) Complete(static_cast<Call*>(tag));
      return;
    }
    while (true) {
      const grpc::CompletionQueue::NextStatus status = queue_.AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC));
      if (status == grpc::CompletionQueue::SHUTDOWN) return;
      if (status == grpc::CompletionQueue::GOT_EVENT) Complete(static_cast<Call*>(tag));
    }
  }

  void Complete(Call* call) {
    const Clock::time_point now = Clock::now();
    std::string error_key;
    std::string error_message;
    if (!call->status.ok()) {
      error_key = StatusCodeName(call->status.error_code());
      error_message = call->status.error_message();
    } else {
      // Checked outside the lock: it reads every output's shape and size.
      const grpc::Status checked =
          CheckAnswer(metadata_, options_.rows, call->length, call->response, options_.outputs);
      if (!checked.ok()) {
        error_key = kBadAnswer;
        error_message = checked.error_message();
      }
    }
    Call* next = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --in_flight_;
      ++answered_;
      if (call->measured) {
        last_measured_answer_ = std::max(last_measured_answer_.value_or(now), now);
        if (error_key.empty()) {
          ++ok_;
          tokens_ += options_.rows * call->length;
          latencies_.Record(now - call->start);
        } else {
          CountErrorLocked(error_key, error_message);
        }
      }
      if (options_.concurrency > 0) AdmitLocked(now, &next);
      if (issuing_done_ && in_flight_ == 0) drained_.notify_all();
    }
    delete call;
    if (next != nullptr) Send(next);
  }

  void ReportProgress(const std::function<void(const Progress&)>& progress, int64_t interval_ms) {
    Clock::time_point last_time = start_;
    int64_t last_answered = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      progress_wake_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(interval_ms, 1)),
                              [this] { return finished_; });
      const Clock::time_point now = Clock::now();
      Progress snapshot;
      snapshot.elapsed_s = std::chrono::duration<double>(now - start_).count();
      snapshot.warming_up = now < warmup_end_;
      snapshot.issued = issued_;
      snapshot.ok = ok_;
      for (const auto& [key, count] : errors_) snapshot.errors += count;
      snapshot.in_flight = in_flight_;
      const double interval_s = std::chrono::duration<double>(now - last_time).count();
      if (interval_s > 0) snapshot.recent_requests_per_s = (answered_ - last_answered) / interval_s;
      last_time = now;
      last_answered = answered_;
      const bool last = finished_;
      lock.unlock();
      progress(snapshot);
      if (last) return;
      lock.lock();
    }
  }

  const std::string& model_;
  const LoadOptions& options_;
  const inference::ModelMetadataResponse& metadata_;
  const std::vector<std::unique_ptr<Stub>>& stubs_;
  grpc::CompletionQueue queue_;
  // REST runs only: the transport (its threads call CompleteRest) and the infer path.
  std::string rest_path_;
  std::unique_ptr<RestTransport> rest_;
  // Set before any other thread starts, read-only afterwards.
  Clock::time_point start_;
  Clock::time_point warmup_end_;
  Clock::time_point measure_end_;  // duration mode only

  mutable std::mutex mutex_;
  std::condition_variable drained_;        // issuing_done_ && in_flight_ == 0
  std::condition_variable progress_wake_;  // finished_
  std::mt19937_64 length_rng_;             // guarded by mutex_
  // Requests by length, kept for the run (calls point at them), up to request_cache_bytes in all.
  // Guarded by mutex_.
  std::map<int64_t, std::unique_ptr<inference::ModelInferRequest>> requests_;
  // REST runs: the body of each request in requests_. Guarded by mutex_.
  std::map<int64_t, std::pair<std::shared_ptr<const std::string>, size_t>> rest_bodies_;
  int64_t cached_bytes_ = 0;    // guarded by mutex_
  size_t next_stub_ = 0;        // guarded by mutex_
  bool issuing_done_ = false;   // guarded by mutex_
  bool finished_ = false;       // guarded by mutex_
  int64_t in_flight_ = 0;       // guarded by mutex_
  int64_t answered_ = 0;        // guarded by mutex_; warm-up included
  int64_t warmup_issued_ = 0;   // guarded by mutex_
  int64_t issued_ = 0;          // guarded by mutex_; this and below: measured requests only
  int64_t ok_ = 0;              // guarded by mutex_
  int64_t tokens_ = 0;          // guarded by mutex_
  std::map<std::string, int64_t> errors_;              // guarded by mutex_
  std::map<std::string, std::string> error_examples_;  // guarded by mutex_
  LatencyRecorder latencies_;                          // guarded by mutex_
  LatencyRecorder send_lags_;                          // guarded by mutex_; open loop only
  std::optional<Clock::time_point> first_measured_start_;  // guarded by mutex_
  std::optional<Clock::time_point> last_measured_answer_;  // guarded by mutex_
};

grpc::Status ValidateOptions(const LoadOptions& options) {
  if ((options.concurrency > 0) == (options.rate_rps > 0)) {
    return Invalid("give exactly one of --concurrency (closed loop) and --rate (open loop)");
  }
  if (options.concurrency < 0) return Invalid("--concurrency must be at least 1");
  if (!std::isfinite(options.rate_rps) || options.rate_rps < 0) {
    return Invalid("--rate must be a positive number of requests per second");
  }
  if ((options.duration_s > 0) == (options.requests > 0)) {
    return Invalid("give exactly one of --duration-s and --requests");
  }
  if (!std::isfinite(options.duration_s) || options.duration_s < 0 || options.requests < 0) {
    return Invalid("--duration-s and --requests must be positive");
  }
  if (!std::isfinite(options.warmup_s) || options.warmup_s < 0) {
    return Invalid("--warmup-s must be 0 or more");
  }
  // Beyond this, adding them to a steady_clock time point could overflow.
  if (options.duration_s > kMaxSeconds || options.warmup_s > kMaxSeconds) {
    return Invalid("--duration-s and --warmup-s must be at most " + std::to_string(kMaxSeconds));
  }
  if (options.rows < 1) return Invalid("--rows must be at least 1");
  if (options.timeout_ms < 0) return Invalid("--timeout-ms must be 0 (none) or more");
  // Beyond it, the deadline in µs (REST's `timeout` parameter) or added to the clock could overflow.
  if (options.timeout_ms > kMaxSeconds * 1000) {
    return Invalid("--timeout-ms must be at most " + std::to_string(kMaxSeconds * 1000));
  }
  if (options.max_in_flight < 1) return Invalid("--max-in-flight must be at least 1");
  if (options.request_cache_bytes < 0) return Invalid("request_cache_bytes must be 0 or more");
  if (options.busy_poll && !options.http_address.empty()) {
    return Invalid("--busy-poll: gRPC calls only, not with --http-address");
  }
  if (options.polling_threads < 1 || options.polling_threads > kMaxThreads) {
    return Invalid("--threads must be in [1, " + std::to_string(kMaxThreads) + "]");
  }
  if (!options.http_address.empty() && options.encoding != InputEncoding::kRaw) {
    return Invalid("--contents typed: the REST binding sends binary tensors; use --contents raw");
  }
  if (options.connections < 1 || options.connections > kMaxThreads) {
    return Invalid("--connections must be in [1, " + std::to_string(kMaxThreads) + "]");
  }
  return grpc::Status::OK;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, int64_t index) {
  grpc::ChannelArguments args;
  // Answers such as an encoder's last_hidden_state exceed gRPC's 4 MiB default.
  args.SetMaxReceiveMessageSize(-1);
  // Channels with equal arguments would share one connection through the global subchannel pool; a
  // private pool (and a distinct argument, to be sure) gives each channel a connection of its own.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("graphserve.loadgen.connection", static_cast<int>(index));
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

}  // namespace

LoadRunner::LoadRunner(const std::string& address, const LoadOptions& options,
                       const inference::ModelMetadataResponse& metadata)
    : address_(address), options_(options), metadata_(metadata) {
  for (int64_t i = 0; i < options_.connections; ++i) {
    channels_.push_back(MakeChannel(address_, i));
    stubs_.push_back(inference::GRPCInferenceService::NewStub(channels_.back()));
  }
}

grpc::Status LoadRunner::Create(const std::string& address, const LoadOptions& options,
                                const inference::ModelMetadataResponse& metadata,
                                std::unique_ptr<LoadRunner>* runner) {
  grpc::Status status = ValidateOptions(options);
  if (!status.ok()) return status;
  const auto& declared = metadata.outputs();
  for (const std::string& name : options.outputs) {
    if (std::none_of(declared.begin(), declared.end(), [&](const auto& o) { return o.name() == name; })) {
      return Invalid("--outputs: model '" + options.model + "' has no output '" + name + "'");
    }
  }
  // The shortest and the longest request must be buildable: the model's inputs are of a kind
  // MakeRequestFromMetadata can generate, and the longest stays under protobuf's 2 GiB.
  for (int64_t length : {options.lengths.min(), options.lengths.max()}) {
    RequestSpec spec;
    spec.model = options.model;
    spec.rows = options.rows;
    spec.length = length;
    inference::ModelInferRequest request;
    status = MakeRequestFromMetadata(metadata, spec, &request);
    if (!status.ok()) return status;
  }
  runner->reset(new LoadRunner(address, options, metadata));
  return grpc::Status::OK;
}

grpc::Status LoadRunner::Run(Report* report, const std::function<void(const Progress&)>& progress,
                             int64_t progress_interval_ms) {
  if (ran_) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "a LoadRunner runs once");
  ran_ = true;
  // Connecting first keeps the connection set-up out of the first requests' latency.
  const auto connect_timeout = options_.timeout_ms > 0
                                   ? std::chrono::milliseconds(options_.timeout_ms)
                                   : std::chrono::milliseconds(kDefaultConnectTimeout);
  for (const auto& channel : channels_) {
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + connect_timeout)) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "cannot connect to " + address_ + " within " +
                              std::to_string(connect_timeout.count()) + " ms");
    }
  }

  const std::string model = options_.model.empty() ? metadata_.name() : options_.model;
  LoadRun run(model, options_, metadata_, stubs_);
  run.Execute(progress, progress_interval_ms);

  *report = Report();
  // Where the measured calls went: the REST address for a REST run.
  report->address = options_.http_address.empty() ? address_ : "http://" + options_.http_address;
  report->model = model;
  report->mode = options_.concurrency > 0 ? "closed" : "open";
  report->concurrency = options_.concurrency;
  report->rate_rps = options_.rate_rps;
  report->lengths = options_.lengths.description();
  report->rows = options_.rows;
  report->warmup_s = options_.warmup_s;
  run.FillReport(report);
  return grpc::Status::OK;
}

}  // namespace graphserve::loadgen
