#pragma once
// Writes sampled requests' traces as Triton's trace JSON, off the request path: Submit queues a trace
// in a bounded queue and returns at once, and one thread drains the queue into the files. A full
// queue drops the trace and counts it (graphserve_trace_dropped_total), so that a slow disk never
// holds up a request.
//
// The files: each is one JSON array, kept valid after every drain (the closing bracket is rewritten
// at each append), so that it can be read while the server runs. With log_frequency 0 every trace
// goes to FILE; with N > 0, traces 1..N go to FILE.0, N+1..2N to FILE.1, and so on (Triton's
// rolling). A file is truncated the first time this process writes it.
//
// Thread safety: Submit and the counters from any thread; Start and Stop from one controlling thread.
// Errors: a file that cannot be opened or written is logged (once per file) and its traces counted as
// dropped.
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "graphserve/server/batching/pending_request.h"
#include "graphserve/server/common/thread_annotations.h"
#include "graphserve/server/observability/trace_settings.h"

namespace graphserve {

// One request's trace: what Triton writes for it at level TIMESTAMPS.
struct RequestTrace {
  TraceTicket ticket;
  std::string model_name;
  int64_t model_version = 0;
  std::string request_id;
  // Triton's stage names (REQUEST_START, QUEUE_START, ...) with their times in ns on a monotonic
  // clock, in the order the request went through them.
  std::vector<std::pair<const char*, int64_t>> timestamps;
};

// A request's stages under Triton's names, in ns (the scheduler's µs clock × 1000), non-decreasing:
//   REQUEST_START         the RPC layer took the request (`arrival_us`), before decoding it
//   QUEUE_START           it entered its model's scheduler queue (received → queued)
//   COMPUTE_START         its batch was formed and launched on an executor (batched)
//   COMPUTE_INPUT_END     its batch's inputs were padded and copied in: the replay (or eager
//                         forward) starts
//   COMPUTE_OUTPUT_START  the replay ended: the outputs' copy back starts
//   COMPUTE_END           its batch completed
//   REQUEST_END           its answer was encoded, to be sent (`answered_us`)
// A stage the request did not reach (refused, expired or cancelled in the queue) is left out, and so
// are the two replay stages when the executor did not time them.
std::vector<std::pair<const char*, int64_t>> TraceTimestamps(int64_t arrival_us, const RequestTiming& timing,
                                                             int64_t answered_us);

// The trace's two objects, as Triton writes them: {"id", "model_name", "model_version", "request_id",
// "parent_id"} and {"id", "timestamps": [{"name", "ns"}, ...]}, joined by a comma.
std::string TraceJson(const RequestTrace& trace);

// Why a trace was not written, for the metric's label.
enum class TraceDrop { kQueueFull = 0, kWriteFailed = 1, kFileFull = 2 };
inline constexpr size_t kTraceDropReasons = 3;
const char* TraceDropLabel(TraceDrop reason);  // "queue_full", "write_failed", "file_full"

class TraceWriter {
 public:
  // Holds at most `capacity` traces not yet written (at least 1), and writes at most
  // `max_traces_per_file` traces to each trace_file (its rolled files together) in this process, so
  // that a client that turns tracing on cannot fill the disk.
  TraceWriter(size_t capacity, int64_t max_traces_per_file);
  ~TraceWriter();  // Stop()s

  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Starts the thread that writes. Traces submitted before wait for it.
  void Start() EXCLUDES(mutex_);
  // Writes every trace queued, closes the files and joins the thread; Submit drops from then on.
  void Stop() EXCLUDES(mutex_);

  // Queues `trace` for writing; never blocks on I/O. False (and counted) when the queue is full or
  // the writer has stopped.
  bool Submit(RequestTrace trace) EXCLUDES(mutex_);

  uint64_t Dropped(TraceDrop reason) const { return dropped_[static_cast<size_t>(reason)].load(); }
  uint64_t Written() const { return written_.load(); }

 private:
  struct OpenFile;
  void Drain() EXCLUDES(mutex_);
  // Appends `trace` to its file, rolling to the next one every log_frequency traces.
  void Write(const RequestTrace& trace);

  const size_t capacity_;
  const int64_t max_traces_per_file_;
  Mutex mutex_;
  std::condition_variable wake_;
  std::deque<RequestTrace> queue_ GUARDED_BY(mutex_);
  bool stopping_ GUARDED_BY(mutex_) = false;
  bool started_ = false;
  std::thread thread_;
  // The files written so far, by the trace_file they belong to; touched by the writing thread only
  // (and by Stop once it has joined).
  std::map<std::string, std::unique_ptr<OpenFile>> files_;
  std::array<std::atomic<uint64_t>, kTraceDropReasons> dropped_{};
  std::atomic<uint64_t> written_{0};
};

// What the RPC layer traces requests with; both null: no tracing. Not owned.
struct RequestTracing {
  TraceSettings* settings = nullptr;
  TraceWriter* writer = nullptr;
};

}  // namespace graphserve
