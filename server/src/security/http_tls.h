#pragma once
// The certificate, key and client CAs that graphserve's HTTP ports (REST, /metrics) present and
// trust, read from TlsOptions' files and reloadable while the ports serve.
//
// libmicrohttpd runs TLS on GnuTLS and fixes its credentials when the daemon starts; HttpServer
// instead binds each new connection's GnuTLS session to the credentials current at that moment
// (Attach), so a reload changes what new handshakes see and leaves connections already open alone.
// Each connection holds its credentials until it closes, so a reload frees nothing in use.
// With client_ca_file (mutual TLS) a connection without a certificate that chains to those CAs fails
// its handshake.
//
// Thread-safe: any method may be called from any thread.
#include <chrono>
#include <memory>
#include <string>

#include "graphserve/engine/status.h"
#include "graphserve/server/common/thread_annotations.h"
#include "graphserve/server/security/auth.h"

struct gnutls_session_int;

namespace graphserve {

class HttpTls {
 public:
  // What a connection holds; opaque outside http_tls.cpp.
  struct Credentials;

  // Reads and checks the files; INVALID_ARGUMENT naming the flag of a file GnuTLS refuses.
  static Status Load(const TlsOptions& options, std::shared_ptr<HttpTls>* tls);
  ~HttpTls();

  // Re-reads the files when one changed since the last read (or always, with `force`: SIGHUP). On an
  // error keeps the credentials it had and returns the error.
  Status Reload(bool force) EXCLUDES(mutex_);

  // Binds `session` (a new server-side GnuTLS session) to the current credentials, first reloading
  // them if the reload interval has passed; returns what the connection must keep until it closes.
  std::shared_ptr<const Credentials> Attach(gnutls_session_int* session) EXCLUDES(mutex_);

  // The PEM texts first read, which libmicrohttpd needs to start its daemon.
  const std::string& initial_cert_pem() const { return initial_cert_pem_; }
  const std::string& initial_key_pem() const { return initial_key_pem_; }
  bool mutual() const { return !options_.client_ca_file.empty(); }

 private:
  explicit HttpTls(TlsOptions options);
  // The files' modification times and sizes, to notice a change without reading them.
  std::string Fingerprint() const;

  const TlsOptions options_;
  std::string initial_cert_pem_;
  std::string initial_key_pem_;
  Mutex mutex_;
  std::shared_ptr<const Credentials> current_ GUARDED_BY(mutex_);
  std::string fingerprint_ GUARDED_BY(mutex_);
  std::chrono::steady_clock::time_point next_check_ GUARDED_BY(mutex_);
};

}  // namespace graphserve
