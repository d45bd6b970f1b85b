// The HTTP front door as a client reaches it: the input is the bytes a client writes on one TCP
// connection (request lines, headers, bodies, several pipelined requests), sent to a real HttpServer
// (libmicrohttpd and graphserve's own header checks, content codings and token check) before the
// client closes its half. The handler decodes infer bodies as the REST endpoint does and checks what
// HttpServer promises of a request it hands over; the client checks that whatever comes back is an
// HTTP answer. Every 256 inputs a health probe on a new connection must still be answered, so that
// an input that wedges the server (a thread, the connection table) is a finding too.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "fuzz_support.h"
#include "graphserve/server/http/http_server.h"
#include "graphserve/server/security/auth.h"

namespace {

using graphserve::HttpReply;
using graphserve::HttpRequest;
using graphserve::HttpResponse;

// Small, so that inputs reach the 413 paths; the inflated bound is the same number.
constexpr size_t kMaxBodyBytes = 64 << 10;
// How long a client waits for the first byte of an answer: a fuzz input may be a request that never
// completes, so briefly (an answer missed on a loaded machine costs coverage, not a false finding);
// the health probe, which must be answered, longer than any answer takes on a loaded CI machine.
// Then how long the server may fall quiet once it has begun answering.
constexpr auto kInputFirstByteWait = std::chrono::milliseconds(50);
constexpr auto kProbeFirstByteWait = std::chrono::seconds(5);
constexpr int kQuietAfterAnswerMs = 2;
constexpr int kProbeEvery = 256;

std::unique_ptr<graphserve::TokenAuthenticator> authenticator;
std::unique_ptr<graphserve::HttpServer> server;

void Handle(const HttpRequest& request, HttpReply reply) {
  // http_server.h: an origin-form path, percent-decoded (a decoded "%3f" is a '?' of the path, not
  // a query), the body within its bound.
  FUZZ_CHECK(!request.method.empty(), "a handed request has a method");
  FUZZ_CHECK(!request.path.empty() && request.path.front() == '/', "a handed path starts with '/'");
  FUZZ_CHECK(request.path.find('\0') == std::string::npos, "no NUL reaches a handler's path");
  FUZZ_CHECK(request.body.size() <= kMaxBodyBytes, "a handed body, inflated, is within max_body_bytes");
  for (const auto& [name, value] : request.headers) {
    FUZZ_CHECK(!name.empty(), "a handed header has a name");
  }
  HttpResponse response;
  if (request.method == "POST" && request.path.size() > 6 &&
      request.path.compare(request.path.size() - 6, 6, "/infer") == 0) {
    std::optional<size_t> json_length;
    if (const std::string* header = request.Header("Inference-Header-Content-Length")) {
      json_length = std::strtoull(header->c_str(), nullptr, 10);
    }
    inference::ModelInferRequest decoded;
    graphserve::RestOutputFormat format;
    const graphserve::Status status =
        graphserve::ParseRestInferRequest(request.body, json_length, "encoder", "", &decoded, &format);
    response.status = status.ok() ? 200 : 400;
    response.body = status.ok() ? "{}" : status.message();
  } else {
    response.body = request.path;
  }
  reply.Send(std::move(response));
}

int Connect(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0, "a client socket");
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) return fd;
    const int error = errno;
    close(fd);
    // The harness's limits, not findings: ephemeral ports still in TIME_WAIT from earlier inputs
    // (EADDRNOTAVAIL, EAGAIN), and libFuzzer's -timeout alarm (SIGALRM, no SA_RESTART) cutting short
    // a connect that waits for its SYN to be sent again (EINTR; the server's own TIME_WAIT sockets
    // can turn a SYN away). A server that stops accepting is still found: the probe then hangs past
    // -timeout.
    FUZZ_CHECK(error == EADDRNOTAVAIL || error == EAGAIN || error == EINTR,
               std::string("connect to the fuzzed server: ") + std::strerror(error));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Writes `bytes` (as far as the server reads them), closes the client's half and returns what comes
// back before the server closes, or before it falls quiet once it has answered. libmicrohttpd
// 0.9.75's epoll loop is edge-triggered and can miss a close that arrives with the request itself, so
// a connection answered in full may stay open (until the idle timeout): quiet after an answer is the
// end of it, and the client resets the connection so that the server lets it go at once.
std::string Exchange(std::string_view bytes, std::chrono::milliseconds first_byte_wait) {
  const int fd = Connect(server->port());
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server answered early (413, 400) and closed: fine
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string answer;
  const auto deadline = std::chrono::steady_clock::now() + first_byte_wait;
  char buffer[16 << 10];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const int wait_ms = answer.empty() ? static_cast<int>(left.count()) : kQuietAfterAnswerMs;
    pollfd readable{fd, POLLIN, 0};
    if (wait_ms <= 0 || poll(&readable, 1, wait_ms) <= 0) break;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;  // closed (or reset after an early answer)
    answer.append(buffer, static_cast<size_t>(n));
  }
  const linger reset{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  close(fd);
  return answer;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  graphserve::fuzz::SilenceLogs();
  graphserve::AuthOptions auth;
  auth.env_tokens = "fuzz-token";
  graphserve::Status status = graphserve::TokenAuthenticator::Create(auth, nullptr, &authenticator);
  FUZZ_CHECK(status.ok(), "the fuzz token: " + status.message());
  graphserve::HttpServerOptions options;
  options.address = "127.0.0.1:0";
  options.flag = "--http-address";
  options.thread_count = 2;
  options.max_body_bytes = kMaxBodyBytes;
  options.content_codings = true;
  options.auth = authenticator.get();
  // Repository calls need the token, as with --auth-token-file: the token check runs on headers.
  options.needs_token = [](const std::string& path) { return path.rfind("/v2/repository", 0) == 0; };
  status = graphserve::HttpServer::Start(options, Handle, &server);
  FUZZ_CHECK(status.ok(), "the fuzzed HTTP server starts: " + status.message());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int inputs = 0;
  const std::string answer =
      Exchange(std::string_view(reinterpret_cast<const char*>(data), size), kInputFirstByteWait);
  FUZZ_CHECK(answer.empty() || answer.rfind("HTTP/1.", 0) == 0, "what comes back is an HTTP answer");
  if (++inputs % kProbeEvery == 0) {
    const std::string probe =
        Exchange("GET /v2/health/live HTTP/1.1\r\nHost: f\r\n\r\n", kProbeFirstByteWait);
    FUZZ_CHECK(probe.rfind("HTTP/1.1 200", 0) == 0, "the server still answers a health probe: " + probe);
  }
  return 0;
}
