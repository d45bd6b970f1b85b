#include "graphserve/server/metrics_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "graphserve/server/metrics.h"

namespace graphserve {
namespace {

// Requests are a request line and a few headers; anything longer is not a scrape.
constexpr size_t kMaxRequestBytes = 8192;

// "HOST:PORT" → host (brackets of an IPv6 literal removed; empty = every interface) and port.
bool SplitAddress(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return port->find_first_not_of("0123456789") == std::string::npos;
}

// A listening TCP socket on `address`, or -1 with `error` set.
int Listen(const std::string& address, std::string* error) {
  std::string host, port;
  if (!SplitAddress(address, &host, &port)) {
    *error = "expected HOST:PORT";
    return -1;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int resolved = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
  if (resolved != 0) {
    *error = gai_strerror(resolved);
    return -1;
  }
  int fd = -1;
  for (addrinfo* candidate = found; candidate != nullptr; candidate = candidate->ai_next) {
    fd = socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC, candidate->ai_protocol);
    if (fd < 0) continue;
    // A restarted server may bind at once, although its old connections linger in TIME_WAIT; a port
    // another process listens on still fails.
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 && listen(fd, 16) == 0) break;
    *error = std::strerror(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) return 0;
  if (bound.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

using SteadyTime = std::chrono::steady_clock;

// Waits until `fd` is ready for `events` or `deadline` passes.
bool WaitFor(int fd, short events, SteadyTime::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyTime::now());
  if (left.count() <= 0) return false;
  pollfd entry{fd, events, 0};
  int ready;
  do {
    ready = poll(&entry, 1, static_cast<int>(left.count()));
  } while (ready < 0 && errno == EINTR);
  return ready > 0;
}

// Reads up to the blank line that ends the request headers; false when the client sent no complete
// request in time.
bool ReadRequest(int fd, SteadyTime::time_point deadline, std::string* request) {
  char buffer[1024];
  while (request->find("\r\n\r\n") == std::string::npos) {
    if (request->size() > kMaxRequestBytes || !WaitFor(fd, POLLIN, deadline)) return false;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    request->append(buffer, static_cast<size_t>(n));
  }
  return true;
}

void WriteAll(int fd, const std::string& data, SteadyTime::time_point deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    if (!WaitFor(fd, POLLOUT, deadline)) return;
    // MSG_NOSIGNAL: a client that went away must not raise SIGPIPE in the server.
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

std::string Response(const std::string& status, const std::string& content_type, const std::string& body,
                     bool include_body, const std::string& extra_headers = "") {
  std::string response = "HTTP/1.1 " + status + "\r\nContent-Type: " + content_type +
                         "\r\nContent-Length: " + std::to_string(body.size()) +
                         "\r\nConnection: close\r\n" + extra_headers + "\r\n";
  if (include_body) response += body;
  return response;
}

}  // namespace

Status MetricsEndpoint::Start(const std::string& address, const ServerMetrics* metrics,
                              std::unique_ptr<MetricsEndpoint>* endpoint) {
  std::string error;
  const int listen_fd = Listen(address, &error);
  if (listen_fd < 0) return Unavailable("--metrics-address: cannot listen on " + address + ": " + error);
  const int wake_fd = eventfd(0, EFD_CLOEXEC);
  if (wake_fd < 0) {
    close(listen_fd);
    return Unavailable(std::string("--metrics-address: eventfd: ") + std::strerror(errno));
  }
  endpoint->reset(new MetricsEndpoint(metrics, listen_fd, wake_fd, BoundPort(listen_fd)));
  return Status::Ok();
}

MetricsEndpoint::MetricsEndpoint(const ServerMetrics* metrics, int listen_fd, int wake_fd, int port)
    : metrics_(metrics), listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port) {
  thread_ = std::thread([this] { Serve(); });
}

MetricsEndpoint::~MetricsEndpoint() {
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) != sizeof(one)) {
    spdlog::error("metrics endpoint: cannot wake its thread: {}", std::strerror(errno));
  }
  thread_.join();
  close(listen_fd_);
  close(wake_fd_);
}

void MetricsEndpoint::Serve() {
  while (true) {
    pollfd watched[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(watched, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("metrics endpoint: poll failed: {}; /metrics is no longer served",
                    std::strerror(errno));
      return;
    }
    if (watched[1].revents != 0) return;
    if ((watched[0].revents & POLLIN) == 0) continue;
    const int client_fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client_fd < 0) continue;  // the client gave up already, or descriptors ran out for a moment
    Answer(client_fd);
    close(client_fd);
  }
}

void MetricsEndpoint::Answer(int client_fd) const {
  const SteadyTime::time_point deadline = SteadyTime::now() + kClientTimeout;
  std::string request;
  if (!ReadRequest(client_fd, deadline, &request)) return;

  // Request line: METHOD SP TARGET SP VERSION.
  const size_t method_end = request.find(' ');
  const size_t target_end = request.find(' ', method_end + 1);
  const size_t line_end = request.find("\r\n");
  if (method_end == std::string::npos || target_end == std::string::npos || target_end > line_end) {
    WriteAll(client_fd, Response("400 Bad Request", "text/plain", "bad request line\n", true), deadline);
    return;
  }
  const std::string method = request.substr(0, method_end);
  std::string target = request.substr(method_end + 1, target_end - method_end - 1);
  target = target.substr(0, target.find('?'));
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    WriteAll(
        client_fd,
        Response("405 Method Not Allowed", "text/plain", "only GET\n", true, "Allow: GET, HEAD\r\n"),
        deadline);
    return;
  }
  if (target != "/metrics") {
    WriteAll(client_fd, Response("404 Not Found", "text/plain", "graphserve serves /metrics\n", !head),
             deadline);
    return;
  }
  WriteAll(
      client_fd,
      Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", metrics_->TextExposition(), !head),
      deadline);
}

}  // namespace graphserve
