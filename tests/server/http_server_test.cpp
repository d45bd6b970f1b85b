// HttpServer over real loopback sockets: answers sent later from another thread while the connection
// waits without holding a thread, keep-alive, chunked bodies, the body limit, a reply dropped
// unsent, and a drain that waits for the replies owed.
#include "graphserve/server/http/http_server.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "http_get.h"

namespace graphserve {
namespace {

// A client connection that sends raw HTTP/1.1 and reads Content-Length-delimited answers.
class Connection {
 public:
  explicit Connection(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    timeval timeout{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~Connection() { close(fd_); }

  bool connected() const { return connected_; }
  void Send(const std::string& text) { ASSERT_EQ(send(fd_, text.data(), text.size(), MSG_NOSIGNAL), ssize_t(text.size())); }

  // The next answer's status line and body; "" when the connection closed or timed out first.
  std::pair<std::string, std::string> Read() {
    while (true) {
      const size_t end = buffer_.find("\r\n\r\n");
      if (end != std::string::npos) {
        const std::string head = buffer_.substr(0, end);
        size_t length = 0;
        const size_t at = head.find("Content-Length: ");
        if (at != std::string::npos) length = std::stoul(head.substr(at + 16));
        if (buffer_.size() >= end + 4 + length) {
          std::string body = buffer_.substr(end + 4, length);
          buffer_.erase(0, end + 4 + length);
          return {head.substr(0, head.find("\r\n")), body};
        }
      }
      char chunk[4096];
      const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) return {"", ""};
      buffer_.append(chunk, size_t(n));
    }
  }

 private:
  int fd_;
  bool connected_ = false;
  std::string buffer_;
};

HttpServerOptions Options(int threads = 1) {
  HttpServerOptions options;
  options.address = "127.0.0.1:0";
  options.flag = "--test-address";
  options.thread_count = threads;
  options.max_body_bytes = 1024;
  return options;
}

HttpResponse Text(std::string body) {
  HttpResponse response;
  response.content_type = "text/plain";
  response.body = std::move(body);
  return response;
}

TEST(HttpServerTest, OneThreadHoldsManyRequestsWhoseAnswersComeLaterFromAnotherThread) {
  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<std::pair<std::string, HttpReply>> waiting;
  std::unique_ptr<HttpServer> server;
  ASSERT_TRUE(HttpServer::Start(
                  Options(/*threads=*/1),
                  [&](const HttpRequest& request, HttpReply reply) {
                    std::lock_guard<std::mutex> lock(mutex);
                    waiting.emplace_back(request.path, std::move(reply));
                    arrived.notify_all();
                  },
                  &server)
                  .ok());
  // Were a request to hold the server's one thread until answered, the second would never arrive.
  constexpr int kRequests = 16;
  std::vector<testing::HttpResponse> answers(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] { answers[i] = testing::HttpGet(server->port(), "/r" + std::to_string(i)); });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(arrived.wait_for(lock, std::chrono::seconds(10), [&] { return waiting.size() == kRequests; }))
        << waiting.size() << " of " << kRequests << " requests reached the handler";
  }
  std::thread answerer([&] {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& [path, reply] : waiting) reply.Send(Text("answer to " + path));
    waiting.clear();
  });
  answerer.join();
  for (std::thread& client : clients) client.join();
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(answers[i].status, 200);
    EXPECT_EQ(answers[i].body, "answer to /r" + std::to_string(i));
  }
}

