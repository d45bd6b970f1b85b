// What a container runtime and an orchestrator see of the real graphserve binary: with
// --log-format json every stdout line is a JSON object a collector can parse, the grpc.health.v1
// statuses that Kubernetes' gRPC probes ask follow readiness, and SIGTERM ends in exit 0. And what a
// flood of bad requests leaves in that log: a bounded number of lines, all JSON (LogFloodTest).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "http_get.h"
#include "infer_helpers.h"
#include "prometheus_text.h"
#include "server_process.h"

namespace graphserve::testing {
namespace {

using nlohmann::json;

constexpr auto kStartTimeout = std::chrono::seconds(240);
// grpc.health.v1.HealthCheckResponse.ServingStatus.
constexpr int kServing = 1;
constexpr int kNotServing = 2;

std::string ReadText(const std::string& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// One unary call through the generic stub, with the request and the response as bytes: no .proto of
// the service is needed, and the request may hold bytes that no generated class would serialize.
grpc::Status UnaryBytesCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                            const std::string& request, std::string* response) {
  grpc::Slice slice(request);
  grpc::ByteBuffer request_buffer(&slice, 1);
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue queue;
  auto call = stub.PrepareUnaryCall(&context, method, request_buffer, &queue);
  call->StartCall();
  grpc::ByteBuffer response_buffer;
  grpc::Status status;
  call->Finish(&response_buffer, &status, nullptr);
  void* tag = nullptr;
  bool ok = false;
  queue.Next(&tag, &ok);
  response->clear();
  if (!status.ok()) return status;
  std::vector<grpc::Slice> slices;
  (void)response_buffer.Dump(&slices);
  for (const grpc::Slice& part : slices) response->append(reinterpret_cast<const char*>(part.begin()), part.size());
  return status;
}

// grpc.health.v1.Health/Check, whose request is field 1 (string `service`) and response field 1
// (enum `status`), both tiny enough to encode by hand. Returns the status, or -1 with the call's
// status in `call_status`.
int HealthCheck(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                grpc::Status* call_status) {
  std::string request;
  if (!service.empty()) request = std::string("\x0a", 1) + static_cast<char>(service.size()) + service;
  std::string bytes;
  *call_status = UnaryBytesCall(channel, "/grpc.health.v1.Health/Check", request, &bytes);
  if (!call_status->ok()) return -1;
  // proto3 leaves out a zero (UNKNOWN) enum value, so an empty message means status 0.
  if (bytes.empty()) return 0;
  return bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : -1;
}

// Every line of `text` must be one JSON record with the fields collectors key on; returns them.
std::vector<json> ParseJsonLines(const std::string& text) {
  const std::regex rfc3339(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)");
  std::vector<json> records;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    json record;
    try {
      record = json::parse(line);
    } catch (const json::exception& error) {
      ADD_FAILURE() << "not JSON (" << error.what() << "): " << line;
      continue;
    }
    EXPECT_TRUE(record.is_object()) << line;
    EXPECT_TRUE(record["time"].is_string() &&
                std::regex_match(record["time"].get<std::string>(), rfc3339)) << line;
    EXPECT_TRUE(record["level"].is_string()) << line;
    EXPECT_TRUE(record["thread"].is_number_unsigned()) << line;
    EXPECT_EQ(record["logger"], "graphserve") << line;
    EXPECT_TRUE(record["message"].is_string()) << line;
    records.push_back(std::move(record));
  }
  return records;
}

bool AnyMessageStartsWith(const std::vector<json>& records, const std::string& prefix) {
  for (const json& record : records) {
    if (record.value("message", "").rfind(prefix, 0) == 0) return true;
  }
  return false;
}

TEST(ContainerTest, JsonLogsHealthServiceAndSigterm) {
  const std::string stdout_path = std::string(TEST_OUTPUT_DIR) + "/json_log_server.stdout";
  const std::string stderr_path = std::string(TEST_OUTPUT_DIR) + "/json_log_server.stderr";
  ServerProcess server(GRAPHSERVE_BINARY,
                       {"--device", TestDevice(), "--model-repository", MODEL_REPOSITORY, "--log-format", "json"},
                       stdout_path, stderr_path);
  ASSERT_TRUE(server.WaitUntilReady(kStartTimeout)) << server.Log() << ReadText(stderr_path);

  const auto channel = server.NewChannel();
  grpc::Status call_status;
  EXPECT_EQ(HealthCheck(channel, "", &call_status), kServing) << call_status.error_message();
  EXPECT_EQ(HealthCheck(channel, "inference.GRPCInferenceService", &call_status), kServing);
  EXPECT_EQ(HealthCheck(channel, "liveness", &call_status), kServing);
  EXPECT_EQ(HealthCheck(channel, "no.such.Service", &call_status), -1);
  EXPECT_EQ(call_status.error_code(), grpc::StatusCode::NOT_FOUND);

  EXPECT_EQ(server.Stop(SIGTERM, std::chrono::seconds(60)), 0) << server.Log();
  const std::vector<json> records = ParseJsonLines(server.Log());
  EXPECT_TRUE(AnyMessageStartsWith(records, "ready: serving")) << server.Log();
  EXPECT_TRUE(AnyMessageStartsWith(records, "received SIGTERM")) << server.Log();
  EXPECT_TRUE(AnyMessageStartsWith(records, "shutting down: draining")) << server.Log();
  EXPECT_TRUE(AnyMessageStartsWith(records, "stopped")) << server.Log();
}

// A message carrying quotes, a tab, a backslash and a newline (here: the repository path in a
// start-up error) must stay one valid JSON line and read back verbatim.
// Started with a low soft limit on descriptors (as some container runtimes set), graphserve raises it
// to the hard limit before it listens.
TEST(ContainerTest, RaisesTheOpenFileLimitToTheHardLimit) {
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  if (files.rlim_max != RLIM_INFINITY && files.rlim_max <= 256) GTEST_SKIP() << "hard limit " << files.rlim_max;
  const std::string log_path = std::string(TEST_OUTPUT_DIR) + "/open_file_limit.log";
  std::remove(log_path.c_str());  // a previous run's log must not satisfy the wait below
  // The child inherits the lowered soft limit; this process gets its own back at once.
  rlimit lowered = files;
  lowered.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  ChildProcess process({GRAPHSERVE_BINARY, "--grpc-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0",
                        "--http-address", "127.0.0.1:0", "--device", "cpu"},
                       log_path);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
  const std::string expected = "open-file limit raised from 256 to " +
                               (files.rlim_max == RLIM_INFINITY ? std::string("") : std::to_string(files.rlim_max));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (process.Log().find("listening") == std::string::npos && process.Running() &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(process.Log().find(expected), std::string::npos) << process.Log();
  EXPECT_EQ(process.Stop(SIGTERM, std::chrono::seconds(60)), 0) << process.Log();
}

// A TCP connection to 127.0.0.1:`port` that says nothing; -1 when the connect fails.
int IdleConnection(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool Live(const std::string& address) {
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  inference::ServerLiveResponse response;
  return stub->ServerLive(&context, inference::ServerLiveRequest(), &response).ok() && response.live();
}

// A graphserve serving gRPC under `ulimit -n 256` (sh lowers the hard limit too, so that graphserve
// cannot raise its way out) with no cap per client address: one client here stands for many
// addresses, which the cap would otherwise refuse first.
class DescriptorLimitedServer {
 public:
  explicit DescriptorLimitedServer(const std::string& log_name)
      : grpc_port_(FreeLoopbackPort()),
        metrics_port_(FreeLoopbackPort()),
        address_("127.0.0.1:" + std::to_string(grpc_port_)),
        process_({"/bin/sh", "-c", "ulimit -n 256 && exec \"$0\" \"$@\"", GRAPHSERVE_BINARY,
                  "--grpc-max-connections-per-client", "0", "--grpc-address", address_, "--metrics-address",
                  "127.0.0.1:" + std::to_string(metrics_port_), "--http-address", "", "--device", "cpu"},
                 std::string(TEST_OUTPUT_DIR) + "/" + log_name + ".log") {}
  ~DescriptorLimitedServer() {
    for (int fd : idle_) close(fd);
  }

  bool WaitUntilLive() {
    const auto give_up = std::chrono::steady_clock::now() + kStartTimeout;
    while (!Live(address_) && process_.Running() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return Live(address_);
  }
  // Opens `count` gRPC connections that say nothing, held until CloseIdle.
  void OpenIdle(int count) {
    for (int i = 0; i < count; ++i) {
      const int fd = IdleConnection(grpc_port_);
      if (fd >= 0) idle_.push_back(fd);
    }
  }
  void CloseIdle() {
    for (int fd : idle_) close(fd);
    idle_.clear();
  }
  double GrpcConnectionsRefused(const std::string& reason = "") {
    Labels labels = {{"endpoint", "grpc"}};
    if (!reason.empty()) labels["reason"] = reason;
    return Exposition(HttpGet(metrics_port_, "/metrics").body)
        .Sum("graphserve_connections_refused_total", labels);
  }

  const std::string& address() const { return address_; }
  ChildProcess& process() { return process_; }

 private:
  const int grpc_port_;
  const int metrics_port_;
  const std::string address_;
  ChildProcess process_;
  std::vector<int> idle_;
};

// More idle connections than the open-file limit allows (300 under `ulimit -n 256`): the gRPC port
// refuses the excess but keeps listening, and once they close a new client is served. (gRPC's own
// listener stopped accepting for good at the first EMFILE.)
TEST(ContainerTest, ExhaustedDescriptorsNeverStopTheGrpcListener) {
  DescriptorLimitedServer server("descriptor_exhaustion");
  ASSERT_TRUE(server.WaitUntilLive()) << server.process().Log();
  server.OpenIdle(300);
  // The acceptor takes them in order; give it a moment to reach the reserve.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_GT(server.GrpcConnectionsRefused(), 0.0) << "300 connections under a limit of 256 were all kept";
  server.CloseIdle();

  // Served again once the descriptors are free (the server sees each idle connection close).
  bool served = false;
  const auto recovery = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!(served = Live(server.address())) && std::chrono::steady_clock::now() < recovery) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(served) << server.process().Log();
  EXPECT_EQ(server.process().Log().find("Failed accept4"), std::string::npos) << server.process().Log();
  EXPECT_NE(server.process().Log().find("gRPC: refusing new connections"), std::string::npos)
      << server.process().Log();
  EXPECT_EQ(server.process().Stop(SIGTERM, std::chrono::seconds(60)), 0) << server.process().Log();
}

// Idle connections from many addresses (each within its cap) holding every descriptor gRPC may use
// (300 under `ulimit -n 256`): once they have been silent past the grace, a client that speaks is
// served while they stay connected, the oldest silent ones shut down to make room and counted.
TEST(ContainerTest, SilentConnectionsMakeRoomForAClientThatSpeaks) {
  DescriptorLimitedServer server("silent_connections");
  ASSERT_TRUE(server.WaitUntilLive()) << server.process().Log();
  server.OpenIdle(300);
  // Past GrpcAcceptor::kSilentGrace (1 s).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  // The first call's connection makes room; its own may still be refused, so a few tries.
  bool served = false;
  for (int attempt = 0; attempt < 5 && !(served = Live(server.address())); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(served) << server.process().Log();
  EXPECT_GT(server.GrpcConnectionsRefused("silent"), 0.0);
  EXPECT_NE(server.process().Log().find("connections that had not sent a client's opening"),
            std::string::npos)
      << server.process().Log();
  server.CloseIdle();
  EXPECT_EQ(server.process().Stop(SIGTERM, std::chrono::seconds(60)), 0) << server.process().Log();
}

TEST(ContainerTest, JsonLogEscapesAStartupError) {
  const std::string repository = std::string(TEST_OUTPUT_DIR) + "/no \"such\"\trepo\\\nsitory";
  const std::string stdout_path = std::string(TEST_OUTPUT_DIR) + "/json_log_error.stdout";
  ChildProcess process({GRAPHSERVE_BINARY, "--grpc-address", "127.0.0.1:0", "--metrics-address",
                        "127.0.0.1:0", "--http-address", "127.0.0.1:0", "--model-repository", repository, "--log-format", "json"},
                       stdout_path, std::string(TEST_OUTPUT_DIR) + "/json_log_error.stderr");
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (process.Running() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(process.Running());

  const std::vector<json> records = ParseJsonLines(process.Log());
  bool found = false;
  for (const json& record : records) {
    if (record["level"] == "critical") {
      EXPECT_NE(record["message"].get<std::string>().find("'" + repository + "'"), std::string::npos)
          << record.dump();
      found = true;
    }
  }
  EXPECT_TRUE(found) << process.Log();
}

size_t CountLines(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

bool AnyMessageHolds(const std::vector<json>& records, const std::string& prefix, const std::string& part) {
  for (const json& record : records) {
    const std::string message = record.value("message", "");
    if (message.rfind(prefix, 0) == 0 && message.find(part) != std::string::npos) return true;
  }
  return false;
}

// A ModelInfer request whose model_name (field 1) is not UTF-8: libprotobuf logs an error for each
// one it parses, and gRPC refuses the call. Written by hand, since the generated class would log the
// same complaint in this process while serializing it.
const std::string kNotUtf8ModelInfer = std::string("\x0a\x04\xff\xfe\xfd\xfc", 6);
constexpr char kModelInfer[] = "/inference.GRPCInferenceService/ModelInfer";
constexpr char kProtobufUtf8Line[] =
    "protobuf: String field 'inference.ModelInferRequest.model_name' contains invalid UTF-8";

// A REST request cut off in its body: libmicrohttpd logs "Connection was closed by remote side with
// incomplete request" for each one.
void SendIncompleteRestRequest(int port) {
  const int fd = IdleConnection(port);
  if (fd < 0) return;
  const std::string partial = "POST /v2/models/tiny_scripted/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 99\r\n\r\n{";
  (void)send(fd, partial.data(), partial.size(), MSG_NOSIGNAL);
  close(fd);
}

// What an attacker did to the log: 2,000 bad gRPC requests from several threads, and 500 cut-off REST
// requests. With the default rate limit the log grows by a few dozen lines, all JSON, libprotobuf's
// included; the next line after the window tells how many were dropped, the metric counts them, and
// the server still serves.
TEST(LogFloodTest, BadRequestsLeaveABoundedLogOfJsonLines) {
  // One small model, so that the server is ready in seconds.
  const std::string repository = std::string(TEST_OUTPUT_DIR) + "/log_flood_repository";
  std::filesystem::remove_all(repository);
  std::filesystem::create_directories(repository);
  std::filesystem::create_directory_symlink(std::string(MODEL_REPOSITORY) + "/tiny_scripted",
                                            repository + "/tiny_scripted");
  const std::string stderr_path = std::string(TEST_OUTPUT_DIR) + "/log_flood.stderr";
  ServerProcess server(GRAPHSERVE_BINARY,
                       {"--device", TestDevice(), "--model-repository", repository, "--log-format", "json"},
                       std::string(TEST_OUTPUT_DIR) + "/log_flood.stdout", stderr_path);
  ASSERT_TRUE(server.WaitUntilReady(kStartTimeout)) << server.Log() << ReadText(stderr_path);
  const size_t lines_before = CountLines(server.Log());

  constexpr int kThreads = 4;
  constexpr int kCallsEach = 500;
  constexpr int kRestCalls = 500;
  const auto flood_start = std::chrono::steady_clock::now();
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      const auto channel = server.NewChannel();
      std::string response;
      for (int i = 0; i < kCallsEach; ++i) {
        if (!UnaryBytesCall(channel, kModelInfer, kNotUtf8ModelInfer, &response).ok()) ++refused;
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < kRestCalls; ++i) SendIncompleteRestRequest(server.http_port());
  });
  for (std::thread& thread : threads) thread.join();
  const double flood_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - flood_start).count();
  EXPECT_EQ(refused.load(), kThreads * kCallsEach);

  // 10 lines per 10 s window each of libprotobuf's source line and libmicrohttpd's message (and the
  // message of a REST request cut off before its headers, should one be), and a few of the
  // server's own at most.
  const size_t windows = 1 + static_cast<size_t>(flood_s / 10);
  const size_t flood_lines = CountLines(server.Log()) - lines_before;
  EXPECT_GE(flood_lines, 2u);
  EXPECT_LE(flood_lines, 3 * 10 * windows + 5) << "in " << flood_s << " s:\n" << server.Log();

  // Once the window is over, the next such request's line says how many were dropped. libmicrohttpd's
  // line may be its per-address connection limit's rather than the cut-off request's: 500 connections
  // from one address outrun --http-max-connections-per-client before the closed ones are reaped.
  bool told = false;
  const auto give_up = flood_start + std::chrono::seconds(40);
  while (!told && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::string response;
    EXPECT_FALSE(UnaryBytesCall(server.NewChannel(), kModelInfer, kNotUtf8ModelInfer, &response).ok());
    SendIncompleteRestRequest(server.http_port());
    // Searched as text: the line being written while the log is read may be incomplete.
    const std::string log = server.Log();
    told = std::regex_search(
               log, std::regex("protobuf: String field [^\n]*similar lines suppressed in the last")) &&
           std::regex_search(log, std::regex("http: [^\n]*similar lines suppressed in the last"));
  }
  EXPECT_TRUE(told) << server.Log();
  const Exposition metrics(HttpGet(server.metrics_port(), "/metrics").body);
  EXPECT_GE(metrics.Sum("graphserve_log_lines_suppressed_total", {{"kind", "protobuf"}}),
            static_cast<double>(kThreads * kCallsEach - 10 * windows));
  // Not every cut-off request is logged: one closed before libmicrohttpd read a byte is not.
  EXPECT_GT(metrics.Sum("graphserve_log_lines_suppressed_total", {{"kind", "libmicrohttpd"}}), 0.0);
  EXPECT_EQ(metrics.Sum("graphserve_log_lines_suppressed_total", {{"kind", "auth_failure"}}), 0.0);

  // Still serving.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  inference::ModelInferResponse response;
  const grpc::Status good =
      server.NewStub()->ModelInfer(&context, TokenRequest("tiny_scripted", TokenRows{{5, 6, 7}}), &response);
  EXPECT_TRUE(good.ok()) << good.error_message();

  EXPECT_EQ(server.Stop(SIGTERM, std::chrono::seconds(60)), 0) << server.Log();
  const std::vector<json> records = ParseJsonLines(server.Log());
  EXPECT_TRUE(AnyMessageStartsWith(records, kProtobufUtf8Line)) << server.Log();
  EXPECT_TRUE(AnyMessageHolds(records, kProtobufUtf8Line, "similar lines suppressed in the last")) << server.Log();
  EXPECT_TRUE(AnyMessageStartsWith(records, "stopped")) << server.Log();
  // Nothing wrote around the JSON log (libprotobuf wrote its own lines to stderr before).
  EXPECT_EQ(ReadText(stderr_path), "");
}

TEST(ContainerTest, UnknownLogFormatIsRefused) {
  const std::string log_path = std::string(TEST_OUTPUT_DIR) + "/bad_log_format.log";
  ChildProcess process({GRAPHSERVE_BINARY, "--log-format", "xml"}, log_path);
  EXPECT_EQ(process.Stop(0, std::chrono::seconds(30)), 2);
  EXPECT_NE(process.Log().find("--log-format"), std::string::npos) << process.Log();
}

}  // namespace
}  // namespace graphserve::testing
