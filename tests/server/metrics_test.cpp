// ServerMetrics' text exposition: names, types and labels of every family, and the identities users
// rely on (success count = requests answered, replays + eager = batches, padded >= real), driven
// through a real ModelScheduler whose executors are fakes that count like the engine does; and the
// HTTP endpoint that serves it.
#include "graphserve/server/observability/metrics.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "fake_clock.h"
#include "graphserve/server/http/http_client_bounds.h"
#include "graphserve/server/observability/log_limiter.h"
#include "graphserve/server/observability/metrics_endpoint.h"
#include "http_get.h"
#include "prometheus_text.h"
#include "scheduler_test_support.h"

namespace graphserve {
namespace {

using scheduler_test::Options;
using scheduler_test::TestSpec;
using testing::Exposition;
using testing::Labels;

// Counts like the engine's executors: a batch padded to one of `graphs` is a replay, any other grid
// bucket runs eagerly with reason kVerifyFailed, and a shape off the grid with kOversize. Echoes each
// request's input back as its output.
class FakeExecutor : public Executor {
 public:
  FakeExecutor(ModelSpec spec, std::string device, std::set<BucketShape> graphs)
      : spec_(std::move(spec)), device_(std::move(device)), graphs_(std::move(graphs)) {}

  Status Warmup() override { return Status::Ok(); }

  Status Execute(const Batch& batch, BatchOutputs* outputs) override {
    outputs->clear();
    uint64_t real = 0;
    for (const InferenceItem* item : batch.items) {
      outputs->push_back({item->inputs.at(0)});
      real += static_cast<uint64_t>(item->rows * item->length);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (graphs_.count(batch.padded_shape) > 0) {
      ++counters_.graph_replays[batch.padded_shape];
    } else {
      const bool oversize = spec_.IsOversize(batch.padded_shape.batch, batch.padded_shape.length);
      ++counters_.eager_runs[static_cast<int>(oversize ? EagerReason::kOversize
                                                       : EagerReason::kVerifyFailed)];
    }
    ++counters_.batches;
    counters_.real_elements += real;
    counters_.padded_elements +=
        static_cast<uint64_t>(batch.padded_shape.batch * batch.padded_shape.length);
    return Status::Ok();
  }

  std::vector<BucketInfo> Buckets() const override {
    std::vector<BucketInfo> buckets;
    for (const BucketShape& shape : spec_.Buckets()) {
      BucketInfo info;
      info.shape = shape;
      info.graph = graphs_.count(info.shape) > 0;
      info.eager_reason = EagerReason::kVerifyFailed;
      info.execute_time_us = static_cast<double>(100 * shape.batch + shape.length);
      buckets.push_back(info);
    }
    return buckets;
  }
  ExecutionCounters Counters() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return counters_;
  }
  CaptureSummary capture_summary() const override {
    CaptureSummary summary;
    summary.graphs_captured = static_cast<int>(graphs_.size());
    summary.capture_time_us = 1.5e6;
    summary.graph_pool_bytes = 1000;
    return summary;
  }
  std::string device() const override { return device_; }

 private:
  const ModelSpec spec_;
  const std::string device_;
  const std::set<BucketShape> graphs_;
  mutable std::mutex mutex_;
  ExecutionCounters counters_;  // guarded by mutex_
};

HostTensor Int64Tensor(int64_t rows, int64_t length) {
  HostTensor tensor;
  tensor.dtype = DataType::kInt64;
  tensor.shape = {rows, length};
  tensor.bytes.assign(static_cast<size_t>(rows * length) * sizeof(int64_t), '\0');
  return tensor;
}


ServerMetricsOptions TestOptions() {
  ServerMetricsOptions options;
  options.version = "9.8.7";
  options.engine.libtorch_version = "1.13.0";
  options.engine.cuda_version = "";
  options.device_memory = [](const std::string& device) {
    DeviceMemory memory;
    memory.allocated_bytes = device == "cuda:1" ? 2000 : 1000;
    memory.reserved_bytes = 4096;
    return memory;
  };
  return options;
}

// Drives requests through a ModelScheduler and ModelRequestMetrics exactly as InferenceService does
// (Started before Enqueue; Finished from `done`, or at once when Enqueue refuses; a success
// counted by AnswerWritten once written, here at once), and waits for the answers (a refusal is an answer
// too).
class Harness {
 public:
  Harness(ServerMetrics* metrics, ModelScheduler* scheduler)
      : metrics_(metrics->ForModel(scheduler->spec().name)), scheduler_(scheduler) {}

  // Returns Enqueue's status. `prepare` may set a deadline or cancel the request first.
  Status Submit(int64_t rows, int64_t length,
                const std::function<void(PendingRequest&)>& prepare = nullptr) {
    auto request = std::make_shared<PendingRequest>();
    request->item.rows = rows;
    request->item.length = length;
    request->item.inputs.push_back(Int64Tensor(rows, length));
    request->item.outputs_wanted = {true};
    if (prepare) prepare(*request);
    const int64_t arrival_us = clock_.NowMicros();
    request->done = [this, arrival_us](const Status& outcome, std::vector<HostTensor>&&,
                                       const RequestTiming& timing) {
      metrics_->Finished(outcome, clock_.NowMicros() - arrival_us, timing);
      if (outcome.ok()) metrics_->AnswerWritten(true, "grpc");
      Answered();
    };
    metrics_->Started(rows, length);
    const Status status = scheduler_->Enqueue(request);
    if (!status.ok()) {
      metrics_->Finished(status, clock_.NowMicros() - arrival_us, RequestTiming{});
      Answered();
    }
    return status;
  }

