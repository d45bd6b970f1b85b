#include "silent_connections.h"

#include <linux/tcp.h>  // tcp_info's tcpi_bytes_received, which glibc's netinet/tcp.h lacks
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstddef>
#include <optional>

namespace graphserve {

void SilentConnections::Track(int fd, Clock::time_point now) {
  // A descriptor accept() just returned can be read; were it not, it is not watched, never shut.
  if (const std::optional<AcceptedSocket> socket = AcceptedSocket::Of(fd))
    connections_.push_back({*socket, now});
  if (++tracked_since_sweep_ >= kSweepEvery) Sweep();
}

size_t SilentConnections::ShutOldestSilent(Clock::time_point now, size_t most) {
  size_t shut = 0;
  // Oldest first; one found speaking or closed is forgotten, since it cannot turn silent again.
  while (shut < most && !connections_.empty() && now - connections_.front().accepted >= grace_) {
    const Connection oldest = connections_.front();
    connections_.pop_front();
    if (StillSilent(oldest) && shutdown(oldest.socket.fd, SHUT_RDWR) == 0) ++shut;
  }
  return shut;
}

bool SilentConnections::StillSilent(const Connection& connection) {
  if (!connection.socket.StillOpen()) return false;
  tcp_info info{};
  socklen_t length = sizeof(info);
  if (getsockopt(connection.socket.fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return false;
  // Older kernels fill a shorter struct: without the byte count, nobody is taken for silent.
  if (length < offsetof(tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received)) return false;
  return info.tcpi_bytes_received < kOpeningBytes;
}

void SilentConnections::Sweep() {
  tracked_since_sweep_ = 0;
  connections_.erase(std::remove_if(connections_.begin(), connections_.end(),
                                    [](const Connection& connection) { return !StillSilent(connection); }),
                     connections_.end());
}

}  // namespace graphserve
