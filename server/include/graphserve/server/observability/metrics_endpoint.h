#pragma once
// The HTTP endpoint that serves ServerMetrics at GET /metrics in the Prometheus text format, on a port
// apart from gRPC's, through graphserve's HttpServer (libmicrohttpd).
//
// Why not prometheus-cpp's Exposer: it runs civetweb, which starts its threads with a fixed 100 KiB
// stack, and glibc refuses such threads (EINVAL) once the process's static TLS is larger than that.
// libtorch can bring more than that (Debian's 1.13 build brought about 106 KiB, OpenBLAS alone 60 KiB),
// and then the Exposer throws "null context when constructing CivetServer". HttpServer's threads
// have the default stack.
//
// A scrape takes well under a millisecond; a client that stalls is dropped after kClientTimeout
// without holding up other scrapes.
// Not thread-safe: create and destroy from one controlling thread; scrapes run on the endpoint's threads.
#include <chrono>
#include <memory>
#include <string>

#include "graphserve/engine/status.h"

namespace graphserve {

class HttpServer;
class HttpTls;
class ServerMetrics;
class TokenAuthenticator;

class MetricsEndpoint {
 public:
  // How long an idle or stalled client may hold its connection.
  static constexpr std::chrono::seconds kClientTimeout{5};

  // Listens on `address` ("HOST:PORT", HOST an IPv4 or IPv6 address or a name, "[::]" bracketed; port
  // 0 picks a free one) and serves `metrics`, which must outlive the endpoint. UNAVAILABLE naming
  // --metrics-address when it cannot listen there. With `tls`, HTTPS; with `auth`, every scrape needs
  // a token (both outlive the endpoint).
  static Status Start(const std::string& address, const ServerMetrics* metrics,
                      std::unique_ptr<MetricsEndpoint>* endpoint, std::shared_ptr<HttpTls> tls = nullptr,
                      const TokenAuthenticator* auth = nullptr);
  // Stops listening; a scrape in progress finishes first.
  ~MetricsEndpoint();

  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // The port bound (useful with port 0).
  int port() const;

 private:
  explicit MetricsEndpoint(std::unique_ptr<HttpServer> server);

  std::unique_ptr<HttpServer> server_;
};

}  // namespace graphserve
