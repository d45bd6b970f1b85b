#pragma once
// graphserve's Prometheus metrics (docs/metrics.md lists them with their meaning).
//
// Two sources, no double bookkeeping:
//   - What the engine and the scheduler already count (graph replays, eager executions by reason,
//     batches, padded and real elements, queue depth, capture cost, device memory) stays counted
//     there and is read at scrape time: a collector turns those counters into metric families on
//     every scrape, with no polling thread and no copy kept here.
//   - What only the RPC edge knows (requests by final status, latency, queue and compute time
//     histograms, requests in flight) lives in prometheus-cpp counters, histograms and gauges that
//     InferenceService updates through ModelRequestMetrics.
//
// MetricsEndpoint (metrics_endpoint.h) serves both on HTTP /metrics, apart from the gRPC port.
// prometheus-cpp stays private to graphserve_server: it appears here only as forward declarations.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/engine/status.h"
#include "graphserve/server/batching/scheduler.h"
#include "graphserve/server/common/thread_annotations.h"
#include "graphserve/server/observability/log_limiter.h"
#include "graphserve/server/observability/trace_writer.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace graphserve {

class SchedulerCollector;
class GpuMonitor;

// The `code` label of graphserve_requests_total: "success" for OK, otherwise the lower-case gRPC code
// name ("invalid_argument", "resource_exhausted", "deadline_exceeded", ...).
const char* RequestCodeLabel(StatusCode code);

// Upper bounds in seconds of the latency histograms: 1, 2.5 and 5 per decade from 100 µs to 10 s.
std::vector<double> LatencyBucketsSeconds();

// One served model's series at the RPC edge. Created and owned by ServerMetrics, which keeps every
// series of the model alive, so the request path does no label lookup.
// Thread-safe: any method may be called from any thread.
class ModelRequestMetrics {
 public:
  // A request enters the model's scheduler: in flight until Finished. Call before Enqueue, so that an
  // answer arriving before Enqueue returns cannot take the gauge below zero. Its rows and its
  // sequence length (-1: a fixed-shape model, none) go into the traffic-shape histograms that a
  // grid is planned from.
  void Started(int64_t rows, int64_t length);
  // The end of a Started request: leaves the in-flight gauge. A failure is counted under its code
  // now; a success is observed in the latency histograms now and counted once its front end knows
  // whether the answer reached the client (AnswerWritten), so that an answer nobody read is not a
  // success. `latency_us` runs from the RPC's arrival to its answer; `timing` is the
  // scheduler's (ignored unless the outcome is OK).
  void Finished(const Status& outcome, int64_t latency_us, const RequestTiming& timing);
  // Where a successful request's answer went, once its front end's write is over: `delivered`, it
  // counts as a success; else (its client stopped reading or went away first) as cancelled, and in
  // graphserve_answers_dropped_total{endpoint} (`endpoint` "grpc" or "http").
  void AnswerWritten(bool delivered, const char* endpoint);
  // A request refused before it reached the scheduler (e.g. INVALID_ARGUMENT): counted only.
  void Refused(StatusCode code);
  // A call with a deadline reached the model: how much of it was left. Under overload this tells
  // time lost before graphserve (in the client, the network or gRPC's transport) from time lost in
  // graphserve's queue.
  void ArrivedWithDeadline(int64_t left_us);

 private:
  friend class ServerMetrics;
  ModelRequestMetrics() = default;
  void Count(StatusCode code);

  std::string model_;
  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  prometheus::Family<prometheus::Counter>* dropped_answers_ = nullptr;
  // Series created up front, indexed by StatusCode value (gRPC's codes are 0..16); null for codes
  // ModelInfer does not answer a served model with, which are created through requests_ on first use.
  std::array<prometheus::Counter*, 17> by_code_{};
  prometheus::Histogram* request_seconds_ = nullptr;
  prometheus::Histogram* queue_seconds_ = nullptr;
  prometheus::Histogram* compute_seconds_ = nullptr;
  prometheus::Gauge* in_flight_ = nullptr;
  prometheus::Histogram* request_rows_ = nullptr;
  prometheus::Histogram* request_length_ = nullptr;
  prometheus::Histogram* deadline_left_seconds_ = nullptr;
};

struct ServerMetricsOptions {
  // graphserve's version, and the engine's libtorch/CUDA build: the labels of graphserve_build_info.
  std::string version;
  EngineInfo engine;
  // Memory of a CUDA device ("cuda:N"), read at scrape time for every CUDA device an executor runs on
  // (the server passes the engine's GetDeviceMemory); empty: no GPU memory series.
  std::function<DeviceMemory(const std::string& device)> device_memory;
  // Its suppressed lines per kind are read at scrape time (graphserve_log_lines_suppressed_total);
  // null: no such family. Must outlive the ServerMetrics.
  const LogLimiter* log_limiter = nullptr;
  // Read at scrape time for Triton's per-GPU families (nv_gpu_*, nv_energy_consumption); null: no
  // such families (no NVML, or --allow-gpu-metrics=false). Must outlive the ServerMetrics.
  const GpuMonitor* gpu_monitor = nullptr;
  // Its dropped traces are read at scrape time (graphserve_trace_dropped_total); null: no such
  // family. Must outlive the ServerMetrics' scrapes.
  const TraceWriter* trace_writer = nullptr;
};

