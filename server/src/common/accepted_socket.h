#pragma once
// An accepted connection's descriptor, told apart from whatever later takes its number by the
// socket's device and inode at accept. The gRPC acceptor's bookkeeping (ConnectionsPerAddress,
// SilentConnections) keeps descriptors that gRPC owns and closes without telling anyone: a number
// still naming the same socket is the same connection, open. Value type; thread-compatible.
#include <sys/types.h>

#include <optional>

namespace graphserve {

struct AcceptedSocket {
  int fd = -1;
  dev_t device = 0;
  ino_t inode = 0;

  // The socket `fd` names now; nullopt when it cannot be read.
  static std::optional<AcceptedSocket> Of(int fd);
  // Whether `fd` is still open and names this socket.
  bool StillOpen() const;
};

}  // namespace graphserve
