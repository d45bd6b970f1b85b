#include "server_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace graphserve::testing {

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    throw std::runtime_error("cannot bind a loopback port");
  }
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

ChildProcess::ChildProcess(std::vector<std::string> argv, const std::string& log_path,
                           const std::string& stderr_path)
    : log_path_(log_path) {
  pid_ = fork();
  if (pid_ == 0) {
    const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(log, STDOUT_FILENO);
    dup2(stderr_path.empty() ? log : open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644),
         STDERR_FILENO);
    std::vector<char*> args;
    for (std::string& arg : argv) args.push_back(arg.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
}

ChildProcess::~ChildProcess() {
  if (Running()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

bool ChildProcess::Running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

int ChildProcess::Stop(int signal, std::chrono::seconds timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < give_up) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -2;
}

std::string ChildProcess::Log() const {
  std::ifstream file(log_path_);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

ServerProcess::ServerProcess(const std::string& binary, std::vector<std::string> args,
                             const std::string& log_path, const std::string& stderr_path) {
  address_ = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  metrics_port_ = FreeLoopbackPort();
  http_port_ = FreeLoopbackPort();
  std::vector<std::string> argv = {binary, "--grpc-address", address_, "--metrics-address",
                                   "127.0.0.1:" + std::to_string(metrics_port_), "--http-address",
                                   "127.0.0.1:" + std::to_string(http_port_)};
  argv.insert(argv.end(), args.begin(), args.end());
  process_ = std::make_unique<ChildProcess>(std::move(argv), log_path, stderr_path);
}

bool ServerProcess::WaitUntilReady(std::chrono::seconds timeout) {
  auto stub = NewStub();
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < give_up) {
    if (!Running()) return false;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    inference::ServerReadyResponse response;
    if (stub->ServerReady(&context, {}, &response).ok() && response.ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::unique_ptr<inference::GRPCInferenceService::Stub> ServerProcess::NewStub() const {
  return inference::GRPCInferenceService::NewStub(NewChannel());
}

std::shared_ptr<grpc::Channel> ServerProcess::NewChannel() const {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(256 * 1024 * 1024);
  return grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), arguments);
}

std::string TestDevice() {
  const char* device = std::getenv("GRAPHSERVE_TEST_DEVICE");
  return device != nullptr ? device : "cpu";
}

}  // namespace graphserve::testing
