#include "graphserve/server/observability/metrics_endpoint.h"

#include <fcntl.h>
#include <microhttpd.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstring>

#include "common/connection_gate.h"
#include "common/descriptor_budget.h"
#include "common/listen_socket.h"
#include "common/thread_name.h"
#include "graphserve/server/common/clock.h"
#include "graphserve/server/http/rest_codec.h"
#include "graphserve/server/observability/log_limiter.h"
#include "graphserve/server/observability/metrics.h"
#include "graphserve/server/security/auth.h"
#include "security/http_tls.h"

namespace graphserve {
namespace {

// What a plaintext connection past the caps reads before its close (a TLS one is closed unanswered).
constexpr char kTooManyConnections[] =
    "HTTP/1.1 503 Service Unavailable\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "Retry-After: 1\r\n"
    "Connection: close\r\n"
    "Content-Length: 40\r\n"
    "\r\n"
    "/metrics: too many connections are open\n";

// Accepts taken per wake-up before the deadlines are checked again, so a flood cannot starve them.
constexpr int kAcceptsPerTurn = 256;
// How long accepting pauses while the sockets the endpoint dropped close.
constexpr std::chrono::milliseconds kClosingWait{2};

int64_t NowMicros() { return SteadyClock().NowMicros(); }

int ConnectionFd(MHD_Connection* connection) {
  const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
  return info == nullptr ? -1 : info->connect_fd;
}

}  // namespace

struct MetricsEndpoint::Callbacks {
  static MHD_Result Queue(MHD_Connection* connection, int status, const char* content_type,
                          const std::string& body, const char* header = nullptr,
                          const char* value = nullptr) {
    MHD_Response* response =
        MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
    if (response == nullptr) return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (header != nullptr) MHD_add_response_header(response, header, value);
    const MHD_Result queued = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return queued;
  }

  // Called once per request, when its headers are whole: a scrape sends no body, so it is answered
  // at once (libmicrohttpd closes a connection whose body was left unread).
  static MHD_Result OnRequest(void* self, MHD_Connection* connection, const char* url, const char* method,
                              const char*, const char*, size_t*, void**) {
    auto* endpoint = static_cast<MetricsEndpoint*>(self);
    endpoint->gate_->RequestArrived(ConnectionFd(connection), NowMicros());
    constexpr const char* kText = "text/plain; charset=utf-8";
    if (const TokenAuthenticator* auth = endpoint->options_.auth) {
      const char* authorization = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "authorization");
      const char* api_key = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "x-api-key");
      if (!auth->Accepts(authorization == nullptr ? "" : authorization, api_key == nullptr ? "" : api_key)) {
        auth->Refused("metrics", Peer(connection));
        return Queue(connection, MHD_HTTP_UNAUTHORIZED, "application/json",
                     ErrorBody("a token is required: authorization: Bearer TOKEN"), "WWW-Authenticate",
                     "Bearer");
      }
    }
    if (std::strcmp(method, "GET") != 0 && std::strcmp(method, "HEAD") != 0) {
      return Queue(connection, MHD_HTTP_METHOD_NOT_ALLOWED, kText, "only GET\n", "Allow", "GET, HEAD");
    }
    if (std::strcmp(url, "/metrics") != 0) {
      return Queue(connection, MHD_HTTP_NOT_FOUND, kText, "graphserve serves /metrics\n");
    }
    return Queue(connection, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
                 endpoint->metrics_->TextExposition());
  }

  // The answer is written (or the request failed): the connection waits for its next request.
  static void OnCompleted(void* self, MHD_Connection* connection, void**, MHD_RequestTerminationCode) {
    static_cast<MetricsEndpoint*>(self)->gate_->Answered(ConnectionFd(connection), NowMicros());
  }

  // Each new TLS connection takes the credentials current now and keeps them until it closes; a
  // closing connection leaves the gate before libmicrohttpd closes its socket, so that the watcher
  // never shuts down a descriptor number reused since.
  static void OnConnection(void* self, MHD_Connection* connection, void** socket_context,
                           MHD_ConnectionNotificationCode code) {
    auto* endpoint = static_cast<MetricsEndpoint*>(self);
    using Held = std::shared_ptr<const HttpTls::Credentials>;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
      endpoint->gate_->Closed(ConnectionFd(connection));
      delete static_cast<Held*>(*socket_context);
      *socket_context = nullptr;
      return;
    }
    if (!endpoint->options_.tls) return;
    const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (info == nullptr || info->tls_session == nullptr) return;  // keeps the daemon's first credentials
    *socket_context =
        new Held(endpoint->options_.tls->Attach(static_cast<gnutls_session_int*>(info->tls_session)));
  }

  static std::string Peer(MHD_Connection* connection) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == nullptr || info->client_addr == nullptr) return "?";
    return AddressText(info->client_addr);
  }

  static void Log(void*, const char* format, va_list arguments) {
    LogHttpLibraryLine("metrics", format, arguments);
  }
};

