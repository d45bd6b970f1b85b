#pragma once
// The connections a port has handed over (gRPC's: GrpcAcceptor gives each descriptor to gRPC), kept
// oldest first so that, when descriptors run short, the ones that have not sent a single byte since
// they were accepted a grace period ago can be shut down to make room. A client that speaks (HTTP/2's
// preface, a TLS hello) does so at once; one that stays silent holds a descriptor for nothing until
// gRPC's handshake timeout. Shutting one down (not closing it: gRPC owns the descriptor) makes gRPC
// read its end and close it. A connection counts as the same while its descriptor names the same
// socket (device and inode), as in ConnectionsPerAddress.
// Thread safety: none; one thread (the acceptor's) makes every call.
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <deque>

namespace graphserve {

class SilentConnections {
 public:
  using Clock = std::chrono::steady_clock;
  // Tracked connections between two sweeps that forget the closed and the spoken: what is kept stays
  // within the connections open plus this many.
  static constexpr size_t kSweepEvery = 1024;

  explicit SilentConnections(Clock::duration grace) : grace_(grace) {}

  // Starts watching `fd`, accepted at `now` and about to be handed over.
  void Track(int fd, Clock::time_point now);
  // Shuts down, oldest first, at most `most` tracked connections that are still open, were accepted
  // at least the grace before `now` and have received no byte; forgets the ones that closed or
  // spoke on the way. Returns how many it shut down.
  size_t ShutOldestSilent(Clock::time_point now, size_t most);
  size_t tracked() const { return connections_.size(); }

 private:
  struct Connection {
    int fd;
    dev_t device;
    ino_t inode;
    Clock::time_point accepted;
  };
  // Whether `connection`'s descriptor still names its socket and that socket has received nothing.
  static bool StillSilent(const Connection& connection);
  void Sweep();

  const Clock::duration grace_;
  std::deque<Connection> connections_;  // in order of acceptance
  size_t tracked_since_sweep_ = 0;
};

}  // namespace graphserve
