#include "graphserve/server/observability/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <optional>
#include <set>
#include <utility>

#include "graphserve/server/observability/gpu_monitor.h"

namespace graphserve {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// ---------------------------------------------------------------------------------------------------
// Scrape-time families over the schedulers and their executors

// Reads each model's scheduler snapshot on every Collect and turns its counters into metric
// families; it keeps no copy. Thread-safe: Add and Collect may run concurrently.
class SchedulerCollector final : public prometheus::Collectable {
 public:
  explicit SchedulerCollector(ServerMetricsOptions options) : options_(std::move(options)) {}

  // Exports `scheduler` for its model, in place of the version exported before (a reload).
  void Set(const ModelScheduler* scheduler, const std::string& version) EXCLUDES(mutex_) {
    MutexLock lock(&mutex_);
    schedulers_[scheduler->spec().name] = Served{scheduler, version};
  }
  // Stops exporting `scheduler`, unless a newer version of its model replaced it already.
  void Remove(const ModelScheduler* scheduler) EXCLUDES(mutex_) {
    MutexLock lock(&mutex_);
    auto found = schedulers_.find(scheduler->spec().name);
    if (found != schedulers_.end() && found->second.scheduler == scheduler) schedulers_.erase(found);
  }

  std::vector<MetricFamily> Collect() const override EXCLUDES(mutex_);

