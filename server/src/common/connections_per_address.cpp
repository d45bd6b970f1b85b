#include "connections_per_address.h"

#include <algorithm>
#include <iterator>
#include <optional>

namespace graphserve {

bool ConnectionsPerAddress::Admit(int fd, const std::string& address) {
  if (cap_ == 0) return true;
  std::vector<AcceptedSocket>& sockets = by_address_[address];
  DropClosed(&sockets);
  if (sockets.size() >= cap_) return false;
  // A descriptor accept() just returned can be read; were it not, it is not counted, never refused.
  if (const std::optional<AcceptedSocket> socket = AcceptedSocket::Of(fd)) sockets.push_back(*socket);
  if (++admitted_since_sweep_ >= kSweepEvery) Sweep();
  return true;
}

size_t ConnectionsPerAddress::Open(const std::string& address) {
  const auto found = by_address_.find(address);
  if (found == by_address_.end()) return 0;
  DropClosed(&found->second);
  return found->second.size();
}

void ConnectionsPerAddress::DropClosed(std::vector<AcceptedSocket>* sockets) {
  sockets->erase(std::remove_if(sockets->begin(), sockets->end(),
                                [](const AcceptedSocket& socket) { return !socket.StillOpen(); }),
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
