#pragma once
// graphserve accepts the gRPC port's TCP connections itself and hands each to gRPC
// (ExternalConnectionAcceptor). gRPC 1.51's own listener closes for good on the first accept that
// fails with EMFILE: a burst of idle connections would leave a server that never accepts again while
// its other ports look healthy. This acceptor instead
//   - keeps a reserve of descriptors for the rest of the process (model files, the HTTP ports): a
//     connection whose descriptor would eat into it is closed at once;
//   - when accept fails for want of descriptors, frees a spare one it holds, accepts and closes the
//     waiting connection (so that the client gets a reset rather than a hang), and carries on;
//   - closes at once a connection from a client address that has max_connections_per_address open
//     already (ConnectionsPerAddress), so that one client cannot take every descriptor;
//   - when descriptors run short (a new one numbered within kPressureMargin of the reserve), shuts
//     down the oldest connections that have not sent a client's opening kSilentGrace after they
//     were accepted (SilentConnections), so that connections from many addresses that say nothing,
//     or trickle a byte now and then, cannot keep clients that speak out until gRPC's handshake
//     timeout;
//   - counts every connection it refuses or shuts so, by reason.
// Thread safety: Start and Stop from one controlling thread; the accepting runs on a thread of its
// own. Ownership: accepted descriptors belong to gRPC once handed over.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <grpcpp/server_builder.h>

#include "common/connections_per_address.h"
#include "common/silent_connections.h"
#include "graphserve/engine/status.h"

namespace graphserve {

class GrpcAcceptor {
 public:
  enum class Refusal { kDescriptorReserve, kDescriptorsExhausted, kAddressCap, kSilentAtPressure };
  // A new connection numbered this close to the reserve makes the acceptor shut down silent ones.
  static constexpr int kPressureMargin = 16;
  // How long an accepted connection may stay silent before it may be shut to make room: a client
  // speaks first in HTTP/2 and in TLS, at once.
  static constexpr std::chrono::seconds kSilentGrace{1};
  // Silent connections shut per arrival under pressure: more than one, so that room is made faster
  // than arrivals take it.
  static constexpr size_t kShutPerArrival = 2;
  using RefusalCounter = std::function<void(Refusal)>;

  // Listens on `address` ("HOST:PORT"); UNAVAILABLE naming the flag when it cannot. Connections are
  // taken only after Start. A client address may have `max_connections_per_address` open at once
  // (0: no cap), fewer under a low open-file limit (GrpcConnectionsPerAddressCap).
  static Status Listen(const std::string& address, int max_connections_per_address,
                       RefusalCounter count_refusal, std::unique_ptr<GrpcAcceptor>* acceptor);
  ~GrpcAcceptor();  // Stop()s

  // Hands accepted connections to `handoff` (from ServerBuilder's AddExternalConnectionAcceptor,
  // whose server must be started) from now on.
  void Start(std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> handoff);
  // Stops accepting and closes the listening socket; connections already handed over stay gRPC's.
  void Stop();

  int port() const { return port_; }
  // Descriptors at or above this number are refused: the open-file limit less the reserve.
  int highest_connection_fd() const { return highest_connection_fd_; }
  // The cap per client address in force; 0: none.
  int max_connections_per_address() const { return static_cast<int>(per_address_.cap()); }

 private:
  GrpcAcceptor(int listen_fd, int wake_fd, int max_connections_per_address, RefusalCounter count_refusal);
  void AcceptLoop();
  void HandOver(int fd, const std::string& peer);
  // accept4 failed with EMFILE/ENFILE: make room with the spare descriptor to drop one connection.
  void ShedOne();
  // Shuts down up to kShutPerArrival silent connections, counting and logging them; `open`: the
  // descriptor number that showed the pressure. Returns how many it shut down.
  size_t ShutSilent(int open);

  int listen_fd_;  // -1 once Stop closed it
  const int wake_fd_;  // an eventfd that Stop writes to
  const RefusalCounter count_refusal_;
  int port_ = 0;
  int highest_connection_fd_ = 0;
  // Descriptors below this may take the place of silent connections shut down (HandOver).
  int highest_in_place_fd_ = 0;
  int spare_fd_ = -1;
  ConnectionsPerAddress per_address_;       // the accepting thread's only
  SilentConnections silent_{kSilentGrace};  // the accepting thread's only
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> handoff_;
  std::thread thread_;
};

}  // namespace graphserve
