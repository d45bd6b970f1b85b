#include "grpc_security.h"

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <string_view>

namespace graphserve {
namespace {

std::string_view View(grpc::string_ref text) { return {text.data(), text.size()}; }

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
