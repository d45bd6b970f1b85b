#pragma once
// The connections a port has handed over (gRPC's: GrpcAcceptor gives each descriptor to gRPC), kept
// oldest first so that, when descriptors run short, the ones still silent a grace period after they
// were accepted can be shut down to make room. Silent: fewer bytes received than any client's
// opening (kOpeningBytes). A client that speaks sends its opening at once (HTTP/2's 24-byte preface,
// a longer TLS hello); one that sends nothing, or trickles a byte now and then, holds a descriptor
// for nothing until gRPC's handshake timeout. Shutting one down (not closing it: gRPC owns the
// descriptor) makes gRPC read its end and close it. A connection counts as the same while its
// descriptor names the same socket (AcceptedSocket).
// Thread safety: none; one thread (the acceptor's) makes every call.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>

#include "common/accepted_socket.h"

namespace graphserve {

class SilentConnections {
 public:
  using Clock = std::chrono::steady_clock;
  // Tracked connections between two sweeps that forget the closed and the spoken: what is kept stays
  // within the connections open plus this many.
  static constexpr size_t kSweepEvery = 1024;
  // The least a client sends first: HTTP/2's connection preface (RFC 9113, 3.4); a TLS ClientHello
  // is longer.
  static constexpr uint64_t kOpeningBytes = 24;

  explicit SilentConnections(Clock::duration grace) : grace_(grace) {}

  // Starts watching `fd`, accepted at `now` and about to be handed over.
  void Track(int fd, Clock::time_point now);
  // Shuts down, oldest first, at most `most` tracked connections that are still open, were accepted
  // at least the grace before `now` and are silent; forgets the ones that closed or spoke on the
  // way. Returns how many it shut down.
  size_t ShutOldestSilent(Clock::time_point now, size_t most);
  size_t tracked() const { return connections_.size(); }

 private:
  struct Connection {
    AcceptedSocket socket;
    Clock::time_point accepted;
  };
  // Whether `connection`'s descriptor still names its socket and that socket has received fewer than
  // kOpeningBytes.
  static bool StillSilent(const Connection& connection);
  void Sweep();

  const Clock::duration grace_;
  std::deque<Connection> connections_;  // in order of acceptance
  size_t tracked_since_sweep_ = 0;
};

}  // namespace graphserve
