#pragma once
// The HTTP endpoint that serves ServerMetrics at GET /metrics in the Prometheus text format, on a port
// apart from gRPC's, on libmicrohttpd, with bounds that keep scrapes served while hostile clients
// hold connections to the port (issue #43.3).
//
// Why not prometheus-cpp's Exposer: it runs civetweb, which starts its threads with a fixed 100 KiB
// stack, and glibc refuses such threads (EINVAL) once the process's static TLS is larger than that.
// libtorch can bring more than that (Debian's 1.13 build brought about 106 KiB, OpenBLAS alone 60 KiB),
// and then the Exposer throws "null context when constructing CivetServer".
//
// Why not HttpServer (the REST port's): libmicrohttpd accepts on its own and knows no deadline for a
// whole request, so 64 connections trickling a header byte a second held every slot for good and
// scrapes waited in the listen backlog. This endpoint accepts connections itself, keeps each in a
// ConnectionGate (connection_gate.h: a deadline per request and per answer, a cap per port and per
// client address, a new connection taking the place of an idle one) and hands those it keeps to
// libmicrohttpd (MHD_add_connection), which speaks HTTP and TLS. Connections it cannot keep get a 503
// (plaintext) or are closed at once, never left in the backlog; it keeps a spare descriptor to do so
// when the process has none left, and takes descriptors up to MetricsHighestDescriptor
// (descriptor_budget.h): half of the process's reserve is its own, so that a scrape still gets one
// when gRPC's and REST's connections have taken theirs.
//
// Not thread-safe: create and destroy from one controlling thread; scrapes run on the endpoint's threads.
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "graphserve/engine/status.h"

struct MHD_Daemon;

namespace graphserve {

class ConnectionGate;
class HttpTls;
class ServerMetrics;
class TokenAuthenticator;

struct MetricsEndpointOptions {
  // HOST:PORT (HOST an IPv4 or IPv6 address or a name, "[::]" bracketed; port 0 picks a free one).
  std::string address;
  // Connections held at once (--metrics-max-connections); lowered to an eighth of what the
  // process's descriptor reserve leaves (MetricsConnectionCap), which the start-up log says.
  int max_connections = 64;
  // Of them, from one client address (--metrics-max-connections-per-address).
  int max_connections_per_address = 8;
  // How long a connection has to send each request whole (from its opening, or from its previous
  // answer), and to read each answer (--metrics-client-timeout-s).
  std::chrono::milliseconds client_timeout{5000};
  // HTTPS with these credentials; null: plaintext.
  std::shared_ptr<HttpTls> tls;
  // Set: every scrape needs an accepted token, refused with 401 and counted as "metrics".
  const TokenAuthenticator* auth = nullptr;
};

class MetricsEndpoint {
 public:
  // How often deadlines are checked: a connection outlasts client_timeout by at most this.
  static constexpr std::chrono::milliseconds kDeadlineCheck{100};

  // Listens on options.address and serves `metrics`, which must outlive the endpoint (as must tls and
  // auth); refusals and closes are counted in it. UNAVAILABLE naming --metrics-address when it cannot
  // listen there; INVALID_ARGUMENT naming the flag of a bound below 1.
  static Status Start(const MetricsEndpointOptions& options, ServerMetrics* metrics,
                      std::unique_ptr<MetricsEndpoint>* endpoint);
  // Stops listening and closes every connection; a scrape in progress finishes first.
  ~MetricsEndpoint();

  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // The port bound (useful with port 0).
  int port() const { return port_; }
  // The connection cap in force (options.max_connections, or less under a low open-file limit).
  int max_connections() const { return max_connections_; }

  // libmicrohttpd's callbacks (metrics_endpoint.cpp).
  struct Callbacks;

 private:
  MetricsEndpoint(const MetricsEndpointOptions& options, ServerMetrics* metrics, int listen_fd, int wake_fd);
  void AcceptLoop();
  // Whether the connection on `fd` from `address` is kept (maybe in place of another, dropped);
  // closed and counted when not.
  bool Admit(int fd, const std::string& address);
  // Closes a connection it does not keep, counted under `reason`.
  void Refuse(int fd, const char* reason);
  // accept failed for want of descriptors: the spare one makes room to refuse one waiting connection.
  void ShedOne();

  const MetricsEndpointOptions options_;
  ServerMetrics* const metrics_;
  int listen_fd_;
  const int wake_fd_;  // an eventfd the destructor writes to
  int port_ = 0;
  int max_connections_ = 0;
  int highest_connection_fd_ = 0;
  int spare_fd_ = -1;
  std::unique_ptr<ConnectionGate> gate_;
  MHD_Daemon* daemon_ = nullptr;
  std::thread acceptor_;
};

}  // namespace graphserve