Status MetricsEndpoint::Start(const MetricsEndpointOptions& options, ServerMetrics* metrics,
                              std::unique_ptr<MetricsEndpoint>* endpoint) {
  for (const auto& [flag, value] :
       {std::pair<const char*, int64_t>{"--metrics-max-connections", options.max_connections},
        {"--metrics-max-connections-per-address", options.max_connections_per_address},
        {"--metrics-client-timeout-s", options.client_timeout.count()}}) {
    if (value < 1) return InvalidArgument(std::string(flag) + ": must be positive");
  }
  std::string error;
  const int listen_fd = ListenOn(options.address, SOMAXCONN, /*non_blocking=*/true, &error);
  if (listen_fd < 0) {
    return Unavailable("--metrics-address: cannot listen on " + options.address + ": " + error);
  }
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    close(listen_fd);
    return Unavailable(std::string("--metrics-address: eventfd failed: ") + std::strerror(errno));
  }
  std::unique_ptr<MetricsEndpoint> started(new MetricsEndpoint(options, metrics, listen_fd, wake_fd));
  unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC | MHD_USE_ERROR_LOG;
  // Without TLS the list ends at its first entry; with it, libmicrohttpd starts from the first
  // credentials and OnConnection swaps in the current ones per connection.
  MHD_OptionItem tls_options[] = {
      {MHD_OPTION_END, 0, nullptr}, {MHD_OPTION_END, 0, nullptr}, {MHD_OPTION_END, 0, nullptr}};
  if (options.tls) {
    flags |= MHD_USE_TLS;
    tls_options[0] = {MHD_OPTION_HTTPS_MEM_CERT, 0,
                      const_cast<char*>(options.tls->initial_cert_pem().c_str())};
    tls_options[1] = {MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(options.tls->initial_key_pem().c_str())};
  }
  MetricsEndpoint* self = started.get();
  // One thread serves every connection the cap allows, since a scrape takes well under a millisecond
  // (and with a pool of threads, libmicrohttpd 0.9.75's MHD_stop_daemon hung joining a worker after
  // a flood of MHD_add_connection). The gate decides which connections stay; libmicrohttpd's own limit only
  // has to hold them all, those being closed included. Its idle timeout backs the gate's deadlines up,
  // a second behind them: at the same instant it closed an idle connection first now and then, which
  // then went uncounted as client_timeout.
  const auto timeout_s =
      std::chrono::ceil<std::chrono::seconds>(options.client_timeout) + std::chrono::seconds(1);
  started->daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &Callbacks::OnRequest, self,
      // First, so that libmicrohttpd's messages about the options after it reach the log too.
      MHD_OPTION_EXTERNAL_LOGGER, &Callbacks::Log, nullptr, MHD_OPTION_ARRAY, tls_options,
      MHD_OPTION_NOTIFY_CONNECTION, &Callbacks::OnConnection, self, MHD_OPTION_NOTIFY_COMPLETED,
      &Callbacks::OnCompleted, self, MHD_OPTION_CONNECTION_LIMIT,
      static_cast<unsigned>(2 * started->max_connections_ + 8), MHD_OPTION_CONNECTION_TIMEOUT,
      static_cast<unsigned>(timeout_s.count()), MHD_OPTION_END);
  if (started->daemon_ == nullptr) {
    return Unavailable("--metrics-address: cannot start the HTTP server on " + options.address);
  }
  started->acceptor_ = std::thread([self] { self->AcceptLoop(); });
  *endpoint = std::move(started);
  return Status::Ok();
}