// Every graphserve metric: the RPC edge's registry and the collector over the schedulers and their
// executors.
// Thread safety: any method may be called from any thread, and scrapes may run concurrently with all
// of them. Lifetime: each scheduler passed to AddModel must stay alive until RemoveModel returns for
// it or, when it is never removed, until scrapes have stopped (the MetricsEndpoint is gone); the ModelRequestMetrics handed out live as long
// as this object, also after their model is unloaded.
class ServerMetrics {
 public:
  explicit ServerMetrics(ServerMetricsOptions options);
  ~ServerMetrics();

  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // Starts exporting `scheduler`'s model (its spec's name) as `version` and, the first time that
  // model is added, creates its request series at zero, so that rates and ratios are defined before
  // the first request. Adding a model again (a reload) exports the new scheduler in place of the old
  // one; the request series carry on, and Triton's nv_* series (read from the version's statistics,
  // as Triton's are) start again from zero under the new version's label.
  void AddModel(const ModelScheduler* scheduler, const std::string& version) EXCLUDES(mutex_);
  // Stops exporting `scheduler` (an unloaded model); returns once no scrape reads it, so it may be
  // destroyed. No effect when a later AddModel replaced it.
  void RemoveModel(const ModelScheduler* scheduler);

  // The model's RPC-edge series; nullptr when no model of that name was added.
  ModelRequestMetrics* ForModel(const std::string& model) EXCLUDES(mutex_);

  // A ModelInfer call that reached no served model: an unknown name (not_found) or a call before the
  // models were ready (unavailable). Counted with model="" so that clients cannot create series.
  void CountUnroutedRequest(StatusCode code);
  // A request refused for a missing or wrong token, on `endpoint` ("grpc", "http" or "metrics").
  void CountAuthFailure(const char* endpoint);

  // A connection closed on arrival, on `endpoint` ("grpc": GrpcAcceptor's refusal reasons; "metrics":
  // MetricsEndpoint's).
  void CountRefusedConnection(const char* endpoint, const std::string& reason);
  // A /metrics connection the server closed after accepting it: `reason` "client_timeout" (a request
  // or an answer outlasted --metrics-client-timeout-s) or "evicted" (it waited for a request while
  // the port was full, and a new connection took its place).
  void CountClosedConnection(const char* endpoint, const char* reason);
  // REST's bytes of request bodies and unsent answers held changed by `delta`.
  void AddHttpBufferedBytes(int64_t delta);
  // A REST connection the server closed to hold a bound (HttpClosureName): "connection_cap" counts
  // as refused on arrival, the timeouts as closed (an inference answer dropped at "send_timeout" is
  // counted by the REST endpoint, which knows it was one).
  void CountHttpClosure(const char* reason);
  // The engine reported a CUDA fault that no later batch survives (DeviceFault): 1 from then on.
  void SetDeviceFaulted();

  // Prometheus text exposition (format 0.0.4) of every family: what /metrics serves.
  std::string TextExposition() const;

 private:
  // The first three are read from the options before they move on.
  const LogLimiter* const log_limiter_;
  const GpuMonitor* const gpu_monitor_;
  const TraceWriter* const trace_writer_;
  std::unique_ptr<prometheus::Registry> registry_;
  std::unique_ptr<SchedulerCollector> collector_;
  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  prometheus::Family<prometheus::Histogram>* request_seconds_ = nullptr;
  prometheus::Family<prometheus::Histogram>* queue_seconds_ = nullptr;
  prometheus::Family<prometheus::Histogram>* compute_seconds_ = nullptr;
  prometheus::Family<prometheus::Gauge>* in_flight_ = nullptr;
  prometheus::Family<prometheus::Histogram>* request_rows_ = nullptr;
  prometheus::Family<prometheus::Histogram>* request_length_ = nullptr;
  prometheus::Family<prometheus::Histogram>* deadline_left_seconds_ = nullptr;
  prometheus::Family<prometheus::Counter>* refused_connections_ = nullptr;
  prometheus::Family<prometheus::Counter>* dropped_answers_ = nullptr;
  prometheus::Family<prometheus::Counter>* closed_connections_ = nullptr;
  prometheus::Family<prometheus::Counter>* auth_refusals_ = nullptr;
  prometheus::Family<prometheus::Counter>* http_closures_ = nullptr;
  prometheus::Gauge* http_buffered_bytes_ = nullptr;
  prometheus::Gauge* device_faulted_ = nullptr;

  Mutex mutex_;
  // Values are never removed, so handed-out pointers stay valid.
  std::map<std::string, std::unique_ptr<ModelRequestMetrics>> models_ GUARDED_BY(mutex_);
};

}  // namespace graphserve
