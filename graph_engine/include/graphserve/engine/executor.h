#pragma once
// The execution seam between the server and libtorch. An Executor runs one model instance on one
// device: it takes a batch of requests, pads them into one tensor per input of a bucket's shape,
// runs one forward (an eager call, or on CUDA a graph replay), and gives every request back its own
// rows and its own length of each output it asked for.
//
// Ownership: the caller owns the Batch and everything it points to for the duration of Execute.
// Thread safety: Warmup, Execute, Launch and Complete must be called from one thread at a time (each
// instance has a worker thread of its own); Buckets, Counters and device are safe from any thread.
// Errors: every libtorch exception is caught inside the engine and returned as a Status that names
// the model and the bucket; nothing throws across this interface.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "graphserve/engine/tensor.h"
#include "graphserve/engine/warmup_progress.h"

namespace graphserve {

// One request as the engine sees it: already validated against the ModelSpec by the server.
struct InferenceItem {
  // One tensor per ModelSpec input, in spec order, shaped [rows, dims...] with the variable
  // dimension equal to `length`.
  std::vector<HostTensor> inputs;
  int64_t rows = 0;
  int64_t length = 0;
  // One flag per ModelSpec output: false skips copying that output back.
  std::vector<bool> outputs_wanted;
};

// How long one batch's stages took, in nanoseconds, split as Triton's statistics split a model
// execution (compute_input, compute_infer, compute_output). On a GPU the device's part of each stage
// is timed with CUDA events, so that asynchronous work is charged to the stage that queued it.
struct BatchStageTimes {
  int64_t input_ns = 0;   // padding the requests into the batch's inputs, and copying them in
  int64_t infer_ns = 0;   // the forward: a graph replay or an eager call
  int64_t output_ns = 0;  // copying each request's own slices of the outputs back
};

struct Batch {
  std::vector<const InferenceItem*> items;
  // What the batch is padded to: a bucket of the grid, or the batch's own total rows × longest
  // length (an oversize batch, or a lone request of a model that neither batches nor replays
  // graphs). Must hold every item: sum(rows) <= batch, max(length) <= length.
  BucketShape padded_shape;
  // Where the executor writes how long the batch's stages took, once they are done (by Execute, or
  // by Complete for a launched batch); null: nobody asks. Owned by the caller, like the items.
  BatchStageTimes* stage_times = nullptr;
};

// Per item, per ModelSpec output: the item's own slice [rows, dims...] (variable dim = its length),
// or an empty tensor where the item did not want that output.
using BatchOutputs = std::vector<std::vector<HostTensor>>;

// Why a batch ran eagerly instead of as a graph replay.
enum class EagerReason {
  kOversize = 0,       // larger than the largest bucket
  kCaptureFailed = 1,  // its bucket's capture threw
  kVerifyFailed = 2,   // its bucket's replay disagreed with eager
  kDisabled = 3,       // the model's config turns CUDA graphs off
  kNoCuda = 4,         // the executor runs on a CPU
  // A model that does not mask padding (no sequence_mask_input), at a length that is no bucket
  // length: padding it to one could change the answers, so it runs at its exact shape.
  kExactLength = 5,
};
inline constexpr int kEagerReasonCount = 6;
// "oversize", "capture_failed", "verify_failed", "disabled", "no_cuda", "exact_length": the metric
// label values.
const char* EagerReasonName(EagerReason reason);

// Monotonic counts since the executor was created.
struct ExecutionCounters {
  std::map<BucketShape, uint64_t> graph_replays;  // by bucket
  std::array<uint64_t, kEagerReasonCount> eager_runs{};  // by EagerReason
  uint64_t batches = 0;          // graph replays + eager runs
  uint64_t real_elements = 0;    // sum over requests of rows × length
  uint64_t padded_elements = 0;  // sum over batches of padded batch × padded length
};

struct BucketInfo {
  BucketShape shape;
  // True when this bucket runs as a captured graph; false when it runs eagerly (and why).
  bool graph = false;
  EagerReason eager_reason = EagerReason::kNoCuda;
  // Wall time of one execution learnt during Warmup, in microseconds (0 before Warmup).
  double execute_time_us = 0.0;
  // True when execute_time_us was measured on this bucket; false when it was scaled from a smaller
  // bucket of the same length (CPU executors skip running their largest buckets at start-up).
  bool time_measured = false;
};

// What capturing the bucket grid cost, for the logs and the metrics. All zero on executors that
// capture nothing (CPU, or CUDA graphs disabled).
struct CaptureSummary {
  int graphs_captured = 0;   // buckets that replay as graphs
  int graphs_disabled = 0;   // buckets whose capture or verification failed (they run eagerly)
  double capture_time_us = 0.0;     // warm-up, capture and verification of the whole grid
  uint64_t graph_pool_bytes = 0;    // device memory held by the graphs' shared pool
  uint64_t static_buffer_bytes = 0; // static device inputs and pinned host staging buffers
};

// A batch that Executor::Launch started and Executor::Complete has not yet collected; each executor
// keeps what it needs to finish the batch in a subclass of its own.
class LaunchedBatch {
 public:
  virtual ~LaunchedBatch() = default;
};

class Executor {
 public:
  virtual ~Executor() = default;

