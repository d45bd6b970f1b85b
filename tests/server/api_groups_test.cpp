// api_groups.h: every RPC of the KServe v2 service and every REST route has Triton's API group, and a
// port's gate admits, restricts and closes the groups as its flags say.
#include "graphserve/server/security/api_groups.h"

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "grpc_service.grpc.pb.h"

namespace graphserve {
namespace {

// Handlers name their method in a constant expression: a name missing from the table fails to compile.
static_assert(GroupOfGrpcMethod("ModelInfer") == ApiGroup::kInference);
static_assert(GroupOfGrpcMethod("RepositoryModelLoad") == ApiGroup::kModelRepository);

TEST(ApiGroupsTest, EveryMethodOfTheServiceHasExactlyOneGroup) {
  // Through a message of the same file: naming it links the file's descriptor in.
  const google::protobuf::ServiceDescriptor* service =
      inference::ModelInferRequest::descriptor()->file()->FindServiceByName("GRPCInferenceService");
  ASSERT_NE(service, nullptr);
  ASSERT_EQ(service->full_name(), inference::GRPCInferenceService::service_full_name());
  std::set<std::string> methods;
  for (int i = 0; i < service->method_count(); ++i) {
    const std::string name = service->method(i)->name();
    methods.insert(name);
    int entries = 0;
    for (const GrpcMethodGroup& entry : kGrpcMethodGroups) entries += entry.method == name ? 1 : 0;
    EXPECT_EQ(entries, 1) << name << " needs one entry in kGrpcMethodGroups (api_groups.h)";
  }
  // And the table names no method the service lacks (a renamed RPC would leave a stale entry).
  for (const GrpcMethodGroup& entry : kGrpcMethodGroups) {
    EXPECT_EQ(methods.count(std::string(entry.method)), 1u) << entry.method;
  }
}

TEST(ApiGroupsTest, TritonsGroupNames) {
  for (ApiGroup group : kApiGroups) EXPECT_EQ(ApiGroupNamed(ApiGroupName(group)), group);
  EXPECT_EQ(ApiGroupName(ApiGroup::kSharedMemory), "shared-memory");
  EXPECT_EQ(ApiGroupName(ApiGroup::kModelRepository), "model-repository");
  EXPECT_FALSE(ApiGroupNamed("Logging"));
  EXPECT_TRUE(IsAdminGroup(ApiGroup::kLogging));
  EXPECT_FALSE(IsAdminGroup(ApiGroup::kStatistics));
  EXPECT_FALSE(IsAdminGroup(ApiGroup::kInference));
}

TEST(ApiGroupsTest, EveryRestRouteHasItsGroup) {
  const std::map<std::string, ApiGroup> routes = {
      {"/v2", ApiGroup::kMetadata},
      {"/v2/health/live", ApiGroup::kHealth},
      {"/v2/health/ready", ApiGroup::kHealth},
      {"/v2/models/m", ApiGroup::kMetadata},
      {"/v2/models/m/versions/2", ApiGroup::kMetadata},
      {"/v2/models/m/ready", ApiGroup::kHealth},
      {"/v2/models/m/versions/2/ready", ApiGroup::kHealth},
      {"/v2/models/m/config", ApiGroup::kModelConfig},
      {"/v2/models/m/versions/1/config", ApiGroup::kModelConfig},
      {"/v2/models/m/infer", ApiGroup::kInference},
      {"/v2/models/m/versions/1/infer", ApiGroup::kInference},
      {"/v2/models/m/stats", ApiGroup::kStatistics},
      {"/v2/models/m/versions/1/stats", ApiGroup::kStatistics},
      {"/v2/models/stats", ApiGroup::kStatistics},
      {"/v2/repository/index", ApiGroup::kModelRepository},
      {"/v2/repository/models/m/load", ApiGroup::kModelRepository},
      {"/v2/repository/models/m/unload", ApiGroup::kModelRepository},
      {"/v2/logging", ApiGroup::kLogging},
      {"/v2/trace/setting", ApiGroup::kTrace},
      {"/v2/models/m/trace/setting", ApiGroup::kTrace},
      {"/v2/systemsharedmemory/status", ApiGroup::kSharedMemory},
      {"/v2/systemsharedmemory/region/r/status", ApiGroup::kSharedMemory},
      {"/v2/systemsharedmemory/region/r/register", ApiGroup::kSharedMemory},
      {"/v2/systemsharedmemory/unregister", ApiGroup::kSharedMemory},
      {"/v2/cudasharedmemory/region/r/register", ApiGroup::kSharedMemory},
      {"/v2/cudasharedmemory/status", ApiGroup::kSharedMemory},
      // Empty segments are skipped, as the router skips them.
      {"//v2//models/m//config/", ApiGroup::kModelConfig},
  };
  for (const auto& [path, group] : routes) {
    const std::optional<ApiGroup> found = GroupOfHttpPath(path);
    ASSERT_TRUE(found.has_value()) << path;
    EXPECT_EQ(ApiGroupName(*found), ApiGroupName(group)) << path;
  }
  // No route, no group: the REST endpoint answers them 404.
  for (const char* path : {"/", "/v1/models/m", "/metrics", "/v2/models", "/v2/models/m/generate",
                           "/v2/models/m/versions/1/trace/setting", "/v2/health", "/v2/logging/x",
                           "/v2/repository", "/v2/repository/models/m", "/v2/systemsharedmemory"}) {
    EXPECT_FALSE(GroupOfHttpPath(path).has_value()) << path;
  }
}

// A gate's header lookup over a fixed set of headers.
ApiGate::HeaderLookup Headers(std::map<std::string, std::string> headers) {
  return [headers](const std::string& name) -> std::optional<std::string_view> {
    const auto found = headers.find(name);
    if (found == headers.end()) return std::nullopt;
    return std::string_view(found->second);
  };
}

ApiRestrictions Restrict(const std::string& text, bool grpc) {
  ApiRestrictions restrictions;
  const Status status = restrictions.Add("--flag", text, grpc);
  EXPECT_TRUE(status.ok()) << status.message();
  return restrictions;
}

TEST(ApiGroupsTest, WithoutFlagsEveryGroupIsOpen) {
  const ApiGate gate(ApiRestrictions(), /*close_admin_groups=*/false, "http");
  EXPECT_TRUE(gate.open());
  for (ApiGroup group : kApiGroups) EXPECT_EQ(gate.Admit(group, Headers({})), ApiGate::Verdict::kAdmitted);
  EXPECT_EQ(gate.Describe(), "every API group open");
}

TEST(ApiGroupsTest, ARestrictedGroupNeedsItsHeaderWithItsValue) {
  const ApiGate gate(Restrict("model-repository,logging:admin-key=the-value", /*grpc=*/true), false, "grpc");
  EXPECT_FALSE(gate.open());
  const std::string header = "triton-grpc-protocol-admin-key";
  EXPECT_EQ(gate.Admit(ApiGroup::kModelRepository, Headers({})), ApiGate::Verdict::kRestricted);
  EXPECT_EQ(gate.Admit(ApiGroup::kModelRepository, Headers({{header, "the-valuE"}})),
            ApiGate::Verdict::kRestricted);
  EXPECT_EQ(gate.Admit(ApiGroup::kModelRepository, Headers({{header, "the-value "}})),
            ApiGate::Verdict::kRestricted);
  EXPECT_EQ(gate.Admit(ApiGroup::kModelRepository, Headers({{"admin-key", "the-value"}})),
            ApiGate::Verdict::kRestricted);
  EXPECT_EQ(gate.Admit(ApiGroup::kModelRepository, Headers({{header, "the-value"}})),
            ApiGate::Verdict::kAdmitted);
  EXPECT_EQ(gate.Admit(ApiGroup::kLogging, Headers({{header, "the-value"}})), ApiGate::Verdict::kAdmitted);
  // The groups no restriction names stay open, admin ones included (no --admin-apis closed).
  EXPECT_EQ(gate.Admit(ApiGroup::kInference, Headers({})), ApiGate::Verdict::kAdmitted);
  EXPECT_EQ(gate.Admit(ApiGroup::kSharedMemory, Headers({})), ApiGate::Verdict::kAdmitted);
  // Triton's sentence, naming the header; never the value.
  const std::string message = gate.RefusalMessage(ApiGroup::kLogging, ApiGate::Verdict::kRestricted);
  EXPECT_EQ(message.rfind("This protocol is restricted, expecting header '" + header + "'", 0), 0u)
      << message;
  EXPECT_NE(message.find("logging"), std::string::npos) << message;
  EXPECT_EQ(message.find("the-value"), std::string::npos) << message;
  EXPECT_EQ(gate.Describe().find("the-value"), std::string::npos) << gate.Describe();
}

TEST(ApiGroupsTest, HttpKeysKeepTheirNameWithoutPrefix) {
  const ApiGate gate(Restrict("inference:X-Infer-Key=v", /*grpc=*/false), false, "http");
  EXPECT_EQ(gate.Admit(ApiGroup::kInference, Headers({{"X-Infer-Key", "v"}})), ApiGate::Verdict::kAdmitted);
  EXPECT_EQ(gate.Admit(ApiGroup::kInference, Headers({})), ApiGate::Verdict::kRestricted);
  EXPECT_EQ(gate.RefusalMessage(ApiGroup::kInference, ApiGate::Verdict::kRestricted)
                .rfind("This API is restricted, expecting header 'X-Infer-Key'", 0),
            0u);
}

TEST(ApiGroupsTest, ClosedAdminGroupsAreRefusedUnlessARestrictionOpensThem) {
  const ApiGate gate(Restrict("model-repository:k=v", /*grpc=*/false), /*close_admin_groups=*/true, "http");
  for (ApiGroup group : {ApiGroup::kLogging, ApiGroup::kTrace, ApiGroup::kSharedMemory}) {
    EXPECT_EQ(gate.Admit(group, Headers({{"k", "v"}})), ApiGate::Verdict::kClosed) << ApiGroupName(group);
  }
  EXPECT_EQ(gate.Admit(ApiGroup::kModelRepository, Headers({{"k", "v"}})), ApiGate::Verdict::kAdmitted);
  EXPECT_EQ(gate.Admit(ApiGroup::kModelRepository, Headers({})), ApiGate::Verdict::kRestricted);
  for (ApiGroup group : {ApiGroup::kHealth, ApiGroup::kMetadata, ApiGroup::kInference, ApiGroup::kModelConfig,
                         ApiGroup::kStatistics}) {
    EXPECT_EQ(gate.Admit(group, Headers({})), ApiGate::Verdict::kAdmitted) << ApiGroupName(group);
  }
  EXPECT_NE(gate.RefusalMessage(ApiGroup::kLogging, ApiGate::Verdict::kClosed).find("--admin-apis closed"),
            std::string::npos);
  EXPECT_EQ(gate.Describe(),
            "shared-memory (closed), model-repository (header 'k'), trace (closed), logging (closed)");
  // Closed with no restriction at all is not open.
  EXPECT_FALSE(ApiGate(ApiRestrictions(), true, "grpc").open());
}

TEST(ApiGroupsTest, AFailedValueLeavesTheEarlierRestrictionsAsTheyWere) {
  ApiRestrictions restrictions = Restrict("trace:k=v", /*grpc=*/false);
  EXPECT_FALSE(restrictions.Add("--flag", "logging,trace:j=w", false).ok());
  EXPECT_EQ(restrictions.For(ApiGroup::kLogging), nullptr);
  ASSERT_NE(restrictions.For(ApiGroup::kTrace), nullptr);
  EXPECT_EQ(restrictions.For(ApiGroup::kTrace)->value, "v");
}

}  // namespace
}  // namespace graphserve
