#pragma once
// Which connections an HTTP port keeps when clients hold more than it will serve: the bookkeeping
// behind /metrics' bounds against slow, idle and half-open clients (issue #43.3).
//
// Each connection is in one of two phases: waiting for its next request (from its opening, or from
// its previous answer, until the request's headers are whole) or being answered. Each phase has
// client_timeout_us to finish; Expired() names the connections past it, however many bytes they
// trickled meanwhile. A new connection past a cap takes the place of a waiting one (the oldest of its
// own address, or, past the port's cap, of the address holding the most connections): a waiting
// connection costs the port a descriptor and gives it nothing, so under a flood of them the newest
// client, most likely the one about to send a request, is served. Only when every connection that
// could make room is being answered is the new one refused.
//
// Connections are named by an id that stays unique while open (the socket's descriptor). A connection
// made to leave (evicted or expired) still counts towards open() until Closed(), so that the
// descriptors the port holds stay bounded while its sockets are being closed.
// Time comes in as microseconds of a monotonic clock (Clock::NowMicros), so tests set it exactly.
// Thread-safe: any method may be called from any thread.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graphserve/server/common/thread_annotations.h"

namespace graphserve {

struct ConnectionGateOptions {
  int max_connections = 64;
  int max_connections_per_address = 8;
  int64_t client_timeout_us = 5'000'000;
};

class ConnectionGate {
 public:
  struct Admission {
    bool admitted = false;
    // Set when admitting needed room: the connection dropped to make it.
    int evict = -1;
    // Why a connection was refused: "address_cap" or "connection_cap".
    const char* refusal = "";
  };

  // `drop` makes a connection leave (shuts its socket down), told why: "evicted" or "client_timeout".
  // It runs under the gate's lock, so that a connection's id cannot be Closed and reused meanwhile,
  // and must not call back into the gate.
  using Drop = std::function<void(int id, const char* reason)>;
  ConnectionGate(const ConnectionGateOptions& options, Drop drop)
      : options_(options), drop_(std::move(drop)) {}

  // A new connection `id` from `address` (the client's IP): admitted (maybe in place of one it
  // evicted, dropped already) or refused.
  Admission Admit(int id, const std::string& address, int64_t now_us) EXCLUDES(mutex_);
  // Its request's headers are whole: it is being answered.
  void RequestArrived(int id, int64_t now_us) EXCLUDES(mutex_);
  // Its answer is written: it waits for the next request.
  void Answered(int id, int64_t now_us) EXCLUDES(mutex_);
  // Its socket is closing; its id may be reused from now on. Unknown ids are ignored.
  void Closed(int id) EXCLUDES(mutex_);
  // Drops the live connections whose phase has outlasted client_timeout_us; returns how many.
  int DropExpired(int64_t now_us) EXCLUDES(mutex_);

  // Connections admitted and not yet Closed (the descriptors the port holds), and those of them that
  // were not made to leave.
  int open() const EXCLUDES(mutex_);
  int live() const EXCLUDES(mutex_);

 private:
  struct Connection {
    std::string address;
    bool answering = false;
    bool leaving = false;  // evicted or expired: its socket is being closed
    int64_t phase_start_us = 0;
  };
  void StartPhase(int id, bool answering, int64_t now_us) EXCLUDES(mutex_);
  // The oldest waiting live connection, of `address` when not empty; -1 when none.
  int OldestWaiting(const std::string& address) const REQUIRES(mutex_);
  // The address with the most live connections among those with a waiting one; empty when none.
  std::string BusiestAddress() const REQUIRES(mutex_);
  int LiveOf(const std::string& address) const REQUIRES(mutex_);
  // No longer live (its socket is being closed), still open.
  void Leave(int id) REQUIRES(mutex_);
  // Neither live nor open; unknown ids are ignored.
  void Forget(int id) REQUIRES(mutex_);

  const ConnectionGateOptions options_;
  const Drop drop_;
  mutable Mutex mutex_;
  std::map<int, Connection> connections_ GUARDED_BY(mutex_);
  std::map<std::string, int> live_by_address_ GUARDED_BY(mutex_);
  int live_ GUARDED_BY(mutex_) = 0;
};

}  // namespace graphserve
