#pragma once
// What both ends of the KServe v2 REST binding must agree on, for the REST endpoint's codec (server)
// and graphserve-loadgen's REST transport (client): an infer parameter's JSON value, and the HTTP
// status that stands for each gRPC status code (Triton's mapping), in both directions, from one table.
// Stateless functions; thread-safe.
#include <grpcpp/support/status.h>

#include <nlohmann/json.hpp>

#include "grpc_service.pb.h"

namespace graphserve::rest_json {

// The parameter's value as JSON: a bool, an integer, a string or a double; null when none is set.
nlohmann::json InferParameterJson(const inference::InferParameter& parameter);

// The HTTP status Triton's REST endpoint answers a status code with (OK 200, NOT_FOUND 404,
// UNAVAILABLE 503, UNIMPLEMENTED 501, INTERNAL 500, every other 400), plus what HTTP has a closer
// word for: RESOURCE_EXHAUSTED 429 and DEADLINE_EXCEEDED 504.
int HttpStatusForCode(grpc::StatusCode code);
// The code an HTTP status stands for, as a client reads it: the mapping above reversed, 400 as
// INVALID_ARGUMENT; UNKNOWN for a status the mapping has not.
grpc::StatusCode CodeForHttpStatus(int http_status);

}  // namespace graphserve::rest_json
