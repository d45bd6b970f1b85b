#include "connections_per_address.h"

#include <sys/stat.h>

#include <algorithm>
#include <iterator>

namespace graphserve {

bool ConnectionsPerAddress::Admit(int fd, const std::string& address) {
  if (cap_ == 0) return true;
  std::vector<Socket>& sockets = by_address_[address];
  DropClosed(&sockets);
  if (sockets.size() >= cap_) return false;
  struct stat status {};
  // A descriptor accept() just returned can be read; were it not, it is not counted, never refused.
  if (fstat(fd, &status) == 0) sockets.push_back({fd, status.st_dev, status.st_ino});
  if (++admitted_since_sweep_ >= kSweepEvery) Sweep();
  return true;
}

size_t ConnectionsPerAddress::Open(const std::string& address) {
  const auto found = by_address_.find(address);
  if (found == by_address_.end()) return 0;
  DropClosed(&found->second);
  return found->second.size();
}

void ConnectionsPerAddress::DropClosed(std::vector<Socket>* sockets) {
  // A closed descriptor's number may since name another socket or file: its inode tells them apart.
  sockets->erase(std::remove_if(sockets->begin(), sockets->end(),
                                [](const Socket& socket) {
                                  struct stat status {};
                                  return fstat(socket.fd, &status) != 0 || status.st_ino != socket.inode ||
                                         status.st_dev != socket.device;
                                }),
                 sockets->end());
}

void ConnectionsPerAddress::Sweep() {
  admitted_since_sweep_ = 0;
  for (auto it = by_address_.begin(); it != by_address_.end();) {
    DropClosed(&it->second);
    it = it->second.empty() ? by_address_.erase(it) : std::next(it);
  }
}

}  // namespace graphserve
