#include "graphserve/server/security/api_groups.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <vector>

#include "graphserve/server/observability/log_limiter.h"
#include "graphserve/server/security/auth.h"

namespace graphserve {
namespace {

constexpr std::string_view kGroupNames[] = {"health",        "metadata",     "inference",
                                            "shared-memory", "model-config", "model-repository",
                                            "statistics",    "trace",        "logging"};
static_assert(std::size(kGroupNames) == kApiGroupCount);

constexpr const char* kRestrictionSyntax = "<group>,<group>,...:<restricted-key>=<restricted-value>";

std::vector<std::string_view> Split(std::string_view text, char separator, bool skip_empty) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(separator, start), text.size());
    if (end > start || !skip_empty) parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

// RFC 9110's token characters would allow more; these are the ones gRPC metadata keys take too.
bool IsHeaderName(std::string_view key) {
  return std::all_of(key.begin(), key.end(), [](unsigned char c) {
    return std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.';
  });
}

// gRPC metadata values and HTTP field values alike: visible ASCII and spaces.
bool IsHeaderValue(std::string_view value) {
  return std::all_of(value.begin(), value.end(), [](unsigned char c) { return c >= 0x20 && c < 0x7f; });
}

std::string Lower(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower;
}

std::string GroupList() {
  std::string list;
  for (std::string_view name : kGroupNames) list += (list.empty() ? "" : ", ") + std::string(name);
  return list;
}

// A /v2/models/NAME[/versions/V][/ACTION] path, from its segments after "models".
std::optional<ApiGroup> GroupOfModelPath(const std::vector<std::string_view>& path) {
  size_t next = 3;
  if (path.size() > next + 1 && path[next] == "versions") next += 2;
  if (path.size() == next) return ApiGroup::kMetadata;
  if (path.size() != next + 1) return std::nullopt;
  const std::string_view action = path[next];
  if (action == "ready") return ApiGroup::kHealth;
  if (action == "config") return ApiGroup::kModelConfig;
  if (action == "stats") return ApiGroup::kStatistics;
  if (action == "infer") return ApiGroup::kInference;
  return std::nullopt;
}

}  // namespace

std::string_view ApiGroupName(ApiGroup group) { return kGroupNames[static_cast<size_t>(group)]; }

std::optional<ApiGroup> ApiGroupNamed(std::string_view name) {
  for (ApiGroup group : kApiGroups) {
    if (ApiGroupName(group) == name) return group;
  }
  return std::nullopt;
}

bool IsAdminGroup(ApiGroup group) {
  return std::find(std::begin(kAdminGroups), std::end(kAdminGroups), group) != std::end(kAdminGroups);
}

std::optional<ApiGroup> GroupOfHttpPath(std::string_view path) {
  // Empty segments are skipped, as the REST endpoint's router skips them.
  const std::vector<std::string_view> segments = Split(path, '/', /*skip_empty=*/true);
  if (segments.empty() || segments[0] != "v2") return std::nullopt;
  const size_t size = segments.size();
  if (size == 1) return ApiGroup::kMetadata;
  const std::string_view area = segments[1];
  const bool probe = size == 3 && (segments[2] == "live" || segments[2] == "ready");
  if (area == "health" && probe) return ApiGroup::kHealth;
  if (area == "trace" && size == 3 && segments[2] == "setting") return ApiGroup::kTrace;
  if (area == "logging" && size == 2) return ApiGroup::kLogging;
  if (area == "models") {
    if (size == 3 && segments[2] == "stats") return ApiGroup::kStatistics;
    if (size == 5 && segments[3] == "trace" && segments[4] == "setting") return ApiGroup::kTrace;
    if (size >= 3) return GroupOfModelPath(segments);
  }
  if (area == "repository" &&
      ((size == 3 && segments[2] == "index") || (size == 5 && segments[2] == "models"))) {
    return ApiGroup::kModelRepository;
  }
  if ((area == "systemsharedmemory" || area == "cudasharedmemory") &&
      (size == 3 || (size == 5 && segments[2] == "region"))) {
    return ApiGroup::kSharedMemory;
  }
  return std::nullopt;
}