  bool WaitForAnswers(int n) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(30), [&] { return answered_ >= n; });
  }

 private:
  void Answered() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++answered_;
    changed_.notify_all();
  }

  ModelRequestMetrics* const metrics_;
  ModelScheduler* const scheduler_;
  SteadyClock clock_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int answered_ = 0;  // guarded by mutex_
};

std::unique_ptr<ModelScheduler> MakeScheduler(const ModelSpec& spec, const SchedulerOptions& options,
                                              const std::vector<std::string>& devices,
                                              const std::set<BucketShape>& graphs, const Clock* clock) {
  std::vector<std::unique_ptr<Executor>> executors;
  for (const std::string& device : devices) {
    // Like the engine: only CUDA executors capture graphs.
    const bool cuda = device.rfind("cuda", 0) == 0;
    executors.push_back(
        std::make_unique<FakeExecutor>(spec, device, cuda ? graphs : std::set<BucketShape>{}));
  }
  return std::make_unique<ModelScheduler>(spec, options, std::move(executors), clock);
}

std::unique_ptr<ModelScheduler> MakeScheduler(const std::string& model, const SchedulerOptions& options,
                                              const std::vector<std::string>& devices,
                                              const std::set<BucketShape>& graphs, const Clock* clock) {
  return MakeScheduler(TestSpec(model), options, devices, graphs, clock);
}

// ---------------------------------------------------------------------------------------------------

TEST(MetricsTest, LatencyBucketsResolve100MicrosecondsTo10Seconds) {
  const std::vector<double> bounds = LatencyBucketsSeconds();
  ASSERT_EQ(bounds.size(), 16u);  // 1, 2.5, 5 over five decades, then 10 s
  EXPECT_DOUBLE_EQ(bounds.front(), 100e-6);
  EXPECT_DOUBLE_EQ(bounds[1], 250e-6);
  EXPECT_DOUBLE_EQ(bounds[2], 500e-6);
  EXPECT_DOUBLE_EQ(bounds[3], 1e-3);
  EXPECT_DOUBLE_EQ(bounds.back(), 10.0);
  for (size_t i = 1; i < bounds.size(); ++i) EXPECT_LT(bounds[i - 1], bounds[i]);
}

// What a grid is planned from: every request's rows and length, per model; a fixed-shape model's
// requests have rows only.
TEST(MetricsTest, TrafficShapeHistogramsCountEachRequestsRowsAndLength) {
  SteadyClock clock;
  ServerMetrics metrics(TestOptions());
  auto scheduler = MakeScheduler("m", Options(0), {"cpu"}, {}, &clock);
  metrics.AddModel(scheduler.get(), "1");
  ModelRequestMetrics* model = metrics.ForModel("m");
  model->Started(1, 8);
  model->Started(3, 40);
  model->Started(3, 300);
  model->Started(2, -1);
  const Exposition exposition(metrics.TextExposition());
  EXPECT_EQ(exposition.One("graphserve_request_rows_count", {{"model", "m"}}), 4.0);
  EXPECT_EQ(exposition.One("graphserve_request_rows_sum", {{"model", "m"}}), 9.0);
  EXPECT_EQ(exposition.One("graphserve_request_rows_bucket", {{"model", "m"}, {"le", "2"}}), 2.0);
  EXPECT_EQ(exposition.One("graphserve_request_rows_bucket", {{"model", "m"}, {"le", "3"}}), 4.0);
  EXPECT_EQ(exposition.One("graphserve_request_length_count", {{"model", "m"}}), 3.0);
  EXPECT_EQ(exposition.One("graphserve_request_length_bucket", {{"model", "m"}, {"le", "8"}}), 1.0);
  EXPECT_EQ(exposition.One("graphserve_request_length_bucket", {{"model", "m"}, {"le", "40"}}), 2.0);
  EXPECT_EQ(exposition.One("graphserve_request_length_bucket", {{"model", "m"}, {"le", "256"}}), 2.0);
  EXPECT_EQ(exposition.One("graphserve_request_length_bucket", {{"model", "m"}, {"le", "320"}}), 3.0);
}