TEST(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnectionWithTheirBodies) {
  std::unique_ptr<HttpServer> server;
  ASSERT_TRUE(HttpServer::Start(
                  Options(),
                  [](const HttpRequest& request, HttpReply reply) {
                    const std::string* type = request.Header("content-TYPE");
                    reply.Send(Text(request.method + " " + request.path + " " + (type ? *type : "-") + " " +
                                    request.body));
                  },
                  &server)
                  .ok());
  Connection connection(server->port());
  ASSERT_TRUE(connection.connected());
  connection.Send("GET /a?q=1 HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(connection.Read(), std::make_pair(std::string("HTTP/1.1 200 OK"), std::string("GET /a - ")));
  connection.Send("POST /b HTTP/1.1\r\nHost: x\r\nContent-Type: text/x\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(connection.Read(), std::make_pair(std::string("HTTP/1.1 200 OK"), std::string("POST /b text/x hello")));
  // A chunked body is assembled before the handler sees it.
  connection.Send("POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
  EXPECT_EQ(connection.Read(), std::make_pair(std::string("HTTP/1.1 200 OK"), std::string("POST /c - abcde")));
}

TEST(HttpServerTest, ABodyOverTheLimitIsAnswered413WithoutReachingTheHandler) {
  bool handled = false;
  std::unique_ptr<HttpServer> server;
  ASSERT_TRUE(HttpServer::Start(
                  Options(),
                  [&](const HttpRequest&, HttpReply reply) {
                    handled = true;
                    reply.Send(Text("ok"));
                  },
                  &server)
                  .ok());
  Connection declared(server->port());
  declared.Send("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 2048\r\n\r\n");
  const auto [status, body] = declared.Read();
  EXPECT_EQ(status, "HTTP/1.1 413 Content Too Large");
  EXPECT_EQ(body, "{\"error\":\"the request body is larger than the 1024 bytes graphserve accepts\"}");

  Connection chunked(server->port());
  chunked.Send("POST /big HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" "400\r\n" +
               std::string(1024, 'a') + "\r\n1\r\nb\r\n0\r\n\r\n");
  EXPECT_EQ(chunked.Read().first, "HTTP/1.1 413 Content Too Large");
  EXPECT_FALSE(handled);
  // Refusals are no replies owed: stopping does not wait for them.
  const auto stopping = std::chrono::steady_clock::now();
  server.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, HttpServer::kFlushTimeout / 2);
}

TEST(HttpServerTest, AReplyDroppedUnsentAnswers500) {
  std::unique_ptr<HttpServer> server;
  ASSERT_TRUE(HttpServer::Start(Options(), [](const HttpRequest&, HttpReply) {}, &server).ok());
  const testing::HttpResponse answer = testing::HttpGet(server->port(), "/x");
  EXPECT_EQ(answer.status, 500);
  EXPECT_EQ(answer.body, "{\"error\":\"the request was dropped without an answer\"}");
}

TEST(HttpServerTest, ABusyAddressIsRefusedNamingTheFlag) {
  std::unique_ptr<HttpServer> first;
  const auto handler = [](const HttpRequest&, HttpReply reply) { reply.Send(Text("")); };
  ASSERT_TRUE(HttpServer::Start(Options(), handler, &first).ok());
  HttpServerOptions busy = Options();
  busy.address = "127.0.0.1:" + std::to_string(first->port());
  std::unique_ptr<HttpServer> second;
  const Status status = HttpServer::Start(busy, handler, &second);
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(status.message().rfind("--test-address: cannot listen on " + busy.address, 0), 0u) << status.message();
  EXPECT_EQ(second, nullptr);
}

// A server whose handler keeps the reply of the request it gets, for the test to send when it likes;
// and a client that has sent that request and waits for its answer.
class HeldRequest {
 public:
  HeldRequest() {
    EXPECT_TRUE(HttpServer::Start(
                    Options(),
                    [this](const HttpRequest&, HttpReply reply) {
                      std::lock_guard<std::mutex> lock(mutex_);
                      held_.emplace(std::move(reply));
                    },
                    &server)
                    .ok());
    port = server->port();
    client_ = std::thread([this] { answer_ = testing::HttpGet(port, "/slow"); });
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (held_) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~HeldRequest() {
    if (answerer_.joinable()) answerer_.join();
    if (client_.joinable()) client_.join();
  }

  // Sends the held reply, with body `body`, from another thread after `delay`.
  void AnswerLater(std::chrono::milliseconds delay, std::string body) {
    answerer_ = std::thread([this, delay, body = std::move(body)] {
      std::this_thread::sleep_for(delay);
      std::lock_guard<std::mutex> lock(mutex_);
      held_->Send(Text(body));
    });
  }

  // What the client got, once it got it.
  testing::HttpResponse Answer() {
    client_.join();
    return answer_;
  }

  std::unique_ptr<HttpServer> server;
  int port = 0;

 private:
  std::mutex mutex_;
  std::optional<HttpReply> held_;
  std::thread client_;
  std::thread answerer_;
  testing::HttpResponse answer_;
};

TEST(HttpServerTest, StopAcceptingRefusesNewConnectionsAndTheDestructorWaitsForOwedReplies) {
  HeldRequest request;
  request.server->StopAccepting();
  EXPECT_FALSE(Connection(request.port).connected());
  request.AnswerLater(std::chrono::milliseconds(200), "late");
  request.server.reset();  // returns once the held reply went out
  const testing::HttpResponse answer = request.Answer();
  EXPECT_EQ(answer.status, 200);
  EXPECT_EQ(answer.body, "late");
}

TEST(HttpServerTest, WaitForRepliesReturnsOnceTheOwedRepliesAreSentOrAtItsDeadline) {
  HeldRequest request;
  request.server->StopAccepting();
  const auto waited_from = std::chrono::steady_clock::now();
  EXPECT_FALSE(request.server->WaitForReplies(waited_from + std::chrono::milliseconds(100)));
  EXPECT_GE(std::chrono::steady_clock::now() - waited_from, std::chrono::milliseconds(100));
  request.AnswerLater(std::chrono::milliseconds(200), "drained");
  EXPECT_TRUE(request.server->WaitForReplies(std::chrono::steady_clock::now() + std::chrono::seconds(30)));
  const testing::HttpResponse answer = request.Answer();
  EXPECT_EQ(answer.status, 200);
  EXPECT_EQ(answer.body, "drained");
  EXPECT_TRUE(request.server->WaitForReplies(std::chrono::steady_clock::now()));
}

}  // namespace
}  // namespace graphserve
