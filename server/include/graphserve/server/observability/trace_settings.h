#pragma once
// Triton's trace settings (TraceSetting RPC, /v2[/models/M]/trace/setting, --trace-config): which
// requests are traced and where their traces go. Global settings, and per-model ones that override
// them key by key: a model's key never set, or reset, follows the global value. A model with settings
// of its own samples and counts its requests apart from the global ones (as Triton's per-model
// settings, which start as a copy of the global ones).
//
// Served: trace_level OFF or TIMESTAMPS, trace_rate, trace_count, log_frequency, trace_mode triton.
// Refused: trace_level TENSORS (UNIMPLEMENTED: graphserve records no tensors in traces), trace_mode
// opentelemetry (UNIMPLEMENTED: no maintained OpenTelemetry C++ SDK is packaged for the build), and
// trace_file from a client unless the operator allowed it (FAILED_PRECONDITION): the path is one the
// server process writes to, which would make the API a file-write primitive for any client.
//
// Thread safety: every method may be called from any thread. Sample is on the request path: it takes
// a short lock only while some setting traces, and does no I/O. Errors: as Status, naming the setting.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "graphserve/engine/status.h"
#include "graphserve/server/common/thread_annotations.h"

// Declared only: this header is the command line's and ServerOptions' too.
namespace inference {
class TraceSettingRequest;
class TraceSettingResponse;
}  // namespace inference

namespace graphserve {

// One set of Triton's trace settings, with Triton's defaults.
struct TraceConfig {
  bool timestamps = false;    // trace_level TIMESTAMPS (else OFF)
  int64_t rate = 1000;        // every rate-th request is traced
  int64_t count = -1;         // traces left to take; -1: no limit, 0: tracing has stopped
  int64_t log_frequency = 0;  // traces per file (FILE.0, FILE.1, ...); 0: all in FILE
  std::string file;           // empty: none set (tracing cannot be turned on)
};

// The operator's tracing setup (ServerOptions::trace).
struct TraceOptions {
  TraceConfig global;  // --trace-config
  // --trace-file-from-clients: trace_file may be set over the API.
  bool clients_may_set_file = false;
  // Traces waiting to be written (TraceWriter); more are dropped and counted.
  size_t queue_capacity = 4096;
  // Traces written to one trace_file (its rolled files together) in this process; more are dropped
  // and counted. Traces are about 600 bytes: the default is some 60 MB.
  int64_t max_traces_per_file = 100000;
};

// Where a sampled request's trace goes.
struct TraceTicket {
  uint64_t id = 0;  // unique in the process, from 1
  std::string file;
  int64_t log_frequency = 0;
};

// Parses one --trace-config value, Triton's "[triton,]KEY=VALUE" (level, rate, count, and for the
// triton mode file and log-frequency), into `config`. "opentelemetry,..." and level=TENSORS are
// refused as the API refuses them. INVALID_ARGUMENT naming the flag and its value otherwise.
Status ApplyTraceConfigFlag(const std::string& text, TraceConfig* config);

class TraceSettings {
 public:
  // `global`: the operator's settings (--trace-config). `clients_may_set_file`: whether trace_file
  // may be changed over the API.
  TraceSettings(TraceConfig global, bool clients_may_set_file);

  // Applies `request`'s settings (none: a read; an empty value list resets a setting: to Triton's
  // default globally, to the global value for a model) to the global settings, or to the model
  // request.model_name() names (the caller checks that it is served), then answers the settings in
  // force there. All or nothing: a refused setting changes none. INVALID_ARGUMENT for an unknown
  // setting or a bad value, UNIMPLEMENTED and FAILED_PRECONDITION as the file comment says, and
  // FAILED_PRECONDITION for turning tracing on with no trace file. trace_file is answered only where
  // clients may set it (the operator's paths stay out of answers otherwise).
  Status Update(const inference::TraceSettingRequest& request, inference::TraceSettingResponse* response)
      EXCLUDES(mutex_);

  // Called once for each request that reached `model`'s scheduler: a ticket when it is to be traced
  // (its settings trace, it is the rate-th since the last one, and the count is not spent; a traced
  // request takes one off a positive count).
  std::optional<TraceTicket> Sample(const std::string& model) EXCLUDES(mutex_);

 private:
  struct ModelSettings {
    std::set<std::string> own;  // the keys the model sets itself
    TraceConfig config;         // with the global values for the other keys
    uint64_t seen = 0;          // requests since the model's settings were first set
  };

  void RefreshAnyTracing() REQUIRES(mutex_);

  const bool clients_may_set_file_;
  const TraceConfig initial_;  // what a global reset goes back to
  Mutex mutex_;
  TraceConfig global_ GUARDED_BY(mutex_);
  uint64_t global_seen_ GUARDED_BY(mutex_) = 0;
  std::map<std::string, ModelSettings> models_ GUARDED_BY(mutex_);
  uint64_t next_id_ GUARDED_BY(mutex_) = 0;
  // Whether any setting traces: false lets Sample skip the lock, as when tracing is off.
  std::atomic<bool> any_tracing_{false};
};

}  // namespace graphserve