Status ApiRestrictions::Add(const std::string& flag, std::string_view text, bool grpc) {
  // As Triton reads it: the groups up to the first ':', the key up to the next '=', the rest the
  // value (which may hold ':' and '=' itself). The value is never echoed: it is a secret.
  const size_t colon = text.find(':');
  const size_t equals = colon == std::string_view::npos ? colon : text.find('=', colon + 1);
  if (equals == std::string_view::npos) {
    return InvalidArgument(flag + ": expected " + kRestrictionSyntax + " (no ':' then '=')");
  }
  const std::string_view groups = text.substr(0, colon);
  const std::string_view key = text.substr(colon + 1, equals - colon - 1);
  const std::string_view value = text.substr(equals + 1);
  if (groups.empty() || key.empty() || value.empty()) {
    return InvalidArgument(flag + ": expected " + kRestrictionSyntax + " (the " +
                           (groups.empty() ? "groups are"
                            : key.empty()  ? "key is"
                                           : "value is") +
                           " empty)");
  }
  if (!IsHeaderName(key)) {
    return InvalidArgument(flag + ": '" + std::string(key) +
                           "' is not a header name (letters, digits, '-', '_' and '.')");
  }
  if (!IsHeaderValue(value)) return InvalidArgument(flag + ": the restricted value is not printable ASCII");
  // gRPC metadata keys arrive in lower case; HTTP header names compare without case anyway.
  const std::string header = grpc ? std::string(kGrpcHeaderPrefix) + Lower(key) : std::string(key);
  std::array<std::optional<ApiRestriction>, kApiGroupCount> added = restrictions_;
  for (std::string_view name : Split(groups, ',', /*skip_empty=*/false)) {
    const std::optional<ApiGroup> group = ApiGroupNamed(name);
    if (!group) {
      return InvalidArgument(flag + ": '" + std::string(name) + "' is not an API group (" + GroupList() +
                             ")");
    }
    if (grpc && *group == ApiGroup::kHealth) {
      return InvalidArgument(flag +
                             ": graphserve cannot restrict 'health' over gRPC: grpc.health.v1 is gRPC's "
                             "own service, which sees no headers");
    }
    std::optional<ApiRestriction>& slot = added[static_cast<size_t>(*group)];
    if (slot) {
      return InvalidArgument(flag + ": '" + std::string(name) +
                             "' is named twice (a group has one restriction)");
    }
    slot = ApiRestriction{header, std::string(value)};
  }
  restrictions_ = std::move(added);
  return Status::Ok();
}

const ApiRestriction* ApiRestrictions::For(ApiGroup group) const {
  const std::optional<ApiRestriction>& restriction = restrictions_[static_cast<size_t>(group)];
  return restriction ? &*restriction : nullptr;
}

bool ApiRestrictions::empty() const {
  return std::none_of(restrictions_.begin(), restrictions_.end(),
                      [](const auto& slot) { return slot.has_value(); });
}

ApiGate::ApiGate(ApiRestrictions restrictions, bool close_admin_groups, const char* endpoint)
    : restrictions_(std::move(restrictions)),
      close_admin_groups_(close_admin_groups),
      endpoint_(endpoint),
      open_(restrictions_.empty() && !close_admin_groups) {}

ApiGate::Verdict ApiGate::Admit(ApiGroup group, const HeaderLookup& header) const {
  if (open_) return Verdict::kAdmitted;
  const ApiRestriction* restriction = restrictions_.For(group);
  if (restriction == nullptr) {
    if (!close_admin_groups_ || !IsAdminGroup(group)) return Verdict::kAdmitted;
    LogLimited(LogKind::kAuthFailure, {}, spdlog::level::warn,
               "refused a call of API group {} on {}: the group is closed (--admin-apis closed)",
               ApiGroupName(group), endpoint_);
    return Verdict::kClosed;
  }
  const std::optional<std::string_view> presented = header(restriction->header);
  if (presented && SameSecret(*presented, restriction->value)) return Verdict::kAdmitted;
  LogLimited(LogKind::kAuthFailure, {}, spdlog::level::warn,
             "refused a call of API group {} on {}: header '{}' {}", ApiGroupName(group), endpoint_,
             restriction->header, presented ? "holds another value" : "missing");
  return Verdict::kRestricted;
}

std::string ApiGate::Describe() const {
  std::string described;
  for (ApiGroup group : kApiGroups) {
    const ApiRestriction* restriction = restrictions_.For(group);
    std::string how;
    if (restriction != nullptr) {
      how = "header '" + restriction->header + "'";
    } else if (close_admin_groups_ && IsAdminGroup(group)) {
      how = "closed";
    } else {
      continue;
    }
    described += (described.empty() ? "" : ", ") + std::string(ApiGroupName(group)) + " (" + how + ")";
  }
  return described.empty() ? "every API group open" : described;
}

std::string ApiGate::RefusalMessage(ApiGroup group, Verdict verdict) const {
  const std::string name(ApiGroupName(group));
  if (verdict == Verdict::kClosed) {
    return "the " + name + " API group is closed on this server (--admin-apis closed)";
  }
  const ApiRestriction* restriction = restrictions_.For(group);
  const std::string header = restriction == nullptr ? std::string() : restriction->header;
  // Triton's words, which clients may match, then the group.
  const char* what = std::string_view(endpoint_) == "grpc" ? "protocol" : "API";
  return std::string("This ") + what + " is restricted, expecting header '" + header + "' (API group " +
         name + ")";
}

}  // namespace graphserve
