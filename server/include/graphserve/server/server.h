#pragma once
// A whole graphserve process minus its flags: the gRPC endpoint, the model repository and their
// lifetime. Start brings the endpoint up at once (so liveness answers during warm-up), loads and warms
// up the models, then reports ready. Shutdown stops accepting, lets in-flight requests finish, and
// stops the schedulers.
// Not thread-safe: call Start, Wait-for-signal and Shutdown from one controlling thread.
#include <chrono>
#include <memory>
#include <string>

#include "graphserve/engine/status.h"
#include "graphserve/server/clock.h"
#include "graphserve/server/model_repository.h"

namespace grpc {
class Server;
}

namespace graphserve {

class InferenceService;

struct ServerOptions {
  std::string grpc_address = "0.0.0.0:8001";
  std::string metrics_address = "0.0.0.0:8002";
  RepositoryOptions repository;
  // How long Shutdown waits for in-flight requests before cancelling them.
  std::chrono::milliseconds drain_timeout{30000};
};

class GraphServer {
 public:
  GraphServer();
  ~GraphServer();

  // Returns once every model is ready (or failed to load).
  Status Start(const ServerOptions& options);
  void Shutdown();

  // The port the gRPC endpoint is bound to (useful with port 0).
  int grpc_port() const { return grpc_port_; }

 private:
  ServerOptions options_;
  SteadyClock clock_;
  std::unique_ptr<ModelRepository> repository_;
  std::unique_ptr<InferenceService> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int grpc_port_ = 0;
};

}  // namespace graphserve
