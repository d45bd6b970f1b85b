#pragma once
// Who may call graphserve: TLS settings of the listening ports and the shared-secret tokens every
// endpoint checks before it reads a request's body.
//
// Tokens come from a file (--auth-token-file) and/or the environment (GRAPHSERVE_AUTH_TOKEN), never
// from a flag's value, which `ps` shows to every user of the machine. A client presents one as
// `authorization: Bearer TOKEN` (what tritonclient's `headers=` and most HTTP tools send) or as
// `x-api-key: TOKEN`. Health probes (grpc.health.v1, ServerLive/ServerReady, /v2/health/*) stay open
// unless AuthOptions::protect_health says otherwise, so that orchestrators need no secret.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "graphserve/engine/status.h"
#include "graphserve/server/common/thread_annotations.h"

namespace graphserve {

// The certificate files of the TLS ports. Empty cert_file: plaintext.
struct TlsOptions {
  std::string cert_file;       // PEM: the server's certificate, then any intermediates
  std::string key_file;        // PEM: its private key
  std::string client_ca_file;  // PEM: set => mutual TLS, client certificates required and verified
  // How often the files are checked for changes (SIGHUP also reloads the HTTP ports at once).
  int reload_interval_s = 60;

  bool enabled() const { return !cert_file.empty(); }
};

// Whether a presented secret (token, restricted-API header) equals the accepted one, in a time that
// depends on the accepted one's length only, never on where the two differ.
bool SameSecret(std::string_view presented, std::string_view accepted);

// A whole file, or INVALID_ARGUMENT "FLAG: cannot read PATH".
Status ReadFileOfFlag(const std::string& flag, const std::string& path, std::string* text);

// Consistent flags and readable PEM files, or INVALID_ARGUMENT naming the flag at fault.
Status ValidateTlsOptions(const TlsOptions& tls);

struct AuthOptions {
  // One token per line ('#' comments and blank lines skipped); empty: none.
  std::string token_file;
  // GRAPHSERVE_AUTH_TOKEN's value: tokens separated by commas or newlines; empty: none.
  std::string env_tokens;
  // Health probes need a token too.
  bool protect_health = false;
  // GET /metrics needs a token too (Prometheus can send one: `authorization` in its scrape config).
  bool protect_metrics = false;

  bool enabled() const { return !token_file.empty() || !env_tokens.empty(); }
};

// Checks presented tokens against the accepted ones.
// Thread-safe: any method may be called from any thread; Reload swaps the tokens atomically.
class TokenAuthenticator {
 public:
  // Called once per refused request with the endpoint ("grpc", "http", "metrics"), e.g. to count it.
  using RefusalCounter = std::function<void(const char* endpoint)>;

  // Reads the tokens; INVALID_ARGUMENT naming --auth-token-file or GRAPHSERVE_AUTH_TOKEN when the
  // file cannot be read or no token results.
  static Status Create(const AuthOptions& options, RefusalCounter count_refusal,
                       std::unique_ptr<TokenAuthenticator>* authenticator);

  // Re-reads the token file (for SIGHUP); on an error keeps the tokens it had.
  Status Reload() EXCLUDES(mutex_);

  // Whether `authorization` ("Bearer TOKEN") or `api_key` holds an accepted token; either may be
  // empty. Takes the same time whichever byte of a wrong token differs.
  bool Accepts(std::string_view authorization, std::string_view api_key) const EXCLUDES(mutex_);

  const AuthOptions& options() const { return options_; }

  // Counts a refusal and logs it, rate-limited as LogKind::kAuthFailure (log_limiter.h: a flood of
  // bad calls must not flood the log); never logs what was presented.
  void Refused(const char* endpoint, std::string_view peer) const;

  // Whether a gRPC method (":path", "/package.Service/Method") or an HTTP path is a health probe.
  static bool IsHealthGrpcMethod(std::string_view path);
  static bool IsHealthHttpPath(std::string_view path);

 private:
  TokenAuthenticator(AuthOptions options, RefusalCounter count_refusal);
  Status Read(std::vector<std::string>* tokens) const;

  const AuthOptions options_;
  const RefusalCounter count_refusal_;
  mutable Mutex mutex_;
  std::shared_ptr<const std::vector<std::string>> tokens_ GUARDED_BY(mutex_);
};

}  // namespace graphserve