TEST(MetricsTest, DeadlineLeftAtArrivalIsObservedInSeconds) {
  SteadyClock clock;
  ServerMetrics metrics(TestOptions());
  auto scheduler = MakeScheduler("m", Options(0), {"cpu"}, {}, &clock);
  metrics.AddModel(scheduler.get(), "1");
  ModelRequestMetrics* model = metrics.ForModel("m");
  model->ArrivedWithDeadline(2'000);    // 2 ms left
  model->ArrivedWithDeadline(90'000);   // 90 ms
  model->ArrivedWithDeadline(100'000);  // 100 ms
  const Exposition exposition(metrics.TextExposition());
  const std::map<std::string, std::string> m = {{"model", "m"}};
  EXPECT_EQ(exposition.One("graphserve_request_deadline_left_seconds_count", m), 3.0);
  EXPECT_NEAR(exposition.One("graphserve_request_deadline_left_seconds_sum", m), 0.192, 1e-9);
  EXPECT_EQ(exposition.One("graphserve_request_deadline_left_seconds_bucket", {{"model", "m"}, {"le", "0.0025"}}),
            1.0);
  EXPECT_EQ(exposition.One("graphserve_request_deadline_left_seconds_bucket", {{"model", "m"}, {"le", "0.1"}}),
            3.0);
}

TEST(MetricsTest, CodeLabelIsSuccessOrTheLowerCaseGrpcName) {
  EXPECT_STREQ(RequestCodeLabel(StatusCode::kOk), "success");
  EXPECT_STREQ(RequestCodeLabel(StatusCode::kResourceExhausted), "resource_exhausted");
  EXPECT_STREQ(RequestCodeLabel(StatusCode::kDeadlineExceeded), "deadline_exceeded");
  EXPECT_STREQ(RequestCodeLabel(StatusCode::kCancelled), "cancelled");
  EXPECT_STREQ(RequestCodeLabel(StatusCode::kNotFound), "not_found");
}

TEST(MetricsTest, EveryFamilyIsExportedWithItsTypeAndZeroSeriesBeforeAnyRequest) {
  SteadyClock clock;
  LogLimiter log_limiter(&clock, LogLimit{});
  ServerMetricsOptions options = TestOptions();
  options.log_limiter = &log_limiter;
  ServerMetrics metrics(options);
  auto scheduler = MakeScheduler("m", Options(0), {"cuda:0"}, {{1, 16}, {2, 16}}, &clock);
  metrics.AddModel(scheduler.get(), "1");
  const Exposition exposition(metrics.TextExposition());

  const std::map<std::string, std::string> expected = {
      {"graphserve_requests_total", "counter"},
      {"graphserve_request_duration_seconds", "histogram"},
      {"graphserve_queue_duration_seconds", "histogram"},
      {"graphserve_compute_duration_seconds", "histogram"},
      {"graphserve_requests_in_flight", "gauge"},
      {"graphserve_queue_depth", "gauge"},
      {"graphserve_admission_work_scale", "gauge"},
      {"graphserve_admission_wait_scale", "gauge"},
      {"graphserve_bucket_cost_estimate_seconds", "gauge"},
      {"graphserve_admission_probes_total", "counter"},
      {"graphserve_batches_total", "counter"},
      {"graphserve_batch_rows_total", "counter"},
      {"graphserve_bucket_grid_max_batch_tokens", "gauge"},
      {"graphserve_graph_replays_total", "counter"},
      {"graphserve_eager_executions_total", "counter"},
      {"graphserve_real_elements_total", "counter"},
      {"graphserve_padded_elements_total", "counter"},
      {"graphserve_graph_capture_seconds", "gauge"},
      {"graphserve_bucket_execution_seconds", "gauge"},
      {"graphserve_graph_pool_bytes", "gauge"},
      {"graphserve_gpu_memory_allocated_bytes", "gauge"},
      {"graphserve_gpu_memory_reserved_bytes", "gauge"},
      {"graphserve_build_info", "gauge"},
      {"graphserve_auth_failures_total", "counter"},
      {"graphserve_connections_refused_total", "counter"},
      {"graphserve_answers_dropped_total", "counter"},
      {"graphserve_http_buffered_bytes", "gauge"},
      {"graphserve_http_connections_closed_total", "counter"},
      {"graphserve_connections_closed_total", "counter"},
      {"graphserve_device_faulted", "gauge"},
      {"graphserve_log_lines_suppressed_total", "counter"},
      {"graphserve_request_rows", "histogram"},
      {"graphserve_request_length", "histogram"},
      {"graphserve_request_deadline_left_seconds", "histogram"},
      // Triton's names, for Triton's dashboards.
      {"nv_inference_request_success", "counter"},
      {"nv_inference_request_failure", "counter"},
      {"nv_inference_count", "counter"},
      {"nv_inference_exec_count", "counter"},
      {"nv_inference_request_duration_us", "counter"},
      {"nv_inference_queue_duration_us", "counter"},
      {"nv_inference_compute_input_duration_us", "counter"},
      {"nv_inference_compute_infer_duration_us", "counter"},
      {"nv_inference_compute_output_duration_us", "counter"},
      {"nv_inference_pending_request_count", "gauge"},
  };
  EXPECT_EQ(exposition.types(), expected);
  EXPECT_EQ(exposition.One("graphserve_auth_failures_total", {{"endpoint", "grpc"}}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_device_faulted", {}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_http_buffered_bytes", {}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_connections_refused_total",
                           {{"endpoint", "http"}, {"reason", "connection_cap"}}),
            0.0);
  for (const char* reason : {"descriptor_reserve", "descriptors_exhausted", "address_cap"}) {
    EXPECT_EQ(
        exposition.One("graphserve_connections_refused_total", {{"endpoint", "grpc"}, {"reason", reason}}),
        0.0)
        << reason;
  }
  for (const char* reason : {"header_timeout", "body_timeout", "keep_alive_timeout", "send_timeout"}) {
    EXPECT_EQ(exposition.One("graphserve_http_connections_closed_total", {{"reason", reason}}), 0.0)
        << reason;
  }
  for (LogKind kind : kLogKinds) {
    EXPECT_EQ(exposition.One("graphserve_log_lines_suppressed_total", {{"kind", LogKindLabel(kind)}}), 0.0)
        << LogKindLabel(kind);
  }

  // The codes a served model can be answered with exist at zero, so their rates are defined at once.
  for (const char* code : {"success", "invalid_argument", "resource_exhausted", "unavailable",
                           "deadline_exceeded", "cancelled", "internal"}) {
    EXPECT_EQ(exposition.One("graphserve_requests_total", {{"model", "m"}, {"code", code}}), 0.0)
        << code;
  }
  // Graph buckets from zero, with the bucket label as batch x length; every eager reason from zero.
  EXPECT_EQ(exposition.Find("graphserve_graph_replays_total").size(), 2u);
  EXPECT_EQ(exposition.One("graphserve_graph_replays_total",
                           {{"model", "m"}, {"device", "cuda:0"}, {"bucket", "2x16"}}),
            0.0);
  for (const char* reason :
       {"oversize", "capture_failed", "verify_failed", "disabled", "no_cuda", "exact_length"}) {
    EXPECT_EQ(exposition.One("graphserve_eager_executions_total",
                             {{"model", "m"}, {"device", "cuda:0"}, {"reason", reason}}),
              0.0)
        << reason;
  }
  EXPECT_EQ(exposition.One("graphserve_requests_in_flight", {{"model", "m"}}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_queue_depth", {{"model", "m"}}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_admission_work_scale", {{"model", "m"}}), 1.0);  // uncalibrated
  EXPECT_EQ(exposition.One("graphserve_admission_wait_scale", {{"model", "m"}}), 1.0);
  // Nothing ran yet: the warm-up figures (100 us a row plus the length), no probe.
  EXPECT_DOUBLE_EQ(
      exposition.One("graphserve_bucket_cost_estimate_seconds", {{"model", "m"}, {"bucket", "2x16"}}),
      216e-6);
  EXPECT_EQ(exposition.One("graphserve_admission_probes_total", {{"model", "m"}}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_bucket_grid_max_batch_tokens", {{"model", "m"}}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_request_duration_seconds_count", {{"model", "m"}}), 0.0);
  // 16 finite bounds and +Inf.
  EXPECT_EQ(exposition.Find("graphserve_request_duration_seconds_bucket", {{"model", "m"}}).size(), 17u);
  EXPECT_EQ(
      exposition.One("graphserve_request_duration_seconds_bucket", {{"model", "m"}, {"le", "0.0001"}}),
      0.0);

  EXPECT_DOUBLE_EQ(
      exposition.One("graphserve_graph_capture_seconds", {{"model", "m"}, {"device", "cuda:0"}}), 1.5);
  EXPECT_DOUBLE_EQ(exposition.One("graphserve_bucket_execution_seconds",
                                  {{"model", "m"}, {"device", "cuda:0"}, {"bucket", "2x16"}}),
                   216e-6);
  EXPECT_EQ(exposition.One("graphserve_graph_pool_bytes", {{"model", "m"}, {"device", "cuda:0"}}),
            1000.0);
  EXPECT_EQ(exposition.One("graphserve_gpu_memory_allocated_bytes", {{"device", "cuda:0"}}), 1000.0);
  EXPECT_EQ(exposition.One("graphserve_gpu_memory_reserved_bytes", {{"device", "cuda:0"}}), 4096.0);
  EXPECT_EQ(exposition.One("graphserve_build_info",
                           {{"version", "9.8.7"}, {"libtorch", "1.13.0"}, {"cuda", "none"}}),
            1.0);
}

TEST(MetricsTest, SuppressedLogLinesAreReadFromTheLimiterAtEachScrape) {
  FakeClock clock;
  LogLimiter log_limiter(&clock, LogLimit{1, 10'000'000});
  ServerMetricsOptions options = TestOptions();
  options.log_limiter = &log_limiter;
  ServerMetrics metrics(options);
  for (int i = 0; i < 4; ++i) log_limiter.Admit(LogKind::kAuthFailure);
  for (int i = 0; i < 2; ++i) log_limiter.Admit(LogKind::kProtobufLibrary, "wire_format_lite.cc:1");
  const Exposition first(metrics.TextExposition());
  EXPECT_EQ(first.One("graphserve_log_lines_suppressed_total", {{"kind", "auth_failure"}}), 3.0);
  EXPECT_EQ(first.One("graphserve_log_lines_suppressed_total", {{"kind", "protobuf"}}), 1.0);
  EXPECT_EQ(first.One("graphserve_log_lines_suppressed_total", {{"kind", "grpc"}}), 0.0);
  // A counter: a new window writes lines again, and the total keeps what was dropped before.
  clock.Advance(10'000'000);
  log_limiter.Admit(LogKind::kAuthFailure);
  log_limiter.Admit(LogKind::kAuthFailure);
  const Exposition second(metrics.TextExposition());
  EXPECT_EQ(second.One("graphserve_log_lines_suppressed_total", {{"kind", "auth_failure"}}), 4.0);
}

TEST(MetricsTest, RestBoundsCountBytesHeldClosuresAndRefusalsApart) {
  ServerMetrics metrics(TestOptions());
  metrics.AddHttpBufferedBytes(5000);
  metrics.AddHttpBufferedBytes(-3000);
  metrics.CountHttpClosure(HttpClosureName(HttpClosure::kSendTimeout));
  metrics.CountHttpClosure(HttpClosureName(HttpClosure::kHeaderTimeout));
  metrics.CountHttpClosure(HttpClosureName(HttpClosure::kHeaderTimeout));
  metrics.CountHttpClosure(HttpClosureName(HttpClosure::kConnectionCap));
  const Exposition exposition(metrics.TextExposition());
  EXPECT_EQ(exposition.One("graphserve_http_buffered_bytes", {}), 2000.0);
  EXPECT_EQ(exposition.One("graphserve_http_connections_closed_total", {{"reason", "send_timeout"}}), 1.0);
  // Whether the answer it carried was an inference's is the REST endpoint's to count, not this.
  EXPECT_EQ(exposition.One("graphserve_answers_dropped_total", {{"endpoint", "http"}}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_http_connections_closed_total", {{"reason", "header_timeout"}}), 2.0);
  // A refusal on arrival is no closing of a connection served: it counts with gRPC's refusals.
  EXPECT_EQ(exposition.One("graphserve_connections_refused_total",
                           {{"endpoint", "http"}, {"reason", "connection_cap"}}),
            1.0);
  EXPECT_TRUE(
      exposition.Find("graphserve_http_connections_closed_total", {{"reason", "connection_cap"}}).empty());
}

TEST(MetricsTest, IdentitiesHoldAfterRequests) {
  SteadyClock clock;
  ServerMetrics metrics(TestOptions());
  // Two instances: one CUDA device replays the batch-1 and batch-2 buckets of length 16 and 32; the
  // CPU one replays nothing.
  auto scheduler =
      MakeScheduler("m", Options(0), {"cuda:0", "cpu"}, {{1, 16}, {2, 16}, {1, 32}, {2, 32}}, &clock);
  metrics.AddModel(scheduler.get(), "1");
  scheduler->Start();
  Harness harness(&metrics, scheduler.get());

  constexpr int kRequests = 60;
  int64_t rows_sent = 0;
  int64_t real_sent = 0;
  for (int i = 0; i < kRequests; ++i) {
    const int64_t rows = 1 + i % 3;
    const int64_t length = i % 10 == 9 ? 100 : 1 + (i * 7) % 64;  // every tenth is oversize
    rows_sent += rows;
    real_sent += rows * length;
    ASSERT_TRUE(harness.Submit(rows, length).ok());
  }
  ASSERT_TRUE(harness.WaitForAnswers(kRequests));
  scheduler->Stop();
  const Exposition exposition(metrics.TextExposition());

  EXPECT_EQ(exposition.One("graphserve_requests_total", {{"model", "m"}, {"code", "success"}}),
            kRequests);
  EXPECT_EQ(exposition.Sum("graphserve_requests_total", {{"model", "m"}}), kRequests);
  for (const char* histogram :
       {"graphserve_request_duration_seconds", "graphserve_queue_duration_seconds",
        "graphserve_compute_duration_seconds"}) {
    EXPECT_EQ(exposition.One(std::string(histogram) + "_count", {{"model", "m"}}), kRequests)
        << histogram;
    EXPECT_EQ(exposition.One(std::string(histogram) + "_bucket", {{"model", "m"}, {"le", "+Inf"}}),
              kRequests)
        << histogram;
  }
  EXPECT_EQ(exposition.One("graphserve_requests_in_flight", {{"model", "m"}}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_queue_depth", {{"model", "m"}}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_bucket_grid_max_batch_tokens", {{"model", "m"}}), 0.0);

  // replays + eager = batches, per device and in total; the scheduler agrees on the batch count.
  for (const char* device : {"cuda:0", "cpu"}) {
    const Labels on_device = {{"model", "m"}, {"device", device}};
    EXPECT_EQ(exposition.Sum("graphserve_graph_replays_total", on_device) +
                  exposition.Sum("graphserve_eager_executions_total", on_device),
              exposition.One("graphserve_batches_total", on_device))
        << device;
    EXPECT_GE(exposition.One("graphserve_padded_elements_total", on_device),
              exposition.One("graphserve_real_elements_total", on_device))
        << device;
  }
  const double batches = exposition.Sum("graphserve_batches_total", {{"model", "m"}});
  EXPECT_EQ(batches, static_cast<double>(scheduler->Counters().batches));
  EXPECT_GT(batches, 0.0);
  EXPECT_GT(exposition.Sum("graphserve_eager_executions_total", {{"reason", "oversize"}}), 0.0);
  EXPECT_EQ(exposition.Sum("graphserve_graph_replays_total", {{"device", "cpu"}}), 0.0);
  EXPECT_EQ(exposition.Sum("graphserve_real_elements_total"), static_cast<double>(real_sent));
  EXPECT_EQ(exposition.One("graphserve_batch_rows_total", {{"model", "m"}}),
            static_cast<double>(rows_sent));

  // The GPU memory series cover CUDA devices only; two instances on devices of their own are not
  // summed together.
  EXPECT_EQ(exposition.Find("graphserve_gpu_memory_allocated_bytes").size(), 1u);
  EXPECT_EQ(exposition.Find("graphserve_graph_pool_bytes").size(), 2u);
}

TEST(MetricsTest, InstancesOnOneDeviceAreSummed) {
  SteadyClock clock;
  ServerMetrics metrics(TestOptions());
  auto scheduler = MakeScheduler("m", Options(0), {"cuda:1", "cuda:1"}, {{1, 16}}, &clock);
  metrics.AddModel(scheduler.get(), "1");
  scheduler->Start();
  Harness harness(&metrics, scheduler.get());
  constexpr int kRequests = 20;
  for (int i = 0; i < kRequests; ++i) ASSERT_TRUE(harness.Submit(1, 10).ok());
  ASSERT_TRUE(harness.WaitForAnswers(kRequests));
  scheduler->Stop();
  const Exposition exposition(metrics.TextExposition());

  const Labels on_device = {{"model", "m"}, {"device", "cuda:1"}};
  EXPECT_EQ(exposition.One("graphserve_batches_total", on_device),
            static_cast<double>(scheduler->Counters().batches));
  EXPECT_EQ(exposition.One("graphserve_graph_replays_total",
                           {{"model", "m"}, {"device", "cuda:1"}, {"bucket", "1x16"}}) +
                exposition.Sum("graphserve_eager_executions_total", on_device),
            exposition.One("graphserve_batches_total", on_device));
  EXPECT_DOUBLE_EQ(exposition.One("graphserve_graph_capture_seconds", on_device), 3.0);
  EXPECT_EQ(exposition.One("graphserve_graph_pool_bytes", on_device), 2000.0);
  EXPECT_EQ(exposition.One("graphserve_gpu_memory_allocated_bytes", {{"device", "cuda:1"}}), 2000.0);
}

TEST(MetricsTest, TheGridsTokenBudgetIsAGaugePerModel) {
  SteadyClock clock;
  ServerMetrics metrics(TestOptions());
  auto scheduler =
      MakeScheduler(scheduler_test::StaircaseTestSpec("wide"), Options(0), {"cpu"}, {}, &clock);
  metrics.AddModel(scheduler.get(), "1");
  const Exposition exposition(metrics.TextExposition());
  EXPECT_EQ(exposition.One("graphserve_bucket_grid_max_batch_tokens", {{"model", "wide"}}), 2048.0);
}

TEST(MetricsTest, FixedShapeBucketsAreLabelledBatchByDash) {
  SteadyClock clock;
  ServerMetrics metrics(TestOptions());
  const ModelSpec spec = scheduler_test::FixedShapeTestSpec("cnn");
  auto scheduler = MakeScheduler(spec, Options(0), {"cuda:0"},
                                 {{1, kFixedShapeLength}, {4, kFixedShapeLength}}, &clock);
  metrics.AddModel(scheduler.get(), "1");
  scheduler->Start();
  Harness harness(&metrics, scheduler.get());
  constexpr int kRequests = 6;
  for (int i = 0; i < kRequests; ++i) ASSERT_TRUE(harness.Submit(1, kFixedShapeLength).ok());
  ASSERT_TRUE(harness.WaitForAnswers(kRequests));
  scheduler->Stop();
  const Exposition exposition(metrics.TextExposition());

  // Only the captured buckets, named "<batch>x-"; whatever ran elsewhere ran eagerly.
  EXPECT_EQ(exposition.Find("graphserve_graph_replays_total", {{"model", "cnn"}}).size(), 2u);
  const Labels on_device = {{"model", "cnn"}, {"device", "cuda:0"}};
  const double replays =
      exposition.One("graphserve_graph_replays_total",
                     {{"model", "cnn"}, {"device", "cuda:0"}, {"bucket", "1x-"}}) +
      exposition.One("graphserve_graph_replays_total",
                     {{"model", "cnn"}, {"device", "cuda:0"}, {"bucket", "4x-"}});
  EXPECT_EQ(replays + exposition.Sum("graphserve_eager_executions_total", on_device),
            exposition.One("graphserve_batches_total", on_device));
  // One real element per row: the padding waste of a batch-only grid is its spare rows.
  EXPECT_EQ(exposition.One("graphserve_real_elements_total", on_device), kRequests);
}

TEST(MetricsTest, EveryFinalStatusIsCountedAndOnlySuccessesAreTimed) {
  SteadyClock clock;
  ServerMetrics metrics(TestOptions());
  // Not started, queue of one: the second request is refused (queue full); Stop runs the first.
  auto scheduler = MakeScheduler("m", Options(0, /*max_queue_size=*/1), {"cpu"}, {}, &clock);
  metrics.AddModel(scheduler.get(), "1");
  Harness harness(&metrics, scheduler.get());

  ASSERT_TRUE(harness.Submit(1, 8).ok());
  EXPECT_EQ(harness.Submit(1, 8).code(), StatusCode::kResourceExhausted);
  {
    const Exposition while_queued(metrics.TextExposition());
    EXPECT_EQ(while_queued.One("graphserve_requests_in_flight", {{"model", "m"}}), 1.0);
    EXPECT_EQ(while_queued.One("graphserve_queue_depth", {{"model", "m"}}), 1.0);
  }
  scheduler->Stop();
  ASSERT_TRUE(harness.WaitForAnswers(2));

  // An expired request and a cancelled one are answered with their own codes. Not started, so that
  // the cancelled one is still queued when Stop drains the queue.
  auto second = MakeScheduler("n", Options(0), {"cpu"}, {}, &clock);
  metrics.AddModel(second.get(), "2");
  Harness second_harness(&metrics, second.get());
  second_harness.Submit(1, 8, [&](PendingRequest& r) { r.deadline_us = clock.NowMicros() - 1; });
  PendingRequest* cancelled = nullptr;
  ASSERT_TRUE(second_harness.Submit(1, 8, [&](PendingRequest& r) { cancelled = &r; }).ok());
  cancelled->cancelled.store(true);  // as InferReactor::OnCancel does
  second->Poke();
  second->Stop();
  ASSERT_TRUE(second_harness.WaitForAnswers(2));

  metrics.ForModel("n")->Refused(StatusCode::kInvalidArgument);
  metrics.ForModel("n")->Refused(StatusCode::kFailedPrecondition);  // a code not created up front
  metrics.CountUnroutedRequest(StatusCode::kNotFound);
  EXPECT_EQ(metrics.ForModel("unknown"), nullptr);

  const Exposition exposition(metrics.TextExposition());
  EXPECT_EQ(exposition.One("graphserve_requests_total", {{"model", "m"}, {"code", "success"}}), 1.0);
  EXPECT_EQ(
      exposition.One("graphserve_requests_total", {{"model", "m"}, {"code", "resource_exhausted"}}),
      1.0);
  EXPECT_EQ(exposition.One("graphserve_requests_total", {{"model", "n"}, {"code", "deadline_exceeded"}}),
            1.0);
  EXPECT_EQ(exposition.One("graphserve_requests_total", {{"model", "n"}, {"code", "cancelled"}}), 1.0);
  EXPECT_EQ(exposition.One("graphserve_requests_total", {{"model", "n"}, {"code", "invalid_argument"}}),
            1.0);
  EXPECT_EQ(
      exposition.One("graphserve_requests_total", {{"model", "n"}, {"code", "failed_precondition"}}),
      1.0);
  EXPECT_EQ(exposition.One("graphserve_requests_total", {{"model", "n"}, {"code", "success"}}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_requests_total", {{"model", ""}, {"code", "not_found"}}), 1.0);
  // The RPC edge and the scheduler agree on what the scheduler refused or dropped.
  EXPECT_EQ(scheduler->Counters().rejected_queue_full, 1u);
  // The expired one was refused on arrival (its deadline had passed), not queued.
  EXPECT_EQ(second->Counters().rejected_deadline, 1u);
  EXPECT_EQ(second->Counters().cancelled, 1u);

  EXPECT_EQ(exposition.One("graphserve_request_duration_seconds_count", {{"model", "m"}}), 1.0);
  EXPECT_EQ(exposition.One("graphserve_request_duration_seconds_count", {{"model", "n"}}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_requests_in_flight", {{"model", "m"}}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_requests_in_flight", {{"model", "n"}}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_queue_depth", {{"model", "n"}}), 0.0);
  // Dropped requests never ran: no batch for model n.
  EXPECT_EQ(exposition.One("graphserve_batches_total", {{"model", "n"}, {"device", "cpu"}}), 0.0);
  EXPECT_EQ(exposition.One("graphserve_eager_executions_total",
                           {{"model", "m"}, {"device", "cpu"}, {"reason", "verify_failed"}}),
            1.0);
}

TEST(MetricsTest, AnAnswerNobodyReadIsCancelledNotASuccess) {
  ServerMetrics metrics(TestOptions());
  SteadyClock clock;
  auto scheduler = MakeScheduler("m", Options(0), {"cpu"}, {}, &clock);
  metrics.AddModel(scheduler.get(), "1");
  ModelRequestMetrics* model = metrics.ForModel("m");
  RequestTiming timing;
  timing.queue_us = 10;
  timing.compute_us = 20;
  for (int i = 0; i < 3; ++i) {
    model->Started(1, 8);
    model->Finished(Status::Ok(), 100, timing);
  }
  {
    // Computed, not yet written: timed, out of flight, but not yet a success.
    const Exposition before_writes(metrics.TextExposition());
    EXPECT_EQ(before_writes.One("graphserve_requests_total", {{"model", "m"}, {"code", "success"}}), 0.0);
    EXPECT_EQ(before_writes.One("graphserve_request_duration_seconds_count", {{"model", "m"}}), 3.0);
    EXPECT_EQ(before_writes.One("graphserve_requests_in_flight", {{"model", "m"}}), 0.0);
  }
  model->AnswerWritten(true, "grpc");
  model->AnswerWritten(false, "grpc");
  model->AnswerWritten(false, "http");
  const Exposition exposition(metrics.TextExposition());
  EXPECT_EQ(exposition.One("graphserve_requests_total", {{"model", "m"}, {"code", "success"}}), 1.0);
  EXPECT_EQ(exposition.One("graphserve_requests_total", {{"model", "m"}, {"code", "cancelled"}}), 2.0);
  EXPECT_EQ(exposition.One("graphserve_answers_dropped_total", {{"endpoint", "grpc"}}), 1.0);
  EXPECT_EQ(exposition.One("graphserve_answers_dropped_total", {{"endpoint", "http"}}), 1.0);
}

MetricsEndpointOptions OnLoopback(const std::string& address = "127.0.0.1:0") {
  MetricsEndpointOptions options;
  options.address = address;
  return options;
}

TEST(MetricsEndpointTest, ServesTheExpositionAtSlashMetrics) {
  SteadyClock clock;
  ServerMetrics metrics(TestOptions());
  auto scheduler = MakeScheduler("m", Options(0), {"cpu"}, {}, &clock);
  metrics.AddModel(scheduler.get(), "1");
  std::unique_ptr<MetricsEndpoint> endpoint;
  const Status started = MetricsEndpoint::Start(OnLoopback(), &metrics, &endpoint);
  ASSERT_TRUE(started.ok()) << started.ToString();
  ASSERT_GT(endpoint->port(), 0);

  const testing::HttpResponse scrape = testing::HttpGet(endpoint->port(), "/metrics");
  EXPECT_EQ(scrape.status, 200);
  EXPECT_NE(scrape.headers.find("Content-Type: text/plain; version=0.0.4"), std::string::npos)
      << scrape.headers;
  EXPECT_EQ(scrape.body, metrics.TextExposition());
  EXPECT_EQ(testing::HttpGet(endpoint->port(), "/metrics?format=text").status, 200);
  EXPECT_EQ(testing::HttpGet(endpoint->port(), "/").status, 404);
  EXPECT_EQ(testing::HttpGet(endpoint->port(), "/metrics/x").status, 404);

  // The series of a model appear in the next scrape after they change.
  metrics.ForModel("m")->Refused(StatusCode::kInvalidArgument);
  const Exposition after(testing::HttpGet(endpoint->port(), "/metrics").body);
  EXPECT_EQ(after.One("graphserve_requests_total", {{"model", "m"}, {"code", "invalid_argument"}}), 1.0);
}

// Slow or silent clients ("slowloris") hold no thread: a scrape beside four of them is answered at
// once, not after their timeout.
TEST(MetricsEndpointTest, SilentClientsDoNotDelayAScrape) {
  ServerMetrics metrics(TestOptions());
  std::unique_ptr<MetricsEndpoint> endpoint;
  ASSERT_TRUE(MetricsEndpoint::Start(OnLoopback(), &metrics, &endpoint).ok());
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(endpoint->port()));
  std::vector<int> silent;
  for (int i = 0; i < 4; ++i) {
    silent.push_back(socket(AF_INET, SOCK_STREAM, 0));
    ASSERT_EQ(connect(silent.back(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    // Half a request line, then nothing.
    ASSERT_EQ(send(silent.back(), "GET /met", 8, MSG_NOSIGNAL), 8);
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(testing::HttpGet(endpoint->port(), "/metrics", /*timeout_s=*/30).status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, MetricsEndpointOptions().client_timeout / 5);
  for (int fd : silent) close(fd);
}

TEST(MetricsEndpointTest, ABusyOrMalformedAddressIsRefusedNamingTheFlag) {
  ServerMetrics metrics(TestOptions());
  std::unique_ptr<MetricsEndpoint> endpoint;
  ASSERT_TRUE(MetricsEndpoint::Start(OnLoopback(), &metrics, &endpoint).ok());

  const std::string busy = "127.0.0.1:" + std::to_string(endpoint->port());
  for (const std::string& address : {busy, std::string("no-port"), std::string("127.0.0.1:http")}) {
    std::unique_ptr<MetricsEndpoint> second;
    const Status status = MetricsEndpoint::Start(OnLoopback(address), &metrics, &second);
    EXPECT_EQ(status.code(), StatusCode::kUnavailable) << address;
    EXPECT_NE(status.message().find("--metrics-address: cannot listen on " + address), std::string::npos)
        << status.message();
    EXPECT_EQ(second, nullptr);
  }
}

}  // namespace
}  // namespace graphserve