 private:
  const ServerMetricsOptions options_;
  mutable Mutex mutex_;
  struct Served {
    const ModelScheduler* scheduler;
    std::string version;
  };
  // By model name. Held during a whole Collect, so that Remove returns only once no scrape reads
  // the scheduler any more.
  std::map<std::string, Served> schedulers_ GUARDED_BY(mutex_);
};

namespace {

// What one model's executors on one device have counted, summed over the instances there.
struct DeviceTotals {
  uint64_t batches = 0;
  uint64_t real_elements = 0;
  uint64_t padded_elements = 0;
  std::map<BucketShape, uint64_t> graph_replays;
  std::array<uint64_t, kEagerReasonCount> eager_runs{};
  double capture_time_us = 0.0;
  uint64_t graph_pool_bytes = 0;
  // Summed over the device's instances, with their count, for the mean.
  std::map<BucketShape, std::pair<double, int>> execute_us;
};

// Every family SchedulerCollector exports, filled by the steps below.
struct SchedulerFamilies {
  MetricFamily build_info;
  MetricFamily queue_depth;
  MetricFamily work_scale;
  MetricFamily wait_scale;
  MetricFamily cost_estimate;
  MetricFamily probes;
  MetricFamily batch_rows;
  MetricFamily max_batch_tokens;
  MetricFamily batches;
  MetricFamily replays;
  MetricFamily eager;
  MetricFamily real_elements;
  MetricFamily padded_elements;
  MetricFamily capture_seconds;
  MetricFamily execute_seconds;
  MetricFamily pool_bytes;
  MetricFamily memory_allocated;
  MetricFamily memory_reserved;
  // Triton's names (its metrics.md), labelled model and version, from the same statistics the
  // ModelStatistics RPC answers: a dashboard or alert written for Triton reads graphserve unchanged.
  std::vector<MetricFamily> triton;  // kTritonFamilies, in order
};

MetricFamily NewFamily(const char* name, const char* help, MetricType type) {
  MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  return family;
}

// Appends one sample; `family` is a counter or a gauge.
void AddSample(MetricFamily* family, std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric metric;
  metric.label = std::move(labels);
  if (family->type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family->metric.push_back(std::move(metric));
}

// `family`, a counter of one label, with a sample per value of the label.
MetricFamily CounterByLabel(MetricFamily family, const std::string& label,
                            const std::vector<std::pair<std::string, double>>& counts) {
  for (const auto& [value, count] : counts) AddSample(&family, {{label, value}}, count);
  return family;
}

bool IsCudaDevice(const std::string& device) { return device.rfind("cuda", 0) == 0; }

// Triton's per-model families (its metrics.md), labelled model and version, with the value each
// reads from the model version's statistics (what the ModelStatistics RPC answers) or its snapshot.
struct TritonFamily {
  const char* name;
  const char* help;
  MetricType type;
  double (*value)(const ModelStatisticsSnapshot& statistics, const SchedulerSnapshot& snapshot);
};

double Count(uint64_t count) { return static_cast<double>(count); }
double Micros(const DurationTotal& total) { return static_cast<double>(total.ns / 1000); }

using Stats = ModelStatisticsSnapshot;
using Snapshot = SchedulerSnapshot;
const TritonFamily kTritonFamilies[] = {
    {"nv_inference_request_success",
     "Triton's: successful inference requests (the ModelStatistics RPC's success count)", MetricType::Counter,
     [](const Stats& s, const Snapshot&) { return Count(s.success.count); }},
    {"nv_inference_request_failure", "Triton's: failed inference requests that reached the model (its fail count)",
     MetricType::Counter, [](const Stats& s, const Snapshot&) { return Count(s.fail.count); }},
    {"nv_inference_count", "Triton's: inferences performed, one per row of a successful request",
     MetricType::Counter, [](const Stats& s, const Snapshot&) { return Count(s.inference_count); }},
    {"nv_inference_exec_count", "Triton's: batches executed", MetricType::Counter,
     [](const Stats& s, const Snapshot&) { return Count(s.execution_count); }},
    {"nv_inference_request_duration_us",
     "Triton's: cumulative time of successful requests, arrival to answer, in us", MetricType::Counter,
     [](const Stats& s, const Snapshot&) { return Micros(s.success); }},
    {"nv_inference_queue_duration_us", "Triton's: cumulative time successful requests waited in the queue, in us",
     MetricType::Counter, [](const Stats& s, const Snapshot&) { return Micros(s.queue); }},
    {"nv_inference_compute_input_duration_us",
     "Triton's: cumulative time spent preparing inputs (padding and copying them in), in us; each request "
     "is charged its batch's",
     MetricType::Counter, [](const Stats& s, const Snapshot&) { return Micros(s.compute_input); }},
    {"nv_inference_compute_infer_duration_us",
     "Triton's: cumulative time spent executing the model (graph replay or eager run), in us", MetricType::Counter,
     [](const Stats& s, const Snapshot&) { return Micros(s.compute_infer); }},
    {"nv_inference_compute_output_duration_us", "Triton's: cumulative time spent copying and slicing outputs, in us",
     MetricType::Counter, [](const Stats& s, const Snapshot&) { return Micros(s.compute_output); }},
    {"nv_inference_pending_request_count", "Triton's: requests waiting in the model's queue for execution",
     MetricType::Gauge, [](const Stats&, const Snapshot& snapshot) { return Count(snapshot.queue_depth); }},
};

// The families with their names, help and types, and no samples yet.
SchedulerFamilies EmptySchedulerFamilies() {
  SchedulerFamilies f;
  f.build_info = NewFamily(
      "graphserve_build_info",
      "graphserve's version and its engine's libtorch and CUDA versions; always 1", MetricType::Gauge);
  for (const TritonFamily& triton : kTritonFamilies) {
    f.triton.push_back(NewFamily(triton.name, triton.help, triton.type));
  }
  f.queue_depth = NewFamily(
      "graphserve_queue_depth", "Requests waiting in the model's queue for a batch", MetricType::Gauge);
  f.work_scale = NewFamily(
      "graphserve_admission_work_scale",
      "Device time the model's batches really took per unit of the admission estimate (full "
      "batches at the measured bucket times); deadline-aware admission scales the queued work by it",
      MetricType::Gauge);
  f.wait_scale = NewFamily(
      "graphserve_admission_wait_scale",
      "How much longer requests admitted behind queued work waited than that work promised (about "
      "the 95th percentile); deadline-aware admission scales the work queued ahead by it",
      MetricType::Gauge);
  f.cost_estimate =
      NewFamily("graphserve_bucket_cost_estimate_seconds",
                "Each bucket's execution time as the batcher and admission assume it now: the warm-up figure "
                "corrected by the batches that really ran (median of the last five, a bounded step each)",
                MetricType::Gauge);
  f.probes = NewFamily(
      "graphserve_admission_probes_total",
      "Requests admitted on an idle model although the estimate missed their deadline, to measure a "
      "bucket whose cost estimate has not settled yet",
      MetricType::Counter);
  f.batch_rows = NewFamily(
      "graphserve_batch_rows_total",
      "Request rows summed over the batches the scheduler dispatched (rows per batch = this rate / "
      "graphserve_batches_total's rate)",
      MetricType::Counter);
  f.max_batch_tokens = NewFamily(
      "graphserve_bucket_grid_max_batch_tokens",
      "The model's token budget per batch beyond max_batch_size rows (buckets.max_batch_tokens; 0: "
      "none): short requests batch up to this many batch x length tokens",
      MetricType::Gauge);
  f.batches = NewFamily(
      "graphserve_batches_total",
      "Batches executed: graphserve_graph_replays_total plus graphserve_eager_executions_total",
      MetricType::Counter);
  f.replays = NewFamily("graphserve_graph_replays_total",
                        "Batches executed as a CUDA graph replay, by bucket (batch x length; batch x- for a "
                        "fixed-shape model)",
                        MetricType::Counter);
  f.eager = NewFamily(
      "graphserve_eager_executions_total",
      "Batches executed eagerly instead of as a graph replay, by reason (oversize, capture_failed, "
      "verify_failed, disabled, no_cuda, exact_length)",
      MetricType::Counter);
  f.real_elements =
      NewFamily("graphserve_real_elements_total",
                "Request elements (rows x length) executed; padding waste = 1 - this / padded elements",
                MetricType::Counter);
  f.padded_elements = NewFamily(
      "graphserve_padded_elements_total",
      "Elements (bucket batch x bucket length) executed, padding included", MetricType::Counter);
  f.capture_seconds =
      NewFamily("graphserve_graph_capture_seconds",
                "Time spent warming up, capturing and verifying the model's CUDA graphs on the device",
                MetricType::Gauge);
  f.execute_seconds =
      NewFamily("graphserve_bucket_execution_seconds",
                "Each bucket's execution time as measured at warm-up (graph replay or eager; mean over the "
                "device's instances): where the batcher's cost table starts, and what a grid is planned from",
                MetricType::Gauge);
  f.pool_bytes =
      NewFamily("graphserve_graph_pool_bytes",
                "Device memory held by the model's CUDA graph pool on the device", MetricType::Gauge);
  f.memory_allocated = NewFamily(
      "graphserve_gpu_memory_allocated_bytes",
      "GPU memory held by live tensors (graph pools included), per CUDA device", MetricType::Gauge);
  f.memory_reserved =
      NewFamily("graphserve_gpu_memory_reserved_bytes",
                "GPU memory obtained from the driver by libtorch's caching allocator, per CUDA device",
                MetricType::Gauge);
  return f;
}

void AddBuildInfoSample(const ServerMetricsOptions& options, SchedulerFamilies* families) {
  AddSample(&families->build_info,
            {{"version", options.version},
             {"libtorch", options.engine.libtorch_version},
             {"cuda", options.engine.cuda_version.empty() ? "none" : options.engine.cuda_version}},
            1.0);
}

std::map<std::string, DeviceTotals> TotalsByDevice(const std::vector<ExecutorSnapshot>& executors) {
  std::map<std::string, DeviceTotals> by_device;
  for (const ExecutorSnapshot& executor : executors) {
    DeviceTotals& totals = by_device[executor.device];
    totals.batches += executor.executed.batches;
    totals.real_elements += executor.executed.real_elements;
    totals.padded_elements += executor.executed.padded_elements;
    // Buckets that replay as graphs are exported from zero, before their first replay.
    for (const BucketShape& shape : executor.graph_buckets) totals.graph_replays[shape] += 0;
    for (const auto& [shape, count] : executor.executed.graph_replays) {
      totals.graph_replays[shape] += count;
    }
    for (int i = 0; i < kEagerReasonCount; ++i) {
      totals.eager_runs[i] += executor.executed.eager_runs[i];
    }
    totals.capture_time_us += executor.capture.capture_time_us;
    for (const auto& [shape, time_us] : executor.bucket_execute_us) {
      totals.execute_us[shape].first += time_us;
      ++totals.execute_us[shape].second;
    }
    totals.graph_pool_bytes += executor.capture.graph_pool_bytes;
  }
  return by_device;
}

void AddDeviceSamples(const SchedulerSnapshot& snapshot, const std::string& device,
                      const DeviceTotals& totals, SchedulerFamilies* families) {
  const std::string& model = snapshot.model;
  AddSample(&families->batches, {{"model", model}, {"device", device}},
            static_cast<double>(totals.batches));
  for (const auto& [shape, count] : totals.graph_replays) {
    const std::string bucket = BucketLabel(shape, snapshot.has_sequence_length);
    AddSample(&families->replays, {{"model", model}, {"device", device}, {"bucket", bucket}},
              static_cast<double>(count));
  }
  // Every reason is exported, zeros included, so that a dashboard shows each from the start.
  for (int i = 0; i < kEagerReasonCount; ++i) {
    AddSample(&families->eager,
              {{"model", model},
               {"device", device},
               {"reason", EagerReasonName(static_cast<EagerReason>(i))}},
              static_cast<double>(totals.eager_runs[i]));
  }
  AddSample(&families->real_elements, {{"model", model}, {"device", device}},
            static_cast<double>(totals.real_elements));
  AddSample(&families->padded_elements, {{"model", model}, {"device", device}},
            static_cast<double>(totals.padded_elements));
  AddSample(&families->capture_seconds, {{"model", model}, {"device", device}},
            totals.capture_time_us / 1e6);
  for (const auto& [shape, sum] : totals.execute_us) {
    AddSample(&families->execute_seconds,
              {{"model", model}, {"device", device}, {"bucket", BucketLabel(shape, snapshot.has_sequence_length)}},
              sum.first / sum.second / 1e6);
  }
  AddSample(&families->pool_bytes, {{"model", model}, {"device", device}},
            static_cast<double>(totals.graph_pool_bytes));
}

void AddTritonSamples(const SchedulerSnapshot& snapshot, const ModelStatisticsSnapshot& statistics,
                      const std::string& version, SchedulerFamilies* f) {
  const std::vector<ClientMetric::Label> labels = {{"model", snapshot.model}, {"version", version}};
  for (size_t i = 0; i < f->triton.size(); ++i) {
    AddSample(&f->triton[i], labels, kTritonFamilies[i].value(statistics, snapshot));
  }
}

void AddModelSamples(const SchedulerSnapshot& snapshot, SchedulerFamilies* families) {
  const std::string& model = snapshot.model;
  AddSample(&families->queue_depth, {{"model", model}}, static_cast<double>(snapshot.queue_depth));
  AddSample(&families->work_scale, {{"model", model}}, snapshot.work_scale);
  AddSample(&families->wait_scale, {{"model", model}}, snapshot.wait_scale);
  for (const auto& [shape, cost_us] : snapshot.learned_costs) {
    AddSample(&families->cost_estimate,
              {{"model", model}, {"bucket", BucketLabel(shape, snapshot.has_sequence_length)}},
              cost_us / 1e6);
  }
  AddSample(&families->probes, {{"model", model}}, static_cast<double>(snapshot.counters.probes));
  AddSample(&families->batch_rows, {{"model", model}},
            static_cast<double>(snapshot.counters.batch_rows));
  AddSample(&families->max_batch_tokens, {{"model", model}},
            static_cast<double>(snapshot.max_batch_tokens));
  for (const auto& [device, totals] : TotalsByDevice(snapshot.executors)) {
    AddDeviceSamples(snapshot, device, totals, families);
  }
}

// Per device rather than per model: the caching allocator is shared by every model on a device.
void AddDeviceMemorySamples(const std::set<std::string>& cuda_devices,
                            const ServerMetricsOptions& options, SchedulerFamilies* families) {
  if (!options.device_memory) return;
  for (const std::string& device : cuda_devices) {
    const DeviceMemory memory = options.device_memory(device);
    AddSample(&families->memory_allocated, {{"device", device}},
              static_cast<double>(memory.allocated_bytes));
    AddSample(&families->memory_reserved, {{"device", device}},
              static_cast<double>(memory.reserved_bytes));
  }
}

// Families without samples (no CUDA device, no graph buckets) are still listed, with their HELP and
// TYPE lines, so that every name graphserve exports is visible on every machine.
std::vector<MetricFamily> ListFamilies(SchedulerFamilies&& f) {
  std::vector<MetricFamily> families;
  for (MetricFamily* family : {&f.build_info, &f.queue_depth, &f.work_scale, &f.wait_scale, &f.cost_estimate,
                               &f.probes, &f.batch_rows, &f.max_batch_tokens, &f.batches, &f.replays,
                               &f.eager, &f.real_elements, &f.padded_elements, &f.capture_seconds,
                               &f.execute_seconds, &f.pool_bytes, &f.memory_allocated, &f.memory_reserved}) {
    families.push_back(std::move(*family));
  }
  for (MetricFamily& family : f.triton) families.push_back(std::move(family));
  return families;
}

}  // namespace

std::vector<MetricFamily> SchedulerCollector::Collect() const {
  SchedulerFamilies families = EmptySchedulerFamilies();
  AddBuildInfoSample(options_, &families);
  std::set<std::string> cuda_devices;
  MutexLock lock(&mutex_);
  for (const auto& [model, served] : schedulers_) {
    const SchedulerSnapshot snapshot = served.scheduler->Snapshot();
    for (const ExecutorSnapshot& executor : snapshot.executors) {
      if (IsCudaDevice(executor.device)) cuda_devices.insert(executor.device);
    }
    AddModelSamples(snapshot, &families);
    AddTritonSamples(snapshot, served.scheduler->statistics().Snapshot(), served.version, &families);
  }
  AddDeviceMemorySamples(cuda_devices, options_, &families);
  return ListFamilies(std::move(families));
}

// ---------------------------------------------------------------------------------------------------
// RPC edge

namespace {

// The codes ModelInfer can answer a served model with: their series exist from the start, at zero.
constexpr StatusCode kExpectedCodes[] = {
    StatusCode::kOk,          StatusCode::kInvalidArgument,  StatusCode::kResourceExhausted,
    StatusCode::kUnavailable, StatusCode::kDeadlineExceeded, StatusCode::kCancelled,
    StatusCode::kInternal,
};

double Seconds(int64_t micros) { return static_cast<double>(micros) / 1e6; }

}  // namespace

const char* RequestCodeLabel(StatusCode code) {
  return code == StatusCode::kOk ? "success" : StatusCodeName(code);
}

// Upper bounds of the traffic-shape histograms: fine where requests are many and padding costs most
// (short lengths, few rows), coarse beyond; they resolve the default grid's lengths.
const std::vector<double>& RowBuckets() {
  static const std::vector<double> bounds = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512, 1024};
  return bounds;
}
const std::vector<double>& LengthBuckets() {
  static const std::vector<double> bounds = {8,   16,  24,  32,  40,  48,  56,  64,   80,   96,   112, 128, 160,
                                             192, 224, 256, 320, 384, 448, 512, 768, 1024, 2048, 4096};
  return bounds;
}

std::vector<double> LatencyBucketsSeconds() {
  std::vector<double> bounds;
  for (double decade = 1e-4; decade < 10.0; decade *= 10.0) {
    for (double step : {1.0, 2.5, 5.0}) bounds.push_back(step * decade);
  }
  bounds.push_back(10.0);
  return bounds;
}

void ModelRequestMetrics::Started(int64_t rows, int64_t length) {
  in_flight_->Increment();
  request_rows_->Observe(static_cast<double>(rows));
  if (length >= 0) request_length_->Observe(static_cast<double>(length));
}

void ModelRequestMetrics::Finished(const Status& outcome, int64_t latency_us,
                                   const RequestTiming& timing) {
  in_flight_->Decrement();
  if (!outcome.ok()) {
    Count(outcome.code());
    return;
  }
  request_seconds_->Observe(Seconds(latency_us));
  queue_seconds_->Observe(Seconds(timing.queue_us));
  compute_seconds_->Observe(Seconds(timing.compute_us));
}

void ModelRequestMetrics::AnswerWritten(bool delivered, const char* endpoint) {
  if (delivered) {
    Count(StatusCode::kOk);
    return;
  }
  Count(StatusCode::kCancelled);
  dropped_answers_->Add({{"endpoint", endpoint}}).Increment();
}

void ModelRequestMetrics::Refused(StatusCode code) { Count(code); }

void ModelRequestMetrics::ArrivedWithDeadline(int64_t left_us) { deadline_left_seconds_->Observe(Seconds(left_us)); }

void ModelRequestMetrics::Count(StatusCode code) {
  const auto index = static_cast<size_t>(code);
  if (index < by_code_.size() && by_code_[index] != nullptr) {
    by_code_[index]->Increment();
    return;
  }
  // A code not created up front: the family's own lookup is thread-safe and idempotent.
  requests_->Add({{"model", model_}, {"code", RequestCodeLabel(code)}}).Increment();
}

namespace {

// Triton's per-GPU families, with its names, units and gpu_uuid label; a reading a GPU does not
// support leaves its series out.
void AddGpuFamilies(const std::vector<GpuReading>& readings, std::vector<MetricFamily>* families) {
  struct GpuFamily {
    const char* name;
    const char* help;
    MetricType type;
    std::optional<double> GpuReading::*value;
  };
  static constexpr GpuFamily kGpuFamilies[] = {
      {"nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", MetricType::Gauge, &GpuReading::utilization},
      {"nv_gpu_memory_total_bytes", "GPU total memory, in bytes", MetricType::Gauge,
       &GpuReading::memory_total_bytes},
      {"nv_gpu_memory_used_bytes", "GPU used memory, in bytes", MetricType::Gauge,
       &GpuReading::memory_used_bytes},
      {"nv_gpu_power_usage", "GPU power usage in watts", MetricType::Gauge, &GpuReading::power_watts},
      {"nv_gpu_power_limit", "GPU power management limit in watts", MetricType::Gauge,
       &GpuReading::power_limit_watts},
      {"nv_energy_consumption", "GPU energy consumption in joules since graphserve started",
       MetricType::Counter, &GpuReading::energy_joules},
  };
  for (const GpuFamily& gpu_family : kGpuFamilies) {
    MetricFamily family = NewFamily(gpu_family.name, gpu_family.help, gpu_family.type);
    for (const GpuReading& reading : readings) {
      if (const std::optional<double>& value = reading.*gpu_family.value) {
        AddSample(&family, {{"gpu_uuid", reading.uuid}}, *value);
      }
    }
    families->push_back(std::move(family));
  }
}

}  // namespace

ServerMetrics::ServerMetrics(ServerMetricsOptions options)
    : log_limiter_(options.log_limiter),
      gpu_monitor_(options.gpu_monitor),
      trace_writer_(options.trace_writer),
      registry_(std::make_unique<prometheus::Registry>()),
      collector_(std::make_unique<SchedulerCollector>(std::move(options))) {
  requests_ = &prometheus::BuildCounter()
                   .Name("graphserve_requests_total")
                   .Help(
                       "ModelInfer calls by final status: code is \"success\" or the lower-case "
                       "gRPC status code name")
                   .Register(*registry_);
  request_seconds_ = &prometheus::BuildHistogram()
                          .Name("graphserve_request_duration_seconds")
                          .Help("Successful requests: from the call's arrival to its answer")
                          .Register(*registry_);
  queue_seconds_ = &prometheus::BuildHistogram()
                        .Name("graphserve_queue_duration_seconds")
                        .Help("Successful requests: from entering the queue to their batch's start")
                        .Register(*registry_);
  compute_seconds_ = &prometheus::BuildHistogram()
                          .Name("graphserve_compute_duration_seconds")
                          .Help(
                              "Successful requests: their batch's execution, padding and copies "
                              "included")
                          .Register(*registry_);
  in_flight_ = &prometheus::BuildGauge()
                    .Name("graphserve_requests_in_flight")
                    .Help("Requests the model's scheduler holds: queued or executing")
                    .Register(*registry_);
  request_rows_ = &prometheus::BuildHistogram()
                       .Name("graphserve_request_rows")
                       .Help("Rows (batch dimension) of each request that reached the model's scheduler")
                       .Register(*registry_);
  request_length_ = &prometheus::BuildHistogram()
                         .Name("graphserve_request_length")
                         .Help(
                             "Sequence length of each request that reached the model's scheduler "
                             "(models with a variable dimension only): the traffic a grid is planned for")
                         .Register(*registry_);
  deadline_left_seconds_ = &prometheus::BuildHistogram()
                               .Name("graphserve_request_deadline_left_seconds")
                               .Help(
                                   "Requests with a deadline: how much of it was left when the call reached "
                                   "the model (what the client, the network and gRPC's transport took is gone)")
                               .Register(*registry_);
  refused_connections_ = &prometheus::BuildCounter()
                              .Name("graphserve_connections_refused_total")
                              .Help(
                                  "Connections closed on arrival, by endpoint and reason: gRPC's and "
                                  "/metrics' for want of file descriptors (descriptor_reserve: the rest is "
                                  "kept for the server; descriptors_exhausted: the limit was reached), "
                                  "/metrics' past its caps with no connection to make room "
                                  "(connection_cap, address_cap), gRPC's past its cap per client address "
                                  "(address_cap), REST's past its connection cap (connection_cap)")
                              .Register(*registry_);
  // At zero from the start, so that an alert on its rate sees the series before the first refusal.
  for (const char* reason : {"descriptor_reserve", "descriptors_exhausted", "address_cap"}) {
    refused_connections_->Add({{"endpoint", "grpc"}, {"reason", reason}});
  }
  dropped_answers_ = &prometheus::BuildCounter()
                          .Name("graphserve_answers_dropped_total")
                          .Help(
                              "Successful inference answers never delivered, counted as cancelled in "
                              "graphserve_requests_total: the client did not read them within "
                              "--grpc-answer-write-timeout-s (grpc: the call was cancelled) or "
                              "--http-send-timeout-s (http: the connection was closed), or went away first")
                          .Register(*registry_);
  for (const char* endpoint : {"grpc", "http"}) dropped_answers_->Add({{"endpoint", endpoint}});
  refused_connections_->Add({{"endpoint", "http"}, {"reason", "connection_cap"}});
  http_closures_ = &prometheus::BuildCounter()
                        .Name("graphserve_http_connections_closed_total")
                        .Help(
                            "REST connections the server closed because a client held a bound too long: "
                            "header_timeout, body_timeout, keep_alive_timeout, or send_timeout (an answer "
                            "the client did not read, dropped unsent)")
                        .Register(*registry_);
  for (const char* reason : {"header_timeout", "body_timeout", "keep_alive_timeout", "send_timeout"}) {
    http_closures_->Add({{"reason", reason}});
  }
  http_buffered_bytes_ = &prometheus::BuildGauge()
                              .Name("graphserve_http_buffered_bytes")
                              .Help(
                                  "Bytes of REST request bodies being received or waiting for their answer, "
                                  "plus answers not yet sent (bounded by --http-max-buffered-bytes)")
                              .Register(*registry_)
                              .Add({});
  for (const char* reason :
       {"descriptor_reserve", "descriptors_exhausted", "connection_cap", "address_cap"}) {
    refused_connections_->Add({{"endpoint", "metrics"}, {"reason", reason}});
  }
  closed_connections_ = &prometheus::BuildCounter()
                             .Name("graphserve_connections_closed_total")
                             .Help(
                                 "/metrics connections the server closed: client_timeout (a request or an "
                                 "answer outlasted --metrics-client-timeout-s) or evicted (waiting for a "
                                 "request while the port was full, replaced by a new connection)")
                             .Register(*registry_);
  for (const char* reason : {"client_timeout", "evicted"}) {
    closed_connections_->Add({{"endpoint", "metrics"}, {"reason", reason}});
  }
  auth_refusals_ = &prometheus::BuildCounter()
                        .Name("graphserve_auth_failures_total")
                        .Help("Requests refused for a missing or wrong token, by endpoint (grpc, http, metrics)")
                        .Register(*registry_);
  // At zero from the start, so that an alert on their rate has a series to read.
  for (const char* endpoint : {"grpc", "http", "metrics"}) auth_refusals_->Add({{"endpoint", endpoint}});
  device_faulted_ = &prometheus::BuildGauge()
                         .Name("graphserve_device_faulted")
                         .Help("1 once a CUDA fault (a device-side assert, an illegal address) has left the "
                               "process unable to run any batch: liveness and readiness are off, restart it")
                         .Register(*registry_)
                         .Add({});
}

void ServerMetrics::CountRefusedConnection(const char* endpoint, const std::string& reason) {
  refused_connections_->Add({{"endpoint", endpoint}, {"reason", reason}}).Increment();
}

void ServerMetrics::CountClosedConnection(const char* endpoint, const char* reason) {
  closed_connections_->Add({{"endpoint", endpoint}, {"reason", reason}}).Increment();
}

void ServerMetrics::AddHttpBufferedBytes(int64_t delta) {
  if (delta >= 0) {
    http_buffered_bytes_->Increment(static_cast<double>(delta));
  } else {
    http_buffered_bytes_->Decrement(static_cast<double>(-delta));
  }
}

void ServerMetrics::CountHttpClosure(const char* reason) {
  if (std::string_view(reason) == "connection_cap") {
    refused_connections_->Add({{"endpoint", "http"}, {"reason", reason}}).Increment();
    return;
  }
  http_closures_->Add({{"reason", reason}}).Increment();
}

void ServerMetrics::SetDeviceFaulted() { device_faulted_->Set(1); }

ServerMetrics::~ServerMetrics() = default;

void ServerMetrics::AddModel(const ModelScheduler* scheduler, const std::string& version) {
  const std::string& model = scheduler->spec().name;
  collector_->Set(scheduler, version);
  {
    // A reloaded model keeps its request series: they count requests, whichever version answered.
    MutexLock lock(&mutex_);
    if (models_.count(model) > 0) return;
  }
  std::unique_ptr<ModelRequestMetrics> metrics(new ModelRequestMetrics());
  metrics->model_ = model;
  metrics->requests_ = requests_;
  metrics->dropped_answers_ = dropped_answers_;
  for (StatusCode code : kExpectedCodes) {
    metrics->by_code_[static_cast<size_t>(code)] =
        &requests_->Add({{"model", model}, {"code", RequestCodeLabel(code)}});
  }
  const std::vector<double> buckets = LatencyBucketsSeconds();
  metrics->request_seconds_ = &request_seconds_->Add({{"model", model}}, buckets);
  metrics->queue_seconds_ = &queue_seconds_->Add({{"model", model}}, buckets);
  metrics->compute_seconds_ = &compute_seconds_->Add({{"model", model}}, buckets);
  metrics->in_flight_ = &in_flight_->Add({{"model", model}});
  metrics->request_rows_ = &request_rows_->Add({{"model", model}}, RowBuckets());
  metrics->request_length_ = &request_length_->Add({{"model", model}}, LengthBuckets());
  metrics->deadline_left_seconds_ = &deadline_left_seconds_->Add({{"model", model}}, buckets);
  {
    MutexLock lock(&mutex_);
    models_.emplace(model, std::move(metrics));
  }
}

void ServerMetrics::RemoveModel(const ModelScheduler* scheduler) { collector_->Remove(scheduler); }

ModelRequestMetrics* ServerMetrics::ForModel(const std::string& model) {
  MutexLock lock(&mutex_);
  auto it = models_.find(model);
  return it == models_.end() ? nullptr : it->second.get();
}

void ServerMetrics::CountUnroutedRequest(StatusCode code) {
  requests_->Add({{"model", ""}, {"code", RequestCodeLabel(code)}}).Increment();
}

void ServerMetrics::CountAuthFailure(const char* endpoint) {
  auth_refusals_->Add({{"endpoint", endpoint}}).Increment();
}

std::string ServerMetrics::TextExposition() const {
  std::vector<MetricFamily> families = registry_->Collect();
  std::vector<MetricFamily> collected = collector_->Collect();
  families.insert(families.end(), std::make_move_iterator(collected.begin()),
                  std::make_move_iterator(collected.end()));
  // Counted where they happen, read here: every label value from 0, so that an alert has a series.
  if (log_limiter_ != nullptr) {
    std::vector<std::pair<std::string, double>> suppressed;
    for (LogKind kind : kLogKinds) {
      suppressed.emplace_back(LogKindLabel(kind), static_cast<double>(log_limiter_->SuppressedTotal(kind)));
    }
    families.push_back(
        CounterByLabel(NewFamily("graphserve_log_lines_suppressed_total",
                                 "Log lines that clients caused and the rate limit dropped, by "
                                 "kind (auth_failure, refused_connection, batch_failure, "
                                 "libmicrohttpd, grpc, protobuf)",
                                 MetricType::Counter),
                       "kind", suppressed));
  }
  if (trace_writer_ != nullptr) {
    std::vector<std::pair<std::string, double>> dropped;
    for (TraceDrop reason : {TraceDrop::kQueueFull, TraceDrop::kWriteFailed, TraceDrop::kFileFull}) {
      dropped.emplace_back(TraceDropLabel(reason), static_cast<double>(trace_writer_->Dropped(reason)));
    }
    families.push_back(CounterByLabel(NewFamily("graphserve_trace_dropped_total",
                                                "Sampled request traces not written: the writer's queue was "
                                                "full (queue_full), the trace file could not be written "
                                                "(write_failed) or held --trace-max-traces-per-file already "
                                                "(file_full)",
                                                MetricType::Counter),
                                      "reason", dropped));
  }
  if (gpu_monitor_ != nullptr) AddGpuFamilies(gpu_monitor_->Read(), &families);
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace graphserve
