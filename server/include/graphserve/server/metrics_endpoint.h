#pragma once
// The HTTP endpoint that serves ServerMetrics at GET /metrics in the Prometheus text format, on a port
// apart from gRPC's.
//
// Why not prometheus-cpp's Exposer: it runs civetweb, which starts its threads with a fixed 100 KiB
// stack, and glibc refuses such threads (EINVAL) once the process's static TLS is larger than that.
// libtorch can bring more than that (Debian's 1.13 build brought about 106 KiB, OpenBLAS alone 60 KiB),
// and then the Exposer throws "null context when constructing CivetServer". This endpoint serves prometheus-cpp's own text
// serialization from one thread with the default stack.
//
// One connection at a time, each answered and closed (HTTP/1.1 with Connection: close): a scrape takes
// well under a millisecond, and a client that stalls is dropped after kClientTimeout.
// Not thread-safe: create and destroy from one controlling thread; scrapes run on the endpoint's thread.
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "graphserve/engine/status.h"

namespace graphserve {

class ServerMetrics;

class MetricsEndpoint {
 public:
  // How long one client may take to send its request and read the answer.
  static constexpr std::chrono::seconds kClientTimeout{5};

  // Listens on `address` ("HOST:PORT", HOST an IPv4 or IPv6 address or a name, "[::]" bracketed; port
  // 0 picks a free one) and serves `metrics`, which must outlive the endpoint. UNAVAILABLE naming
  // --metrics-address when it cannot listen there.
  static Status Start(const std::string& address, const ServerMetrics* metrics,
                      std::unique_ptr<MetricsEndpoint>* endpoint);
  // Stops listening; a scrape in progress finishes first.
  ~MetricsEndpoint();

  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // The port bound (useful with port 0).
  int port() const { return port_; }

 private:
  MetricsEndpoint(const ServerMetrics* metrics, int listen_fd, int wake_fd, int port);
  void Serve();
  void Answer(int client_fd) const;

  const ServerMetrics* const metrics_;
  const int listen_fd_;
  const int wake_fd_;  // an eventfd: the destructor writes it to end Serve
  const int port_;
  std::thread thread_;
};

}  // namespace graphserve
