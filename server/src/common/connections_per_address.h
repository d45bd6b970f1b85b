#pragma once
// How many connections each client address has open on a port that hands its connections over once
// accepted: gRPC's (GrpcAcceptor gives each descriptor to gRPC, and gRPC 1.51 tells nobody when it
// closes one). A connection counts as open while its descriptor still names the same socket (the
// same device and inode): an address's count is re-read from its descriptors whenever that address
// connects again, and every address's once per kSweepEvery admissions, so closed connections leave
// the count without a second descriptor kept open to watch each one.
// Thread safety: none; one thread (the acceptor's) makes every call.
#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/accepted_socket.h"

namespace graphserve {

class ConnectionsPerAddress {
 public:
  // Admissions between two re-reads of every address: what is kept for addresses that never connect
  // again stays within the live connections plus this many.
  static constexpr size_t kSweepEvery = 1024;

  // At most `cap` connections per address at once; 0: no cap (every connection admitted, none kept).
  explicit ConnectionsPerAddress(size_t cap) : cap_(cap) {}

  // Whether connection `fd`, just accepted from `address` (its IP address as text), fits its
  // address's cap. An admitted one counts until its descriptor is closed.
  bool Admit(int fd, const std::string& address);
  // The connections of `address` still open.
  size_t Open(const std::string& address);
  // Addresses with a connection counted (for tests: stays bounded however many addresses came).
  size_t addresses() const { return by_address_.size(); }
  size_t cap() const { return cap_; }

 private:
  // Drops the sockets of `sockets` whose descriptor is closed or now names another file.
  static void DropClosed(std::vector<AcceptedSocket>* sockets);
  void Sweep();

  const size_t cap_;
  std::unordered_map<std::string, std::vector<AcceptedSocket>> by_address_;
  size_t admitted_since_sweep_ = 0;
};

}  // namespace graphserve
