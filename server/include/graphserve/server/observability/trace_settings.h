#pragma once
// Triton's TraceSetting RPC: graphserve traces no requests, so it answers Triton's trace settings
// with tracing off and Triton's defaults, accepts updates that keep it so, and refuses any that
// would turn tracing on. Per-stage durations are in ModelStatistics and on /metrics instead.
// Stateless; thread-safe.
#include "graphserve/engine/status.h"
#include "grpc_service.pb.h"

namespace graphserve {

// Answers the trace settings after applying `request`'s (none: a read; an empty value list resets a
// setting to its default). UNIMPLEMENTED for a value that would turn tracing on or configure it
// (any trace_level but OFF, a trace_rate, trace_count or log_frequency other than the default, a
// trace_mode other than "triton"); INVALID_ARGUMENT naming an unknown setting. `response` is left
// empty on error. The caller checks request.model_name().
Status UpdateTraceSettings(const inference::TraceSettingRequest& request,
                           inference::TraceSettingResponse* response);

}  // namespace graphserve
