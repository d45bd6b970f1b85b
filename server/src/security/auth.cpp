#include "graphserve/server/security/auth.h"

#include <spdlog/spdlog.h>
#include <strings.h>

#include <fstream>
#include <sstream>

#include "graphserve/server/observability/log_limiter.h"

namespace graphserve {
namespace {

Status CheckPemFile(const std::string& flag, const std::string& path, const char* what) {
  std::string text;
  const Status status = ReadFileOfFlag(flag, path, &text);
  if (!status.ok()) return status;
  if (text.find("-----BEGIN") == std::string::npos) {
    return InvalidArgument(flag + ": " + path + " holds no PEM " + what);
  }
  return Status::Ok();
}

std::string_view Trim(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
}

void SplitTokens(std::string_view text, std::string_view separators, bool comments,
                 std::vector<std::string>* tokens) {
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find_first_of(separators, start), text.size());
    const std::string_view token = Trim(text.substr(start, end - start));
    if (!token.empty() && !(comments && token[0] == '#')) tokens->emplace_back(token);
    start = end + 1;
  }
}

}  // namespace

bool SameSecret(std::string_view presented, std::string_view accepted) {
  unsigned difference = presented.size() != accepted.size() ? 1u : 0u;
  const size_t n = presented.size();
  for (size_t i = 0; i < accepted.size(); ++i) {
    const unsigned char other = n == 0 ? 0 : static_cast<unsigned char>(presented[i % n]);
    difference |= static_cast<unsigned char>(accepted[i]) ^ other;
  }
  return difference == 0;
}

Status ReadFileOfFlag(const std::string& flag, const std::string& path, std::string* text) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  if (file) contents << file.rdbuf();
  if (!file || file.bad()) return InvalidArgument(flag + ": cannot read " + path);
  *text = contents.str();
  return Status::Ok();
}

Status ValidateTlsOptions(const TlsOptions& tls) {
  if (!tls.enabled()) {
    if (!tls.key_file.empty()) return InvalidArgument("--tls-key-file needs --tls-cert-file");
    if (!tls.client_ca_file.empty()) {
      return InvalidArgument("--tls-client-ca-file (mutual TLS) needs --tls-cert-file and --tls-key-file");
    }
    return Status::Ok();
  }
  if (tls.key_file.empty()) return InvalidArgument("--tls-cert-file needs --tls-key-file");
  if (tls.reload_interval_s < 1) return InvalidArgument("--tls-reload-interval-s must be at least 1");
  Status status = CheckPemFile("--tls-cert-file", tls.cert_file, "certificate");
  if (status.ok()) status = CheckPemFile("--tls-key-file", tls.key_file, "private key");
  if (status.ok() && !tls.client_ca_file.empty()) {
    status = CheckPemFile("--tls-client-ca-file", tls.client_ca_file, "certificate");
  }
  return status;
}

TokenAuthenticator::TokenAuthenticator(AuthOptions options, RefusalCounter count_refusal)
    : options_(std::move(options)), count_refusal_(std::move(count_refusal)) {}

Status TokenAuthenticator::Create(const AuthOptions& options, RefusalCounter count_refusal,
                                  std::unique_ptr<TokenAuthenticator>* authenticator) {
  std::unique_ptr<TokenAuthenticator> created(new TokenAuthenticator(options, std::move(count_refusal)));
  const Status status = created->Reload();
  if (!status.ok()) return status;
  *authenticator = std::move(created);
  return Status::Ok();
}

Status TokenAuthenticator::Read(std::vector<std::string>* tokens) const {
  if (!options_.token_file.empty()) {
    std::string text;
    const Status status = ReadFileOfFlag("--auth-token-file", options_.token_file, &text);
    if (!status.ok()) return status;
    const size_t before = tokens->size();
    SplitTokens(text, "\n", /*comments=*/true, tokens);
    if (tokens->size() == before) {
      return InvalidArgument("--auth-token-file: " + options_.token_file + " holds no token");
    }
  }
  if (!options_.env_tokens.empty()) {
    const size_t before = tokens->size();
    SplitTokens(options_.env_tokens, ",\n", /*comments=*/false, tokens);
    if (tokens->size() == before) return InvalidArgument("GRAPHSERVE_AUTH_TOKEN holds no token");
  }
  if (tokens->empty()) return InvalidArgument("no token: set --auth-token-file or GRAPHSERVE_AUTH_TOKEN");
  return Status::Ok();
}

Status TokenAuthenticator::Reload() {
  auto tokens = std::make_shared<std::vector<std::string>>();
  const Status status = Read(tokens.get());
  if (!status.ok()) return status;
  MutexLock lock(&mutex_);
  tokens_ = std::move(tokens);
  return Status::Ok();
}

bool TokenAuthenticator::Accepts(std::string_view authorization, std::string_view api_key) const {
  std::shared_ptr<const std::vector<std::string>> tokens;
  {
    MutexLock lock(&mutex_);
    tokens = tokens_;
  }
  std::string_view bearer;
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() > kScheme.size() &&
      strncasecmp(authorization.data(), kScheme.data(), kScheme.size()) == 0) {
    bearer = Trim(authorization.substr(kScheme.size()));
  }
  api_key = Trim(api_key);
  bool accepted = false;
  // Every token is compared, whichever matches, so timing does not tell which one did.
  for (const std::string& token : *tokens) {
    accepted |= !bearer.empty() && SameSecret(bearer, token);
    accepted |= !api_key.empty() && SameSecret(api_key, token);
  }
  return accepted;
}

void TokenAuthenticator::Refused(const char* endpoint, std::string_view peer) const {
  if (count_refusal_) count_refusal_(endpoint);
  LogLimited(LogKind::kAuthFailure, {}, spdlog::level::warn,
             "refused an unauthenticated {} request from {} (missing or wrong token)", endpoint, peer);
}

bool TokenAuthenticator::IsHealthGrpcMethod(std::string_view path) {
  return path == "/grpc.health.v1.Health/Check" || path == "/grpc.health.v1.Health/Watch" ||
         path == "/inference.GRPCInferenceService/ServerLive" ||
         path == "/inference.GRPCInferenceService/ServerReady";
}

bool TokenAuthenticator::IsHealthHttpPath(std::string_view path) {
  return path == "/v2/health/live" || path == "/v2/health/ready";
}

}  // namespace graphserve
