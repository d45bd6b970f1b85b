// TokenAuthenticator: where tokens come from, how they are presented, reload, health paths; and
// ValidateTlsOptions' flag checks.
#include "graphserve/server/security/auth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace graphserve {
namespace {

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/graphserve_auth_testXXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    for (const std::string& path : written_) std::remove(path.c_str());
    rmdir(dir_.c_str());
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    written_.push_back(path);
    return path;
  }

  std::string dir_;
  std::vector<std::string> written_;
};

TEST_F(AuthTest, AcceptsFileAndEnvironmentTokensAsBearerOrApiKey) {
  AuthOptions options;
  options.token_file = Write("tokens", "# comment\n\n  first-token  \nsecond-token\n");
  options.env_tokens = "env-a, env-b";
  std::unique_ptr<TokenAuthenticator> auth;
  ASSERT_TRUE(TokenAuthenticator::Create(options, nullptr, &auth).ok());
  EXPECT_TRUE(auth->Accepts("Bearer first-token", ""));
  EXPECT_TRUE(auth->Accepts("bearer second-token", ""));
  EXPECT_TRUE(auth->Accepts("", "env-b"));
  EXPECT_TRUE(auth->Accepts("Bearer wrong", "env-a"));
  EXPECT_FALSE(auth->Accepts("", ""));
  EXPECT_FALSE(auth->Accepts("first-token", ""));  // no scheme
  EXPECT_FALSE(auth->Accepts("Basic first-token", ""));
  EXPECT_FALSE(auth->Accepts("Bearer first-toke", ""));
  EXPECT_FALSE(auth->Accepts("Bearer first-tokenX", ""));
  EXPECT_FALSE(auth->Accepts("Bearer # comment", ""));
  EXPECT_FALSE(auth->Accepts("", "env-a, env-b"));
}

TEST_F(AuthTest, ReloadSwapsFileTokensAndKeepsThemOnError) {
  AuthOptions options;
  options.token_file = Write("tokens", "old\n");
  std::unique_ptr<TokenAuthenticator> auth;
  ASSERT_TRUE(TokenAuthenticator::Create(options, nullptr, &auth).ok());
  Write("tokens", "new\n");
  ASSERT_TRUE(auth->Reload().ok());
  EXPECT_TRUE(auth->Accepts("Bearer new", ""));
  EXPECT_FALSE(auth->Accepts("Bearer old", ""));
  Write("tokens", "\n");
  const Status status = auth->Reload();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("--auth-token-file"), std::string::npos) << status.message();
  EXPECT_TRUE(auth->Accepts("Bearer new", ""));
}

TEST_F(AuthTest, RefusesMissingTokens) {
  std::unique_ptr<TokenAuthenticator> auth;
  AuthOptions options;
  options.token_file = dir_ + "/missing";
  EXPECT_NE(TokenAuthenticator::Create(options, nullptr, &auth).message().find("--auth-token-file: cannot read"),
            std::string::npos);
  options.token_file.clear();
  options.env_tokens = " , ";
  EXPECT_NE(TokenAuthenticator::Create(options, nullptr, &auth).message().find("GRAPHSERVE_AUTH_TOKEN"),
            std::string::npos);
}

TEST_F(AuthTest, RefusalsAreCountedPerEndpoint) {
  AuthOptions options;
  options.env_tokens = "t";
  std::vector<std::string> counted;
  std::unique_ptr<TokenAuthenticator> auth;
  ASSERT_TRUE(TokenAuthenticator::Create(
                  options, [&counted](const char* endpoint) { counted.emplace_back(endpoint); }, &auth)
                  .ok());
  auth->Refused("grpc", "127.0.0.1");
  auth->Refused("http", "127.0.0.1");
  EXPECT_EQ(counted, (std::vector<std::string>{"grpc", "http"}));
}

TEST(AuthPaths, HealthProbes) {
  EXPECT_TRUE(TokenAuthenticator::IsHealthGrpcMethod("/grpc.health.v1.Health/Check"));
  EXPECT_TRUE(TokenAuthenticator::IsHealthGrpcMethod("/grpc.health.v1.Health/Watch"));
  EXPECT_TRUE(TokenAuthenticator::IsHealthGrpcMethod("/inference.GRPCInferenceService/ServerReady"));
  EXPECT_FALSE(TokenAuthenticator::IsHealthGrpcMethod("/inference.GRPCInferenceService/ModelReady"));
  EXPECT_FALSE(TokenAuthenticator::IsHealthGrpcMethod("/inference.GRPCInferenceService/ModelInfer"));
  EXPECT_TRUE(TokenAuthenticator::IsHealthHttpPath("/v2/health/ready"));
  EXPECT_FALSE(TokenAuthenticator::IsHealthHttpPath("/v2/health/ready/../../models/m/infer"));
  EXPECT_FALSE(TokenAuthenticator::IsHealthHttpPath("/v2/models/m/ready"));
}

TEST_F(AuthTest, TlsFlagsMustAgree) {
  const std::string cert = Write("cert.pem", "-----BEGIN CERTIFICATE-----\n");
  const std::string not_pem = Write("notpem", "hello\n");
  TlsOptions tls;
  EXPECT_TRUE(ValidateTlsOptions(tls).ok());
  tls.key_file = cert;
  EXPECT_EQ(ValidateTlsOptions(tls).message(), "--tls-key-file needs --tls-cert-file");
  tls = TlsOptions();
  tls.client_ca_file = cert;
  EXPECT_NE(ValidateTlsOptions(tls).message().find("needs --tls-cert-file"), std::string::npos);
  tls = TlsOptions();
  tls.cert_file = cert;
  EXPECT_EQ(ValidateTlsOptions(tls).message(), "--tls-cert-file needs --tls-key-file");
  tls.key_file = not_pem;
  EXPECT_NE(ValidateTlsOptions(tls).message().find("--tls-key-file: " + not_pem + " holds no PEM"),
            std::string::npos);
  tls.key_file = cert;
  EXPECT_TRUE(ValidateTlsOptions(tls).ok());
}

}  // namespace
}  // namespace graphserve
