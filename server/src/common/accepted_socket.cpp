#include "accepted_socket.h"

#include <sys/stat.h>

namespace graphserve {

std::optional<AcceptedSocket> AcceptedSocket::Of(int fd) {
  struct stat status {};
  if (fstat(fd, &status) != 0) return std::nullopt;
  return AcceptedSocket{fd, status.st_dev, status.st_ino};
}

bool AcceptedSocket::StillOpen() const {
  // A closed descriptor's number may since name another socket or file: its inode tells them apart.
  struct stat status {};
  return fstat(fd, &status) == 0 && status.st_ino == inode && status.st_dev == device;
}

}  // namespace graphserve
