// HttpServer over real loopback sockets: answers sent later from another thread while the connection
// waits without holding a thread, keep-alive, chunked bodies, the body limit, compressed bodies and
// answers, a reply dropped unsent, a drain that waits for the replies owed, and the bounds on
// clients (buffer budget, phase timeouts, connection caps).
#include "graphserve/server/http/http_server.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "graphserve/server/http/content_coding.h"
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
  // Send to a connection the server may have closed meanwhile.
  void SendIfOpen(const std::string& text) { (void)send(fd_, text.data(), text.size(), MSG_NOSIGNAL); }

  // The next answer's status line and body; "" when the connection closed or timed out first.
  std::pair<std::string, std::string> Read() {
    while (true) {
      const size_t end = buffer_.find("\r\n\r\n");
      if (end != std::string::npos) {
        const std::string head = head_ = buffer_.substr(0, end);
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

  // The status line and headers of the answer Read returned last.
  const std::string& head() const { return head_; }

  // Whether the server closes the connection (end of stream or reset) within `wait`, reading and
  // dropping whatever it sends meanwhile.
  bool ClosedWithin(std::chrono::milliseconds wait) {
    const auto give_up = std::chrono::steady_clock::now() + wait;
    while (std::chrono::steady_clock::now() < give_up) {
      timeval slice{0, 20000};
      setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &slice, sizeof(slice));
      char chunk[65536];
      const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return true;
    }
    return false;
  }

  // A receive buffer of a few KiB, so that an answer the test does not read fills it at once.
  void ShrinkReceiveBuffer() {
    int bytes = 4096;
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  }

 private:
  int fd_;
  bool connected_ = false;
  std::string buffer_;
  std::string head_;
};

std::string Post(const std::string& headers, const std::string& body) {
  return "POST /p HTTP/1.1\r\nHost: x\r\n" + headers + "Content-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

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

TEST(HttpServerTest, AClientThatLeavesWhileItsAnswerIsComputedIsToldToItsHandlerOnce) {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, HttpReply> owed;
  std::map<std::string, int> gone;  // OnClientGone calls by path
  std::unique_ptr<HttpServer> server;
  ASSERT_TRUE(HttpServer::Start(
                  Options(),
                  [&](const HttpRequest& request, HttpReply reply) {
                    const std::string path = request.path;
                    reply.OnClientGone([&, path] {
                      std::lock_guard<std::mutex> lock(mutex);
                      ++gone[path];
                      changed.notify_all();
                    });
                    std::lock_guard<std::mutex> lock(mutex);
                    owed.emplace(path, std::move(reply));
                    changed.notify_all();
                  },
                  &server)
                  .ok());
  const auto wait_for = [&](const std::function<bool()>& condition) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(10), condition);
  };
  auto leaving = std::make_unique<Connection>(server->port());
  Connection staying(server->port());
  leaving->Send("GET /leaves HTTP/1.1\r\nHost: x\r\n\r\n");
  staying.Send("GET /stays HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(wait_for([&] { return owed.size() == 2; }));
  // A pipelined request is the client staying, not leaving.
  staying.Send("GET /next HTTP/1.1\r\nHost: x\r\n\r\n");
  leaving.reset();
  ASSERT_TRUE(wait_for([&] { return gone["/leaves"] == 1; }));
  std::this_thread::sleep_for(3 * HttpServer::kClientGonePoll);
  {
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_EQ(gone["/leaves"], 1);  // once
    EXPECT_EQ(gone["/stays"], 0);
    owed.at("/leaves").Send(Text("nobody reads this"));
    owed.at("/stays").Send(Text("stayed"));
  }
  EXPECT_EQ(staying.Read().second, "stayed");
  ASSERT_TRUE(wait_for([&] { return owed.count("/next") == 1; }));
  // Answered, then closed: too late to call it gone.
  {
    std::lock_guard<std::mutex> lock(mutex);
    owed.at("/next").Send(Text("next"));
  }
  EXPECT_EQ(staying.Read().second, "next");
  std::this_thread::sleep_for(3 * HttpServer::kClientGonePoll);
  std::lock_guard<std::mutex> lock(mutex);
  EXPECT_EQ(gone["/stays"], 0);
  EXPECT_EQ(gone["/next"], 0);
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

TEST(HttpServerTest, ARequestWithAnUnframedBodyIsAnsweredAndItsConnectionClosed) {
  std::unique_ptr<HttpServer> server;
  ASSERT_TRUE(HttpServer::Start(
                  Options(),
                  [](const HttpRequest& request, HttpReply reply) { reply.Send(Text(request.path)); },
                  &server)
                  .ok());
  // Neither Content-Length nor chunked: what follows the headers could be its body or the next
  // request, depending on who reads it, so nothing after the answer is read on this connection.
  Connection connection(server->port());
  ASSERT_TRUE(connection.connected());
  connection.Send("POST /unframed HTTP/1.1\r\nHost: x\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(connection.Read().second, "/unframed");
  EXPECT_NE(connection.head().find("Connection: close"), std::string::npos) << connection.head();
  EXPECT_EQ(connection.Read(), std::make_pair(std::string(), std::string()));
  // A framed body keeps the connection open for the next request.
  Connection framed(server->port());
  framed.Send(Post("", "x") + "GET /next HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(framed.Read().second, "/p");
  EXPECT_EQ(framed.Read().second, "/next");
}

TEST(HttpServerTest, ARequestTargetOrHeaderNameOutsideTheGrammarIsAnswered400WithoutReachingTheHandler) {
  std::atomic<int> handled{0};
  std::unique_ptr<HttpServer> server;
  ASSERT_TRUE(HttpServer::Start(
                  Options(),
                  [&handled](const HttpRequest& request, HttpReply reply) {
                    ++handled;
                    reply.Send(Text(request.path));
                  },
                  &server)
                  .ok());
  const auto expect_refused = [&server](const std::string& request, const std::string& reason) {
    Connection connection(server->port());
    connection.Send(request);
    const auto [status, body] = connection.Read();
    EXPECT_EQ(status, "HTTP/1.1 400 Bad Request") << request;
    EXPECT_NE(body.find(reason), std::string::npos) << request << ": " << body;
  };
  for (const std::string target : {"v2/models/m/infer", "*", "http://x/v2"}) {
    expect_refused("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n", "request target");
  }
  // Nor a header name that is not a token: some proxies read "Transfer-Encoding :" as the framing.
  for (const std::string line : {"Transfer-Encoding : chunked", "Bad Name: x", "Bad\x01Name: y"}) {
    expect_refused("POST /p HTTP/1.1\r\nHost: x\r\n" + line + "\r\nContent-Length: 1\r\n\r\nx",
                   "not a token");
  }
  EXPECT_EQ(handled, 0);
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

TEST(HttpServerTest, AScreenRefusalIsAnsweredFromTheHeadersWithoutReachingTheHandler) {
  bool handled = false;
  HttpServerOptions options = Options();
  options.screen = [](const HttpRequest& request) -> std::optional<HttpRefusal> {
    const std::string* key = request.Header("x-key");
    if (key != nullptr && *key == "open") return std::nullopt;
    return HttpRefusal{403, "no key"};
  };
  std::unique_ptr<HttpServer> server;
  ASSERT_TRUE(HttpServer::Start(
                  options,
                  [&](const HttpRequest& request, HttpReply reply) {
                    handled = true;
                    reply.Send(Text(request.body));
                  },
                  &server)
                  .ok());
  // Refused with the body announced but never sent: the answer cannot have waited for it.
  Connection refused(server->port());
  refused.Send("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n");
  const auto [status, body] = refused.Read();
  EXPECT_EQ(status, "HTTP/1.1 403 Forbidden");
  EXPECT_EQ(body, "{\"error\":\"no key\"}");
  EXPECT_FALSE(handled);
  // Header names compare without case.
  Connection admitted(server->port());
  admitted.Send(Post("X-Key: open\r\n", "body"));
  EXPECT_EQ(admitted.Read(), std::make_pair(std::string("HTTP/1.1 200 OK"), std::string("body")));
  EXPECT_TRUE(handled);
}

TEST(HttpServerTest, CompressedBodiesReachTheHandlerInflatedWithinTheBodyLimit) {
  std::atomic<int> handled{0};
  HttpServerOptions options = Options();  // 1024 bytes of body
  options.content_codings = true;
  std::unique_ptr<HttpServer> server;
  ASSERT_TRUE(HttpServer::Start(
                  options,
                  [&](const HttpRequest& request, HttpReply reply) {
                    ++handled;
                    reply.Send(Text(request.body));
                  },
                  &server)
                  .ok());
  const std::string limit(1024, 'x');  // inflated, exactly the limit
  for (ContentCoding coding : {ContentCoding::kGzip, ContentCoding::kDeflate}) {
    Connection connection(server->port());
    connection.Send(Post(std::string("Content-Encoding: ") + ContentCodingName(coding) + "\r\n",
                         CompressBody(limit, coding)));
    EXPECT_EQ(connection.Read(), std::make_pair(std::string("HTTP/1.1 200 OK"), limit));
  }

  // Within the limit on the wire, far beyond it inflated: refused, the rest never inflated.
  const std::string bomb = CompressBody(std::string(128 << 10, '\0'), ContentCoding::kGzip);
  ASSERT_LT(bomb.size(), 1024u);
  Connection bombed(server->port());
  bombed.Send(Post("Content-Encoding: gzip\r\n", bomb));
  EXPECT_EQ(bombed.Read(), std::make_pair(std::string("HTTP/1.1 413 Content Too Large"),
                                          std::string("{\"error\":\"the request body inflates (Content-Encoding: gzip) "
                                                      "to more than the 1024 bytes graphserve accepts\"}")));

  const std::string whole = CompressBody("{}", ContentCoding::kDeflate);
  Connection truncated(server->port());
  truncated.Send(Post("Content-Encoding: deflate\r\n", whole.substr(0, whole.size() - 2)));
  EXPECT_EQ(truncated.Read(),
            std::make_pair(std::string("HTTP/1.1 400 Bad Request"),
                           std::string("{\"error\":\"body: not one complete deflate stream, as its Content-Encoding "
                                       "says\"}")));

  // Another coding is refused before its body is read, naming those served.
  Connection brotli(server->port());
  brotli.Send(Post("Content-Encoding: br\r\n", "...."));
  EXPECT_EQ(brotli.Read(), std::make_pair(std::string("HTTP/1.1 415 Unsupported Media Type"),
                                          std::string("{\"error\":\"Content-Encoding: 'br' is not served (gzip, "
                                                      "deflate or identity)\"}")));
  EXPECT_NE(brotli.head().find("\r\nAccept-Encoding: gzip, deflate"), std::string::npos) << brotli.head();
  EXPECT_EQ(handled.load(), 2);
}

TEST(HttpServerTest, AnswersAreCompressedOnlyForAClientThatAcceptsIt) {
  const std::string answer(4000, 'a');
  const auto handler = [&](const HttpRequest&, HttpReply reply) { reply.Send(Text(answer)); };
  HttpServerOptions options = Options();
  options.content_codings = true;
  std::unique_ptr<HttpServer> server;
  ASSERT_TRUE(HttpServer::Start(options, handler, &server).ok());
  const auto inflated = [](const std::string& body, ContentCoding coding) {
    BodyInflater inflater(coding, 1 << 20);
    std::string text;
    EXPECT_EQ(inflater.Add(body, &text), BodyInflater::Result::kMore);
    EXPECT_TRUE(inflater.Complete());
    return text;
  };
  Connection connection(server->port());
  connection.Send("GET /a HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n");
  std::string body = connection.Read().second;
  EXPECT_NE(connection.head().find("\r\nContent-Encoding: gzip"), std::string::npos) << connection.head();
  EXPECT_NE(connection.head().find("\r\nVary: Accept-Encoding"), std::string::npos) << connection.head();
  EXPECT_LT(body.size(), answer.size() / 10);
  EXPECT_EQ(inflated(body, ContentCoding::kGzip), answer);

  connection.Send("GET /a HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip;q=0.1, deflate;q=0.5\r\n\r\n");
  body = connection.Read().second;
  EXPECT_NE(connection.head().find("\r\nContent-Encoding: deflate"), std::string::npos) << connection.head();
  EXPECT_EQ(inflated(body, ContentCoding::kDeflate), answer);

  connection.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(connection.Read().second, answer);
  EXPECT_EQ(connection.head().find("Content-Encoding"), std::string::npos) << connection.head();

  // Without content codings (the /metrics port) neither header is read: the body passes as sent.
  std::unique_ptr<HttpServer> plain;
  ASSERT_TRUE(HttpServer::Start(
                  Options(), [](const HttpRequest& request, HttpReply reply) { reply.Send(Text(request.body)); },
                  &plain)
                  .ok());
  Connection unread(plain->port());
  unread.Send(Post("Content-Encoding: br\r\nAccept-Encoding: gzip\r\n", "as sent"));
  EXPECT_EQ(unread.Read(), std::make_pair(std::string("HTTP/1.1 200 OK"), std::string("as sent")));
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

// What the bounds' callbacks report: bytes held (summed) and connections closed, by why.
struct BoundsLog {
  std::mutex mutex;
  int64_t held = 0;
  std::map<HttpClosure, int> closed;

  void Attach(HttpServerOptions* options) {
    options->on_buffered_bytes = [this](int64_t delta) {
      std::lock_guard<std::mutex> lock(mutex);
      held += delta;
    };
    options->on_closed = [this](HttpClosure why) {
      std::lock_guard<std::mutex> lock(mutex);
      ++closed[why];
    };
  }
  int64_t Held() {
    std::lock_guard<std::mutex> lock(mutex);
    return held;
  }
  int Closed(HttpClosure why) {
    std::lock_guard<std::mutex> lock(mutex);
    return closed[why];
  }
};

// Polls `value` until it returns `wanted`, for up to 5 s; true when it did.
template <typename Read>
bool Becomes(Read value, int64_t wanted) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (value() != wanted && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return value() == wanted;
}

TEST(HttpServerTest, BodiesPastTheBufferBudgetAre503UnreadAndTheirBytesComeBack) {
  BoundsLog log;
  HttpServerOptions options = Options();  // 1024 bytes of body
  options.bounds.max_buffered_bytes = 2048;
  log.Attach(&options);
  std::atomic<int> handled{0};
  std::unique_ptr<HttpServer> server;
  ASSERT_TRUE(HttpServer::Start(
                  options,
                  [&](const HttpRequest&, HttpReply reply) {
                    ++handled;
                    reply.Send(Text("ok"));
                  },
                  &server)
                  .ok());
  // Two bodies of the limit, declared and half sent: the whole budget, held from their headers.
  auto first = std::make_unique<Connection>(server->port());
  auto second = std::make_unique<Connection>(server->port());
  for (Connection* holder : {first.get(), second.get()}) {
    holder->Send("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n\r\n" + std::string(512, 'a'));
  }
  ASSERT_TRUE(Becomes([&] { return log.Held(); }, 2048));
  Connection declared(server->port());
  declared.Send("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n");
  EXPECT_EQ(declared.Read().first, "HTTP/1.1 503 Service Unavailable");
  EXPECT_NE(declared.head().find("Retry-After: 1"), std::string::npos) << declared.head();
  Connection chunked(server->port());
  chunked.Send(
      "POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "a\r\n0123456789\r\n0\r\n\r\n");
  const auto [status, body] = chunked.Read();
  EXPECT_EQ(status, "HTTP/1.1 503 Service Unavailable");
  EXPECT_EQ(body,
            "{\"error\":\"the request bodies and unsent answers held for all clients (at most 2048 bytes, "
            "--http-max-buffered-bytes) leave no room for this body; retry later\"}");
  EXPECT_EQ(handled.load(), 0);
  EXPECT_EQ(log.Held(), 2048);  // the refused bodies took nothing
  // The holders leave: their bytes come back, and a body fits again.
  first.reset();
  second.reset();
  ASSERT_TRUE(Becomes([&] { return log.Held(); }, 0));
  Connection fits(server->port());
  fits.Send(Post("", std::string(1024, 'b')));
  EXPECT_EQ(fits.Read().first, "HTTP/1.1 200 OK");
  EXPECT_EQ(handled.load(), 1);
}

TEST(HttpServerTest, EachPhaseTimeoutClosesAConnectionHoweverManyBytesItTrickles) {
  BoundsLog log;
  HttpServerOptions options = Options();
  constexpr std::chrono::milliseconds kTimeout{300};
  options.bounds.header_timeout = options.bounds.body_timeout = options.bounds.keep_alive_timeout = kTimeout;
  log.Attach(&options);
  std::unique_ptr<HttpServer> server;
  ASSERT_TRUE(HttpServer::Start(
                  options, [](const HttpRequest&, HttpReply reply) { reply.Send(Text("ok")); }, &server)
                  .ok());
  Connection headers(server->port()), body(server->port()), kept(server->port()), silent(server->port());
  headers.Send("GET /h HTTP/1.1\r\nHost: x\r\n");
  body.Send("POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n");
  // Kept alive for a second request 200 ms after the first, each within the timeout.
  for (int i = 0; i < 2; ++i) {
    kept.Send("GET /k HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(kept.Read().first, "HTTP/1.1 200 OK");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  // A byte every 20 ms for three timeouts: never silent, yet closed.
  const auto started = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - started < 3 * kTimeout) {
    headers.SendIfOpen("a");
    body.SendIfOpen("b");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (Connection* trickling : {&headers, &body, &kept, &silent}) {
    EXPECT_TRUE(trickling->ClosedWithin(std::chrono::seconds(2)));
  }
  EXPECT_TRUE(Becomes([&] { return log.Closed(HttpClosure::kHeaderTimeout); }, 2));  // trickled and silent
  EXPECT_EQ(log.Closed(HttpClosure::kBodyTimeout), 1);
  EXPECT_EQ(log.Closed(HttpClosure::kKeepAliveTimeout), 1);
}

TEST(HttpServerTest, AnAnswerItsClientDoesNotReadIsDroppedAfterTheSendTimeout) {
  BoundsLog log;
  HttpServerOptions options = Options();
  options.bounds.send_timeout = std::chrono::milliseconds(300);
  log.Attach(&options);
  std::unique_ptr<HttpServer> server;
  constexpr size_t kAnswerBytes = 64u << 20;  // far more than the sockets' buffers take
  std::atomic<int> delivered{0}, undelivered{0};
  ASSERT_TRUE(HttpServer::Start(
                  options,
                  [&](const HttpRequest& request, HttpReply reply) {
                    HttpResponse answer =
                        Text(request.path == "/big" ? std::string(kAnswerBytes, 'x') : "ok");
                    answer.on_finished = [&](bool whole) { ++(whole ? delivered : undelivered); };
                    reply.Send(std::move(answer));
                  },
                  &server)
                  .ok());
  Connection reader(server->port());
  reader.ShrinkReceiveBuffer();
  reader.Send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(Becomes([&] { return log.Held(); }, int64_t{kAnswerBytes}));
  EXPECT_TRUE(Becomes([&] { return log.Closed(HttpClosure::kSendTimeout); }, 1));
  // libmicrohttpd closed the connection and completed its exchange: the answer's bytes came back.
  // (What the kernel had already queued still reaches the client, slowly through its small window.)
  EXPECT_TRUE(Becomes([&] { return log.Held(); }, 0));
  // Told it was not written whole; an answer that was is told so.
  EXPECT_TRUE(Becomes([&] { return undelivered.load(); }, 1));
  EXPECT_EQ(delivered.load(), 0);
  Connection small(server->port());
  small.Send("GET /small HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(small.Read().second, "ok");
  EXPECT_TRUE(Becomes([&] { return delivered.load(); }, 1));
  EXPECT_EQ(undelivered.load(), 1);
}

TEST(HttpServerTest, ConnectionsPastTheCapOrTheCapPerAddressAreClosedAtOnce) {
  BoundsLog log;
  HttpServerOptions options = Options();
  options.max_connections = 4;
  log.Attach(&options);
  std::unique_ptr<HttpServer> server;
  const auto ok = [](const HttpRequest&, HttpReply reply) { reply.Send(Text("ok")); };
  ASSERT_TRUE(HttpServer::Start(options, ok, &server).ok());
  std::vector<std::unique_ptr<Connection>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<Connection>(server->port()));
    held.back()->Send("GET /held HTTP/1.1\r\n");  // never finished
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // all four accepted (one thread)
  Connection late(server->port());
  const auto knocked = std::chrono::steady_clock::now();
  EXPECT_TRUE(late.ClosedWithin(std::chrono::seconds(2)));
  EXPECT_LT(std::chrono::steady_clock::now() - knocked, std::chrono::seconds(1));
  EXPECT_EQ(log.Closed(HttpClosure::kConnectionCap), 1);
  held.pop_back();  // one leaves: the next is taken
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Connection next(server->port());
  next.Send("GET /n HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(next.Read().first, "HTTP/1.1 200 OK");

  HttpServerOptions per_client = Options();
  per_client.bounds.max_connections_per_client = 2;
  std::unique_ptr<HttpServer> shared;
  ASSERT_TRUE(HttpServer::Start(per_client, ok, &shared).ok());
  Connection one(shared->port()), two(shared->port()), three(shared->port());
  EXPECT_TRUE(three.ClosedWithin(std::chrono::seconds(1)));
  one.Send("GET /1 HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(one.Read().first, "HTTP/1.1 200 OK");
}

}  // namespace
}  // namespace graphserve
