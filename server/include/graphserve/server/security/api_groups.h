#pragma once
// Which API group each gRPC method and REST route belongs to, and who may call each group: Triton's
// restricted APIs (--grpc-restricted-protocol and --http-restricted-api, with Triton's syntax) and
// graphserve's --admin-apis closed.
//
// The groups are Triton's: health, metadata, inference, shared-memory, model-config,
// model-repository, statistics, trace, logging. One table here maps every RPC of
// inference.GRPCInferenceService and every REST route to its group, and both front ends ask it:
// a gRPC handler names its method (GroupOfGrpcMethod, checked when it compiles), and the REST port
// answers 404 to a path the table does not know, so that a new RPC or route cannot be served without
// a group (api_groups_test checks the service descriptor against the table).
//
// A restricted group is served only to calls that carry its header with its value (gRPC metadata
// "triton-grpc-protocol-KEY", HTTP header "KEY"); the value is compared in constant time and never
// logged. A call without it is refused as Triton refuses it: gRPC UNAVAILABLE, HTTP 403, both naming
// the header. With --admin-apis closed, the admin groups (kAdminGroups) that no restriction of that
// port names are refused to every call (gRPC PERMISSION_DENIED, HTTP 403). Tokens (auth.h) are
// checked before, and independently of, all of this.
//
// Thread safety: everything here is immutable once built; any method may be called from any thread.
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "graphserve/engine/status.h"

namespace graphserve {

enum class ApiGroup : uint8_t {
  kHealth,
  kMetadata,
  kInference,
  kSharedMemory,
  kModelConfig,
  kModelRepository,
  kStatistics,
  kTrace,
  kLogging,
};
inline constexpr ApiGroup kApiGroups[] = {
    ApiGroup::kHealth,       ApiGroup::kMetadata,    ApiGroup::kInference,
    ApiGroup::kSharedMemory, ApiGroup::kModelConfig, ApiGroup::kModelRepository,
    ApiGroup::kStatistics,   ApiGroup::kTrace,       ApiGroup::kLogging};
inline constexpr size_t kApiGroupCount = std::size(kApiGroups);

// What --admin-apis closed shuts: the groups that change the server or reach beyond one request
// (loading models, the log level, trace settings, mapping the host's shared memory). Statistics and
// model configs are read-only and stay open.
inline constexpr ApiGroup kAdminGroups[] = {ApiGroup::kModelRepository, ApiGroup::kLogging, ApiGroup::kTrace,
                                            ApiGroup::kSharedMemory};

// Triton's name: "health", "shared-memory", ...
std::string_view ApiGroupName(ApiGroup group);
std::optional<ApiGroup> ApiGroupNamed(std::string_view name);
bool IsAdminGroup(ApiGroup group);

// ------------------------------------------------------------------------------------------------
// The table.

struct GrpcMethodGroup {
  std::string_view method;  // the RPC's name in inference.GRPCInferenceService
  ApiGroup group;
};

inline constexpr GrpcMethodGroup kGrpcMethodGroups[] = {
    {"ServerLive", ApiGroup::kHealth},
    {"ServerReady", ApiGroup::kHealth},
    {"ModelReady", ApiGroup::kHealth},
    {"ServerMetadata", ApiGroup::kMetadata},
    {"ModelMetadata", ApiGroup::kMetadata},
    {"ModelInfer", ApiGroup::kInference},
    {"ModelStreamInfer", ApiGroup::kInference},
    {"ModelConfig", ApiGroup::kModelConfig},
    {"ModelStatistics", ApiGroup::kStatistics},
    {"RepositoryIndex", ApiGroup::kModelRepository},
    {"RepositoryModelLoad", ApiGroup::kModelRepository},
    {"RepositoryModelUnload", ApiGroup::kModelRepository},
    {"SystemSharedMemoryStatus", ApiGroup::kSharedMemory},
    {"SystemSharedMemoryRegister", ApiGroup::kSharedMemory},
    {"SystemSharedMemoryUnregister", ApiGroup::kSharedMemory},
    {"CudaSharedMemoryStatus", ApiGroup::kSharedMemory},
    {"CudaSharedMemoryRegister", ApiGroup::kSharedMemory},
    {"CudaSharedMemoryUnregister", ApiGroup::kSharedMemory},
    {"TraceSetting", ApiGroup::kTrace},
    {"LogSettings", ApiGroup::kLogging},
};

// The group of an RPC. Meant for constant evaluation in its handler: a method missing from the table
// does not compile there (and throws std::out_of_range at run time).
constexpr ApiGroup GroupOfGrpcMethod(std::string_view method) {
  for (const GrpcMethodGroup& entry : kGrpcMethodGroups) {
    if (entry.method == method) return entry.group;
  }
  throw std::out_of_range("a GRPCInferenceService method without an API group in kGrpcMethodGroups");
}

// The group of a REST path (percent-decoded, without the query): the KServe v2 routes graphserve
// serves, whatever the method. nullopt: no route, answered 404.
std::optional<ApiGroup> GroupOfHttpPath(std::string_view path);

// ------------------------------------------------------------------------------------------------
// Who may call each group on one port.

// A restricted group: the header a call must carry and its value.
struct ApiRestriction {
  std::string header;  // the whole name, prefix included; for gRPC in lower case, as metadata arrives
  std::string value;
};

// One port's restrictions, as its flag's values say.
class ApiRestrictions {
 public:
  // The header prefix of each port: Triton's gRPC metadata is "triton-grpc-protocol-" + KEY.
  static constexpr std::string_view kGrpcHeaderPrefix = "triton-grpc-protocol-";

