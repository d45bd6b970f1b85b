#include "grpc_acceptor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include <spdlog/spdlog.h>

#include "common/descriptor_budget.h"
#include "common/listen_socket.h"
#include "graphserve/server/observability/log_limiter.h"

namespace graphserve {
namespace {

// Descriptors kept out of the connections' reach: enough for the model files, the HTTP ports' own
// connections and libraries that open files while serving (CUDA, AOTInductor's unpacking).
int HighestConnectionFd() {
  const int limit = OpenFileLimit();
  return limit - DescriptorReserve(limit);
}

}  // namespace

Status GrpcAcceptor::Listen(const std::string& address, int max_connections_per_address,
                            RefusalCounter count_refusal, std::unique_ptr<GrpcAcceptor>* acceptor) {
  std::string error;
  const int listen_fd = ListenOn(address, SOMAXCONN, /*non_blocking=*/true, &error);
  if (listen_fd < 0) return Unavailable("--grpc-address: cannot listen on " + address + ": " + error);
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    close(listen_fd);
    return Unavailable(std::string("--grpc-address: eventfd failed: ") + std::strerror(errno));
  }
  acceptor->reset(
      new GrpcAcceptor(listen_fd, wake_fd, max_connections_per_address, std::move(count_refusal)));
  return Status::Ok();
}

GrpcAcceptor::GrpcAcceptor(int listen_fd, int wake_fd, int max_connections_per_address,
                           RefusalCounter count_refusal)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      count_refusal_(std::move(count_refusal)),
      port_(BoundPort(listen_fd)),
      highest_connection_fd_(HighestConnectionFd()),
      highest_in_place_fd_(highest_connection_fd_ + DescriptorReserve(OpenFileLimit()) / 4),
      spare_fd_(open("/dev/null", O_RDONLY | O_CLOEXEC)),
      per_address_(
          static_cast<size_t>(GrpcConnectionsPerAddressCap(OpenFileLimit(), max_connections_per_address))) {}

GrpcAcceptor::~GrpcAcceptor() {
  Stop();
  close(wake_fd_);
  if (spare_fd_ >= 0) close(spare_fd_);
}

void GrpcAcceptor::Start(std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> handoff) {
  handoff_ = std::move(handoff);
  thread_ = std::thread([this] { AcceptLoop(); });
}

void GrpcAcceptor::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof(one)) < 0) spdlog::warn("gRPC acceptor: cannot wake: {}", std::strerror(errno));
    thread_.join();
  }
  // Once: a second Stop (the destructor's) must not close a descriptor number reused since.
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

void GrpcAcceptor::AcceptLoop() {
  pollfd watched[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (true) {
    if (poll(watched, 2, -1) < 0 && errno != EINTR) {
      spdlog::error("gRPC acceptor: poll failed: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (watched[1].revents != 0) return;
    if (watched[0].revents == 0) continue;
    // Everything waiting, so that one wake-up serves a burst.
    while (true) {
      sockaddr_storage peer{};
      socklen_t peer_length = sizeof(peer);
      const int fd =
          accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_length, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        HandOver(fd, AddressText(reinterpret_cast<const sockaddr*>(&peer)));
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        ShedOne();
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        spdlog::error("gRPC acceptor: accept failed: {}", std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      break;
    }
  }
}

void GrpcAcceptor::HandOver(int fd, const std::string& peer) {
  // The kernel hands out the lowest free descriptor: a number this high means that many are open.
  const size_t shut = fd >= highest_connection_fd_ - kPressureMargin ? ShutSilent(fd) : 0;
  // Room is being made: a connection past the reserve may take the place of one shut down, whose
  // descriptor gRPC closes within moments. Its number may be a few past the reserve's start (other
  // ports' connections, /metrics', take numbers there too), but within its first quarter.
  const bool in_place_of_shut = shut > 0 && fd < highest_in_place_fd_;
  if (fd >= highest_connection_fd_ && !in_place_of_shut) {
    close(fd);
    count_refusal_(Refusal::kDescriptorReserve);
    LogLimited(LogKind::kRefusedConnection, "descriptor_reserve", spdlog::level::warn,
               "gRPC: refusing new connections: {} descriptors are open and the rest of the open-file limit is "
               "kept for the server (raise `ulimit -n`, or close idle clients)",
               fd);
    return;
  }
  if (!per_address_.Admit(fd, peer)) {
    close(fd);
    count_refusal_(Refusal::kAddressCap);
    LogLimited(LogKind::kRefusedConnection, "address_cap", spdlog::level::warn,
               "gRPC: refusing a connection from {}: it has {} open, the cap per client address "
               "(--grpc-max-connections-per-client)",
               peer, per_address_.cap());
    return;
  }
  silent_.Track(fd, SilentConnections::Clock::now());
  grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters connection;
  connection.listener_fd = listen_fd_;
  connection.fd = fd;
  handoff_->HandleNewConnection(&connection);
}

size_t GrpcAcceptor::ShutSilent(int open) {
  const size_t shut = silent_.ShutOldestSilent(SilentConnections::Clock::now(), kShutPerArrival);
  if (shut == 0) return 0;
  for (size_t i = 0; i < shut; ++i) count_refusal_(Refusal::kSilentAtPressure);
  LogLimited(LogKind::kRefusedConnection, "silent_at_pressure", spdlog::level::warn,
             "gRPC: {} descriptors are open, near the reserve: shut down {} connections that had not sent a "
             "client's opening a second after they were accepted",
             open, shut);
  return shut;
}

void GrpcAcceptor::ShedOne() {
  count_refusal_(Refusal::kDescriptorsExhausted);
  LogLimited(LogKind::kRefusedConnection, "descriptors_exhausted", spdlog::level::warn,
             "gRPC: out of file descriptors ({}); refusing connections until some close", std::strerror(errno));
  ShutSilent(highest_connection_fd_);
  if (spare_fd_ >= 0) {
    close(spare_fd_);
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) close(fd);
    spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return;
  }
  // No spare to make room with: the waiting connection stays queued; do not spin on it.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

}  // namespace graphserve