MetricsEndpoint::MetricsEndpoint(const MetricsEndpointOptions& options, ServerMetrics* metrics, int listen_fd,
                                 int wake_fd)
    : options_(options), metrics_(metrics), listen_fd_(listen_fd), wake_fd_(wake_fd) {
  port_ = BoundPort(listen_fd_);
  const int limit = OpenFileLimit();
  highest_connection_fd_ = MetricsHighestDescriptor(limit);
  max_connections_ = MetricsConnectionCap(limit, options.max_connections);
  if (max_connections_ < options.max_connections) {
    spdlog::info("metrics: at most {} connections (not {}): the open-file limit is {}", max_connections_,
                 options.max_connections, limit);
  }
  ConnectionGateOptions gate;
  gate.max_connections = max_connections_;
  gate.max_connections_per_address = std::min(options.max_connections_per_address, max_connections_);
  gate.client_timeout_us =
      std::chrono::duration_cast<std::chrono::microseconds>(options.client_timeout).count();
  // A dropped connection's socket is shut down, not closed: libmicrohttpd sees it end, closes it and
  // tells the gate (OnConnection), which owns the descriptor until then.
  gate_ = std::make_unique<ConnectionGate>(gate, [metrics](int fd, const char* reason) {
    // Counted before the client can see its connection end.
    metrics->CountClosedConnection("metrics", reason);
    shutdown(fd, SHUT_RDWR);
  });
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

MetricsEndpoint::~MetricsEndpoint() {
  if (acceptor_.joinable()) {
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof(one)) < 0)
      spdlog::warn("metrics: cannot wake the acceptor: {}", std::strerror(errno));
    acceptor_.join();
  }
  close(listen_fd_);
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
  close(wake_fd_);
  if (spare_fd_ >= 0) close(spare_fd_);
}

void MetricsEndpoint::AcceptLoop() {
  NameThisThread("gs-metrics-acc");
  pollfd watched[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  int64_t next_check_us = 0;
  bool paused = false;
  while (true) {
    // While the sockets it dropped are still closing (twice the cap held), new connections wait in
    // the backlog for a few milliseconds instead of being refused: a scraper among them is then
    // served once the closes are done, and the listening socket is polled only for the wake-up.
    watched[0].events = paused ? 0 : POLLIN;
    const int wait_ms =
        paused ? static_cast<int>(kClosingWait.count()) : static_cast<int>(kDeadlineCheck.count());
    if (poll(watched, 2, wait_ms) < 0 && errno != EINTR) {
      spdlog::error("metrics: poll failed: {}", std::strerror(errno));
      std::this_thread::sleep_for(kDeadlineCheck);
    }
    if (watched[1].revents != 0) return;
    paused = gate_->open() >= 2 * max_connections_;
    for (int taken = 0; !paused && (watched[0].revents & POLLIN) != 0 && taken < kAcceptsPerTurn; ++taken) {
      sockaddr_storage address{};
      socklen_t length = sizeof(address);
      const int fd =
          accept4(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        if (Admit(fd, AddressText(reinterpret_cast<const sockaddr*>(&address))) &&
            MHD_add_connection(daemon_, fd, reinterpret_cast<sockaddr*>(&address), length) != MHD_YES) {
          // libmicrohttpd closed it; only this thread admits, so the number is not in use again yet.
          gate_->Closed(fd);
        }
        paused = gate_->open() >= 2 * max_connections_;
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE)
        ShedOne();
      else if (errno != EAGAIN && errno != EWOULDBLOCK)
        spdlog::error("metrics: accept failed: {}", std::strerror(errno));
      break;
    }
    const int64_t now_us = NowMicros();
    if (now_us >= next_check_us) {
      gate_->DropExpired(now_us);
      next_check_us = now_us + std::chrono::duration_cast<std::chrono::microseconds>(kDeadlineCheck).count();
    }
  }
}

bool MetricsEndpoint::Admit(int fd, const std::string& address) {
  // The kernel hands out the lowest free descriptor: a number this high means that many are open.
  if (fd >= highest_connection_fd_) {
    Refuse(fd, "descriptor_reserve");
    return false;
  }
  const ConnectionGate::Admission admission = gate_->Admit(fd, address, NowMicros());
  if (!admission.admitted) {
    Refuse(fd, admission.refusal);
    return false;
  }
  return true;
}

void MetricsEndpoint::Refuse(int fd, const char* reason) {
  // Counted before the client can see the close.
  metrics_->CountRefusedConnection("metrics", reason);
  LogLimited(LogKind::kRefusedConnection, reason, spdlog::level::warn,
             "metrics: refusing a connection ({}): {} of at most {} connections are open", reason,
             gate_->open(), max_connections_);
  // Best effort and without waiting: the client learns why instead of seeing a bare close. Over TLS
  // a plaintext answer would be noise before the handshake.
  if (!options_.tls) {
    send(fd, kTooManyConnections, sizeof(kTooManyConnections) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  close(fd);
}

void MetricsEndpoint::ShedOne() {
  if (spare_fd_ >= 0) {
    close(spare_fd_);
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length, SOCK_CLOEXEC);
    if (fd >= 0) Refuse(fd, "descriptors_exhausted");
    spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return;
  }
  // No spare to make room with: the waiting connection stays queued; the next turn tries again
  // after the poll's timeout at the latest, never in a loop.
  std::this_thread::sleep_for(kDeadlineCheck);
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

}  // namespace graphserve
