#pragma once
// Child processes for black-box tests: any program (ChildProcess), and the real graphserve binary on
// a free loopback port (ServerProcess). Not thread-safe: one test thread owns each.
#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "grpc_service.grpc.pb.h"

namespace graphserve::testing {

// Runs argv[0] (a path) with its stdout and stderr in `log_path`, or its stderr in `stderr_path` when
// one is given (to check what the program writes to stdout alone).
class ChildProcess {
 public:
  ChildProcess(std::vector<std::string> argv, const std::string& log_path,
               const std::string& stderr_path = "");
  ~ChildProcess();  // SIGKILLs a child still running

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  bool Running();
  // Sends `signal` and waits for the exit: the exit status, -1 when killed by a signal, -2 when still
  // running at `timeout` (the destructor kills it).
  int Stop(int signal, std::chrono::seconds timeout);
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

class ServerProcess {
 public:
  // `args` are passed after --grpc-address/--metrics-address/--http-address; the log goes to `log_path` (stderr to
  // `stderr_path` when given).
  ServerProcess(const std::string& binary, std::vector<std::string> args, const std::string& log_path,
                const std::string& stderr_path = "");

  // Polls ServerReady until true; false when the process exits or `timeout` passes first.
  bool WaitUntilReady(std::chrono::seconds timeout);
  int Stop(int signal, std::chrono::seconds timeout) { return process_->Stop(signal, timeout); }
  bool Running() { return process_->Running(); }

  const std::string& address() const { return address_; }
  int metrics_port() const { return metrics_port_; }
  int http_port() const { return http_port_; }
  std::string Log() const { return process_->Log(); }
  std::unique_ptr<inference::GRPCInferenceService::Stub> NewStub() const;
  std::shared_ptr<grpc::Channel> NewChannel() const;

 private:
  std::string address_;
  int metrics_port_ = 0;
  int http_port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreeLoopbackPort();

// The --device of suites that run on a GPU host too: GRAPHSERVE_TEST_DEVICE (cuda there), else cpu.
// The integration repository's AOTInductor models are compiled for that device.
std::string TestDevice();

}  // namespace graphserve::testing