  // Pays the model's one-time costs so that the first request does not, learns each bucket's
  // execution time, and (on CUDA) captures and verifies every bucket's graph. A CUDA executor runs
  // every bucket; a CPU one runs a sample of them and estimates the others (BucketInfo::
  // time_measured). Call once, before the first Execute; returns an error when the model cannot run
  // at all (e.g. wrong outputs). Reports its progress to set_warmup_progress's callback.
  virtual Status Warmup() = 0;
  // Where Warmup reports how far it has got; none by default. Call before Warmup.
  void set_warmup_progress(WarmupProgressCallback callback) { warmup_progress_ = std::move(callback); }

  // Runs `batch` and fills `outputs` (resized to the batch's items). Blocks until the results are in
  // host memory. A failure fails the whole batch.
  virtual Status Execute(const Batch& batch, BatchOutputs* outputs) = 0;

  // Execute in two halves, so that the caller can assemble the next batch while the device still
  // runs this one. Launch returns once the batch's work is queued on the device; Complete waits for
  // it and fills `outputs` as Execute does. At most pipeline_depth() batches may be launched and not
  // completed, and they complete in launch order, each exactly once. `batch` and its items must stay
  // alive until its Complete returns. A failed Launch leaves nothing to complete. The defaults, for
  // executors that cannot overlap (depth 1), run the whole of Execute inside Launch.
  virtual Status Launch(const Batch& batch, std::unique_ptr<LaunchedBatch>* launched);
  virtual Status Complete(std::unique_ptr<LaunchedBatch> launched, BatchOutputs* outputs);
  virtual int pipeline_depth() const { return 1; }

  // The bucket grid with what Warmup learnt about each bucket.
  virtual std::vector<BucketInfo> Buckets() const = 0;
  virtual ExecutionCounters Counters() const = 0;
  virtual CaptureSummary capture_summary() const { return CaptureSummary{}; }
  // "cpu" or "cuda:N".
  virtual std::string device() const = 0;

 protected:
  // Calls set_warmup_progress's callback, if any.
  void ReportWarmupProgress(WarmupStage stage, int done, int total) const;

 private:
  WarmupProgressCallback warmup_progress_;
};

struct ExecutorOptions {
  // "cpu", "cuda" (device 0) or "cuda:N".
  std::string device = "cpu";
  // Folder holding model.pt2 (AOTInductor) or model.pt (TorchScript); unused by the built-in encoder.
  std::string model_dir;
  // The model file's name in model_dir; empty: the platform's (kAotInductorFileName,
  // kTorchScriptFileName).
  std::string model_filename;
  // Given to the executor's set_warmup_progress.
  WarmupProgressCallback warmup_progress;
};

// Loads the model that `spec` describes onto `options.device`. Fails with INVALID_ARGUMENT for a
// spec the platform cannot serve, NOT_FOUND for a missing model file, UNAVAILABLE for a CUDA device
// that is not there.
Status CreateExecutor(const ModelSpec& spec, const ExecutorOptions& options,
                      std::unique_ptr<Executor>* executor);

// Facts about the engine's libtorch build, for the startup log and build-info metric.
struct EngineInfo {
  std::string libtorch_version;
  std::string cuda_version;  // "" when libtorch was built without CUDA
  int cuda_device_count = 0;
};
EngineInfo GetEngineInfo();

// Memory of one device as libtorch's caching allocator sees it; zeros for "cpu". Thread-safe.
struct DeviceMemory {
  uint64_t allocated_bytes = 0;  // held by live tensors (graph pools included)
  uint64_t reserved_bytes = 0;   // obtained from the driver by the allocator
};
DeviceMemory GetDeviceMemory(const std::string& device);

// A CUDA fault that leaves the process's CUDA context unusable: a device-side assert (e.g. a token id
// beyond an embedding table on a model whose config sets no max_value), an illegal address. Every
// later launch fails with it, whatever its inputs, so the process has to be restarted; the server
// turns liveness and readiness off. Empty while none has happened. Thread-safe.
std::string DeviceFault();

// The engine cannot include spdlog (see docs/development/gpu-host.md, pitfall 2), so it reports
// through a sink that the server installs once at start-up. Thread-safe: the sink may be called
// from any thread.
enum class LogLevel { kDebug, kInfo, kWarning, kError };
using LogSink = std::function<void(LogLevel, const std::string&)>;
void SetEngineLogSink(LogSink sink);

}  // namespace graphserve
