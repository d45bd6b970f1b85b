#include "graphserve/rest_json.h"

namespace graphserve::rest_json {
namespace {

struct CodeAndHttpStatus {
  grpc::StatusCode code;
  int http_status;
};

// Both directions read this one table, so that what the server answers and what the client reads
// back cannot drift apart.
constexpr CodeAndHttpStatus kHttpStatusByCode[] = {
    {grpc::StatusCode::OK, 200},          {grpc::StatusCode::INVALID_ARGUMENT, 400},
    {grpc::StatusCode::NOT_FOUND, 404},   {grpc::StatusCode::RESOURCE_EXHAUSTED, 429},
    {grpc::StatusCode::INTERNAL, 500},    {grpc::StatusCode::UNIMPLEMENTED, 501},
    {grpc::StatusCode::UNAVAILABLE, 503}, {grpc::StatusCode::DEADLINE_EXCEEDED, 504},
};

}  // namespace

nlohmann::json InferParameterJson(const inference::InferParameter& parameter) {
  switch (parameter.parameter_choice_case()) {
    case inference::InferParameter::kBoolParam:
      return parameter.bool_param();
    case inference::InferParameter::kInt64Param:
      return parameter.int64_param();
    case inference::InferParameter::kStringParam:
      return parameter.string_param();
    case inference::InferParameter::kDoubleParam:
      return parameter.double_param();
    case inference::InferParameter::kUint64Param:
      return parameter.uint64_param();
    case inference::InferParameter::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return nullptr;
}

int HttpStatusForCode(grpc::StatusCode code) {
  for (const auto& entry : kHttpStatusByCode) {
    if (entry.code == code) return entry.http_status;
  }
  return 400;
}

grpc::StatusCode CodeForHttpStatus(int http_status) {
  for (const auto& entry : kHttpStatusByCode) {
    if (entry.http_status == http_status) return entry.code;
  }
  return grpc::StatusCode::UNKNOWN;
}

}  // namespace graphserve::rest_json