  // Reads one value of `flag` (Triton's "<group>,<group>,...:<key>=<value>"), naming the flag and
  // never the value in its INVALID_ARGUMENT: an unknown group, one named twice (in this value or an
  // earlier one), an empty group, key or value, a key that is no header name, a value that is no
  // printable ASCII. gRPC's "health" is refused too: grpc.health.v1 is gRPC's own service, which
  // sees no headers, and a half-restricted health group would mislead.
  Status Add(const std::string& flag, std::string_view text, bool grpc);

  // nullptr: the group is not restricted.
  const ApiRestriction* For(ApiGroup group) const;
  bool empty() const;

 private:
  std::array<std::optional<ApiRestriction>, kApiGroupCount> restrictions_;
};

// What --grpc-restricted-protocol, --http-restricted-api and --admin-apis ask for.
struct ApiAccessOptions {
  ApiRestrictions grpc;
  ApiRestrictions http;
  // --admin-apis closed: the admin groups no restriction names are refused on that port.
  bool close_admin_groups = false;
};

// One port's decision for a call.
class ApiGate {
 public:
  enum class Verdict {
    kAdmitted,
    kRestricted,  // the group's header is missing or holds another value
    kClosed,      // an admin group, closed by --admin-apis closed
  };
  // The value of a header (gRPC metadata key), or nullopt when the call has none.
  using HeaderLookup = std::function<std::optional<std::string_view>(const std::string& name)>;

  // `endpoint` names the port in the log ("grpc", "http").
  ApiGate(ApiRestrictions restrictions, bool close_admin_groups, const char* endpoint);

  // Whether a call of `group` with these headers is served. Logs a refusal (rate-limited as
  // LogKind::kAuthFailure, naming the group and the header, never a value).
  Verdict Admit(ApiGroup group, const HeaderLookup& header) const;
  // What the client is told of a refusal: Triton's sentence naming the header, or that the group is
  // closed.
  std::string RefusalMessage(ApiGroup group, Verdict verdict) const;
  // Whether every group is open to everyone here (then Admit need not be asked).
  bool open() const { return open_; }
  // For the start-up log: each group that is not open, and what opens it ("header 'NAME'" or
  // "closed"); "every API group open" when none. Never a value.
  std::string Describe() const;

 private:
  const ApiRestrictions restrictions_;
  const bool close_admin_groups_;
  const char* const endpoint_;
  const bool open_;
};

}  // namespace graphserve
