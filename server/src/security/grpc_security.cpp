#include "grpc_security.h"

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <gnutls/crypto.h>
#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>

#include <array>
#include <string_view>

namespace graphserve {
namespace {

std::string_view View(grpc::string_ref text) { return {text.data(), text.size()}; }

// Not a name a client would pick for a restricted key ("triton-grpc-protocol-" keys are theirs).
constexpr const char* kInProcessKey = "graphserve-in-process";

class TokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenProcessor(const TokenAuthenticator* auth) : auth_(auth) {}

  // A few comparisons: no need for gRPC to hand it to another thread.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* context, OutputMetadata* consumed,
                       OutputMetadata*) override {
    std::string_view path;
    std::string_view authorization;
    std::string_view api_key;
    for (const auto& [key, value] : metadata) {
      const std::string_view name = View(key);
      if (name == ":path") path = View(value);
      else if (name == "authorization") authorization = View(value);
      else if (name == "x-api-key") api_key = View(value);
    }
    // The secret need not travel further into the server (and cannot end up in a log there).
    if (!authorization.empty()) consumed->emplace("authorization", std::string(authorization));
    if (!api_key.empty()) consumed->emplace("x-api-key", std::string(api_key));
    if (!auth_->options().protect_health && TokenAuthenticator::IsHealthGrpcMethod(path)) return grpc::Status::OK;
    if (auth_->Accepts(authorization, api_key)) return grpc::Status::OK;
    // gRPC tells a processor no address; a client certificate's name is the one thing to go by.
    std::string peer = "a client without a certificate";
    if (context != nullptr) {
      const std::vector<grpc::string_ref> names = context->FindPropertyValues("x509_common_name");
      if (!names.empty()) peer = "CN=" + std::string(names[0].data(), names[0].size());
    }
    auth_->Refused("grpc", peer);
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "a token is required: metadata authorization: Bearer TOKEN");
  }

 private:
  const TokenAuthenticator* auth_;
};

}  // namespace

GrpcApiGate::GrpcApiGate(ApiGate gate) : gate_(std::move(gate)) {
  if (gate_.open()) return;  // Admit lets every call pass: no mark to check
  std::array<unsigned char, 32> random{};
  // A failure leaves the secret empty: REST's calls are then refused like anyone's, never let in.
  if (gnutls_rnd(GNUTLS_RND_KEY, random.data(), random.size()) != 0) return;
  constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char byte : random) {
    in_process_secret_ += kHex[byte >> 4];
    in_process_secret_ += kHex[byte & 15];
  }
}

grpc::Status GrpcApiGate::Admit(const grpc::ServerContextBase& context, ApiGroup group) const {
  if (gate_.open()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  const auto lookup = [&metadata](const std::string& name) -> std::optional<std::string_view> {
    const auto found = metadata.find(name);
    if (found == metadata.end()) return std::nullopt;
    return View(found->second);
  };
  if (!in_process_secret_.empty()) {
    const std::optional<std::string_view> mark = lookup(kInProcessKey);
    if (mark && SameSecret(*mark, in_process_secret_)) return grpc::Status::OK;
  }
  const ApiGate::Verdict verdict = gate_.Admit(group, lookup);
  switch (verdict) {
    case ApiGate::Verdict::kAdmitted:
      return grpc::Status::OK;
    case ApiGate::Verdict::kRestricted:
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, gate_.RefusalMessage(group, verdict));
    case ApiGate::Verdict::kClosed:
      break;
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, gate_.RefusalMessage(group, verdict));
}

void GrpcApiGate::MarkInProcess(grpc::ClientContext* context) const {
  if (!in_process_secret_.empty()) context->AddMetadata(kInProcessKey, in_process_secret_);
}

Status MakeGrpcServerCredentials(const TlsOptions& tls, const TokenAuthenticator* auth,
                                 std::shared_ptr<grpc::ServerCredentials>* credentials) {
  std::shared_ptr<grpc::ServerCredentials> made;
  if (!tls.enabled()) {
    made = grpc::InsecureServerCredentials();
  } else {
    auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        tls.key_file, tls.cert_file, tls.client_ca_file, static_cast<unsigned>(tls.reload_interval_s));
    grpc::experimental::TlsServerCredentialsOptions options(provider);
    options.watch_identity_key_cert_pairs();
    if (!tls.client_ca_file.empty()) {
      options.watch_root_certs();
      options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    }
    made = grpc::experimental::TlsServerCredentials(options);
    if (made == nullptr) return InvalidArgument("--tls-cert-file: gRPC refused the TLS settings");
  }
  if (auth != nullptr) made->SetAuthMetadataProcessor(std::make_shared<TokenProcessor>(auth));
  *credentials = std::move(made);
  return Status::Ok();
}

}  // namespace graphserve
