#pragma once
// What one HTTP client, or all of them together, may hold of an HttpServer: memory for bodies and
// answers, time for each phase of a request, connections per address. Shared by the HTTP server
// (which enforces it), the REST endpoint and the process's options (which choose it). A zero turns
// that bound off.
#include <chrono>
#include <cstdint>

namespace graphserve {

struct HttpClientBounds {
  // Bytes of request bodies being received or waiting for their answer, plus answers not yet sent,
  // over all connections. A body that would pass it is answered 503 without being buffered.
  uint64_t max_buffered_bytes = 0;
  // The same, for one client address's connections together: one client cannot take the whole
  // budget and leave the others 503.
  uint64_t max_buffered_bytes_per_client = 0;
  // From a connection's opening (its first request) or from the request line (a later request on a
  // kept-alive connection) to the end of the headers.
  std::chrono::milliseconds header_timeout{0};
  // From the end of the headers to the end of the body.
  std::chrono::milliseconds body_timeout{0};
  // From an answer's last byte to the next request's line on a kept-alive connection.
  std::chrono::milliseconds keep_alive_timeout{0};
  // From an answer being ready to its last byte written: a client that stops reading loses it.
  std::chrono::milliseconds send_timeout{0};
  // Connections one client address may have open at once; more are closed on arrival.
  unsigned max_connections_per_client = 0;
};

// Why the server closed a connection (or refused one) to hold a bound: what metrics count.
enum class HttpClosure {
  kHeaderTimeout,     // its headers took longer than header_timeout
  kBodyTimeout,       // its body took longer than body_timeout
  kKeepAliveTimeout,  // no next request within keep_alive_timeout
  kSendTimeout,       // its answer was not read within send_timeout: dropped unsent
  kConnectionCap,     // it arrived while the server's connection cap was reached
};

// "header_timeout", "body_timeout", "keep_alive_timeout", "send_timeout", "connection_cap".
inline const char* HttpClosureName(HttpClosure closure) {
  switch (closure) {
    case HttpClosure::kHeaderTimeout:
      return "header_timeout";
    case HttpClosure::kBodyTimeout:
      return "body_timeout";
    case HttpClosure::kKeepAliveTimeout:
      return "keep_alive_timeout";
    case HttpClosure::kSendTimeout:
      return "send_timeout";
    case HttpClosure::kConnectionCap:
      break;
  }
  return "connection_cap";
}

// The REST port's defaults; docs/security.md gives the reason for each figure.
inline HttpClientBounds RestClientBounds() {
  HttpClientBounds bounds;
  bounds.max_buffered_bytes = uint64_t{1} << 30;
  bounds.max_buffered_bytes_per_client = uint64_t{256} << 20;
  bounds.header_timeout = std::chrono::seconds(10);
  bounds.body_timeout = std::chrono::seconds(60);
  bounds.keep_alive_timeout = std::chrono::seconds(30);
  bounds.send_timeout = std::chrono::seconds(60);
  bounds.max_connections_per_client = 256;
  return bounds;
}

}  // namespace graphserve
