#include "listen_socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace graphserve {
namespace {

// "HOST:PORT" → host (brackets of an IPv6 literal removed; empty = every interface) and port.
bool SplitAddress(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  // getaddrinfo keeps only a port's low 16 bits: 99999 listened on 34463.
  return port->find_first_not_of("0123456789") == std::string::npos && port->size() <= 5 &&
         std::stoi(*port) <= 65535;
}

}  // namespace

int ListenOn(const std::string& address, int backlog, bool non_blocking, std::string* error) {
  std::string host, port;
  if (!SplitAddress(address, &host, &port)) {
    *error = "expected HOST:PORT, the port 0 to 65535";
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
    const int flags = SOCK_CLOEXEC | (non_blocking ? SOCK_NONBLOCK : 0);
    fd = socket(candidate->ai_family, candidate->ai_socktype | flags, candidate->ai_protocol);
    if (fd < 0) continue;
    // A restarted server may bind at once, although its old connections linger in TIME_WAIT; a port
    // another process listens on still fails.
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 && listen(fd, backlog) == 0) break;
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

std::string AddressText(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (address->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text, sizeof(text));
  } else if (address->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text, sizeof(text));
  }
  return text;
}

}  // namespace graphserve
