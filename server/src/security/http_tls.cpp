#include "http_tls.h"

#include <gnutls/gnutls.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>


namespace graphserve {

struct HttpTls::Credentials {
  gnutls_certificate_credentials_t gnutls = nullptr;
  ~Credentials() {
    if (gnutls != nullptr) gnutls_certificate_free_credentials(gnutls);
  }
};

namespace {

gnutls_datum_t Datum(const std::string& text) {
  return {reinterpret_cast<unsigned char*>(const_cast<char*>(text.data())), static_cast<unsigned>(text.size())};
}

// Reads the files into fresh GnuTLS credentials.
Status Build(const TlsOptions& options, std::shared_ptr<HttpTls::Credentials>* built, std::string* cert_pem,
             std::string* key_pem) {
  Status status = ReadFileOfFlag("--tls-cert-file", options.cert_file, cert_pem);
  if (status.ok()) status = ReadFileOfFlag("--tls-key-file", options.key_file, key_pem);
  std::string ca_pem;
  if (status.ok() && !options.client_ca_file.empty()) {
    status = ReadFileOfFlag("--tls-client-ca-file", options.client_ca_file, &ca_pem);
  }
  if (!status.ok()) return status;
  auto credentials = std::make_shared<HttpTls::Credentials>();
  int error = gnutls_certificate_allocate_credentials(&credentials->gnutls);
  if (error < 0) return Internal(std::string("GnuTLS: ") + gnutls_strerror(error));
  const gnutls_datum_t cert = Datum(*cert_pem);
  const gnutls_datum_t key = Datum(*key_pem);
  error = gnutls_certificate_set_x509_key_mem2(credentials->gnutls, &cert, &key, GNUTLS_X509_FMT_PEM, nullptr, 0);
  if (error < 0) {
    return InvalidArgument("--tls-cert-file/--tls-key-file: " + options.cert_file + " and " + options.key_file +
                           ": " + gnutls_strerror(error));
  }
  if (!ca_pem.empty()) {
    const gnutls_datum_t ca = Datum(ca_pem);
    error = gnutls_certificate_set_x509_trust_mem(credentials->gnutls, &ca, GNUTLS_X509_FMT_PEM);
    if (error <= 0) {
      return InvalidArgument("--tls-client-ca-file: " + options.client_ca_file + ": " +
                             (error < 0 ? gnutls_strerror(error) : "no certificate"));
    }
  }
  *built = std::move(credentials);
  return Status::Ok();
}

}  // namespace

HttpTls::HttpTls(TlsOptions options) : options_(std::move(options)) {}
HttpTls::~HttpTls() = default;

Status HttpTls::Load(const TlsOptions& options, std::shared_ptr<HttpTls>* tls) {
  std::shared_ptr<HttpTls> loaded(new HttpTls(options));
  std::shared_ptr<Credentials> credentials;
  const std::string fingerprint = loaded->Fingerprint();
  const Status status = Build(options, &credentials, &loaded->initial_cert_pem_, &loaded->initial_key_pem_);
  if (!status.ok()) return status;
  {
    MutexLock lock(&loaded->mutex_);
    loaded->current_ = std::move(credentials);
    loaded->fingerprint_ = fingerprint;
    loaded->next_check_ = std::chrono::steady_clock::now() + std::chrono::seconds(options.reload_interval_s);
  }
  *tls = std::move(loaded);
  return Status::Ok();
}

std::string HttpTls::Fingerprint() const {
  std::string fingerprint;
  for (const std::string* path : {&options_.cert_file, &options_.key_file, &options_.client_ca_file}) {
    struct stat info {};
    if (path->empty() || stat(path->c_str(), &info) != 0) {
      fingerprint += "-;";
      continue;
    }
    fingerprint += std::to_string(info.st_mtim.tv_sec) + "." + std::to_string(info.st_mtim.tv_nsec) + ":" +
                   std::to_string(info.st_size) + ":" + std::to_string(info.st_ino) + ";";
  }
  return fingerprint;
}

Status HttpTls::Reload(bool force) {
  const std::string fingerprint = Fingerprint();
  {
    MutexLock lock(&mutex_);
    next_check_ = std::chrono::steady_clock::now() + std::chrono::seconds(options_.reload_interval_s);
    if (!force && fingerprint == fingerprint_) return Status::Ok();
    // Claimed now, so that connections arriving meanwhile do not all start the same reload.
    fingerprint_ = fingerprint;
  }
  std::shared_ptr<Credentials> credentials;
  std::string cert_pem;
  std::string key_pem;
  const Status status = Build(options_, &credentials, &cert_pem, &key_pem);
  if (!status.ok()) {
    spdlog::error("HTTP TLS certificates not reloaded, still serving the previous ones: {}", status.message());
    return status;
  }
  MutexLock lock(&mutex_);
  current_ = std::move(credentials);
  spdlog::info("HTTP TLS certificates reloaded from {}", options_.cert_file);
  return Status::Ok();
}

std::shared_ptr<const HttpTls::Credentials> HttpTls::Attach(gnutls_session_int* session) {
  bool due = false;
  {
    MutexLock lock(&mutex_);
    due = std::chrono::steady_clock::now() >= next_check_;
  }
  if (due) Reload(/*force=*/false);  // an error is logged, and the previous credentials stay
  std::shared_ptr<const Credentials> credentials;
  {
    MutexLock lock(&mutex_);
    credentials = current_;
  }
  gnutls_credentials_set(session, GNUTLS_CRD_CERTIFICATE, credentials->gnutls);
  if (mutual()) {
    // Verified during the handshake against client_ca_file: no certificate, no connection.
    gnutls_certificate_server_set_request(session, GNUTLS_CERT_REQUIRE);
    gnutls_session_set_verify_cert(session, nullptr, 0);
  }
  return credentials;
}

}  // namespace graphserve
