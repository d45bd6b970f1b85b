#pragma once
// Starts the real graphserve binary as a child process on a free loopback port, for black-box tests.
// Not thread-safe: one test thread owns a ServerProcess.
#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "grpc_service.grpc.pb.h"

namespace graphserve::testing {

class ServerProcess {
 public:
  // `args` are passed after --grpc-address/--metrics-address; the log goes to `log_path`.
  ServerProcess(const std::string& binary, std::vector<std::string> args, const std::string& log_path);
  ~ServerProcess();  // SIGKILLs a server still running

  // Polls ServerReady until true; false when the process exits or `timeout` passes first.
  bool WaitUntilReady(std::chrono::seconds timeout);
  // Sends `signal` and waits for the exit; returns the exit status (-1 when killed by a signal).
  int Stop(int signal, std::chrono::seconds timeout);
  bool Running();

  const std::string& address() const { return address_; }
  int metrics_port() const { return metrics_port_; }
  std::string Log() const;
  std::unique_ptr<inference::GRPCInferenceService::Stub> NewStub() const;

 private:
  pid_t pid_ = -1;
  std::string address_;
  int metrics_port_ = 0;
  std::string log_path_;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreeLoopbackPort();

}  // namespace graphserve::testing
