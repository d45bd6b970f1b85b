#pragma once
// The gRPC port's credentials: TLS (mutual with a client CA) from TlsOptions' files, and the token
// check of auth.h.
//
// TLS: gRPC's FileWatcherCertificateProvider re-reads the files every TlsOptions::reload_interval_s
// (gRPC 1.51 offers no way to force a re-read, so SIGHUP does not shorten it); new handshakes see a
// changed certificate, open connections keep theirs.
// Tokens: an AuthMetadataProcessor, which gRPC runs on a call's headers before its request message
// is read, answers UNAUTHENTICATED to a call without an accepted token; health probes pass unless
// AuthOptions::protect_health. It works with plaintext credentials too. Calls that arrive through
// the in-process channel (the REST endpoint's, already checked) do not pass through it.
#include <memory>

#include "graphserve/engine/status.h"
#include "graphserve/server/security/auth.h"

namespace grpc {
class ServerCredentials;
}

namespace graphserve {

// `auth` may be null (no token needed); it must outlive the server.
Status MakeGrpcServerCredentials(const TlsOptions& tls, const TokenAuthenticator* auth,
                                 std::shared_ptr<grpc::ServerCredentials>* credentials);

}  // namespace graphserve
