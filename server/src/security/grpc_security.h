#pragma once
// The gRPC port's credentials: TLS (mutual with a client CA) from TlsOptions' files, and the token
// check of auth.h; and its API gate (GrpcApiGate, below), which the service's handlers ask.
//
// TLS: gRPC's FileWatcherCertificateProvider re-reads the files every TlsOptions::reload_interval_s
// (gRPC 1.51 offers no way to force a re-read, so SIGHUP does not shorten it); new handshakes see a
// changed certificate, open connections keep theirs.
// Tokens: an AuthMetadataProcessor, which gRPC runs on a call's headers before its request message
// is read, answers UNAUTHENTICATED to a call without an accepted token; health probes pass unless
// AuthOptions::protect_health. It works with plaintext credentials too. Calls that arrive through
// the in-process channel (the REST endpoint's, already checked) do not pass through it.
#include <memory>
#include <string>

#include "graphserve/engine/status.h"
#include "graphserve/server/security/api_groups.h"
#include "graphserve/server/security/auth.h"

namespace grpc {
class ClientContext;
class ServerContextBase;
class ServerCredentials;
class Status;
}  // namespace grpc

namespace graphserve {

// The gRPC port's API gate (api_groups.h), asked by each handler of the gRPC service with its
// method's group. The REST endpoint reaches the same handlers through an in-process channel after
// its own gate admitted the call: it marks those calls with a secret made at start-up (random, never
// logged, unknown outside the process), and a marked call passes.
// Thread safety: immutable once built.
class GrpcApiGate {
 public:
  // `gate` says who may call what on the gRPC port.
  explicit GrpcApiGate(ApiGate gate);

  // OK, or the refusal: UNAVAILABLE naming the header, as Triton answers a restricted call without
  // it, or PERMISSION_DENIED for a closed group.
  grpc::Status Admit(const grpc::ServerContextBase& context, ApiGroup group) const;
  // For the REST endpoint's in-process calls: lets them past Admit.
  void MarkInProcess(grpc::ClientContext* context) const;
  // ApiGate::Describe's.
  std::string Describe() const { return gate_.Describe(); }

 private:
  const ApiGate gate_;
  std::string in_process_secret_;
};

// `auth` may be null (no token needed); it must outlive the server.
Status MakeGrpcServerCredentials(const TlsOptions& tls, const TokenAuthenticator* auth,
                                 std::shared_ptr<grpc::ServerCredentials>* credentials);

}  // namespace graphserve
