#pragma once
// An HTTP/1.1 server on libmicrohttpd for graphserve's HTTP ports (the KServe v2 REST endpoint and
// /metrics). libmicrohttpd parses HTTP (keep-alive, chunked bodies, Expect: 100-continue); this class
// hands each complete request to a handler that may answer later from any thread: the connection is
// suspended meanwhile, so no thread waits for inference and one thread serves many connections.
// With HttpServerOptions::tls it serves HTTPS (http_tls.h: reloadable certificates, mutual TLS checked
// in the handshake); with ::auth it refuses a request without a token from its headers alone; with
// ::content_codings it inflates compressed bodies before the handler sees them and compresses answers;
// with ::bounds (http_client_bounds.h) it holds bodies and unsent answers to a budget, closes
// connections that outlast a phase's timeout, and caps connections per client address. Past
// ::max_connections a connection is closed at once.
//
// Why libmicrohttpd: Debian packages it (C ABI, so it unpacks onto the CUDA host like gRPC), its
// epoll thread pool keeps keep-alive connections cheap, and suspend/resume suits answers that come
// from the batcher. civetweb (which prometheus-cpp brings) gives each connection a thread and starts
// its threads with a fixed 100 KiB stack that glibc refuses once libtorch's static TLS is larger (see
// metrics_endpoint.h); cpp-httplib also blocks a thread per request in flight.
//
// Thread safety: handlers run on the server's threads, several at once; HttpReply::Send may be called
// from any thread. Lifetime: construct and destroy from one controlling thread; the destructor waits
// for every reply still owed (so whatever answers them must finish first) and lets answers given
// finish writing for up to kFlushTimeout.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graphserve/engine/status.h"
#include "graphserve/server/common/thread_annotations.h"
#include "graphserve/server/http/http_client_bounds.h"

struct MHD_Connection;
struct MHD_Daemon;

namespace graphserve {

class HttpTls;
class TokenAuthenticator;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...; HEAD arrives as "HEAD" and its answer's body is dropped
  std::string path;    // percent-decoded, without the query string
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // inflated, when it came compressed (HttpServerOptions::content_codings)
  std::string peer;  // the client's address, set only where a token is checked (for the log)

  // A header's value (names compare case-insensitively); nullptr when absent.
  const std::string* Header(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;  // inflated, when it came compressed (HttpServerOptions::content_codings)
  // Told once, on a libmicrohttpd thread, whether the answer was written whole (true) or its
  // connection closed or timed out first (false); may be empty.
  std::function<void(bool delivered)> on_finished;
};

class HttpServer;
namespace http_internal {
struct Exchange;
struct Callbacks;
}

// The answer owed to one request; move-only. Send it exactly once, from any thread; the request
// stays valid until then. Destroyed unsent, it answers 500, so that a connection is never left
// hanging.
class HttpReply {
 public:
  explicit HttpReply(http_internal::Exchange* exchange) : exchange_(exchange) {}
  HttpReply(HttpReply&& other) noexcept : exchange_(std::exchange(other.exchange_, nullptr)) {}
  HttpReply& operator=(HttpReply&&) = delete;
  ~HttpReply();

  void Send(HttpResponse response);

  // `cancel` runs at most once, on the server's own watcher thread, when the client closes its
  // connection (or its sending half) while this reply is owed and the connection waits for it:
  // whoever would compute the answer can stop. Never after Send. It must not block, and must be safe
  // to call after the handler's own state is gone (capture weak references). Replaces an earlier one.
  void OnClientGone(std::function<void()> cancel);

 private:
  http_internal::Exchange* exchange_;
};

// An answer given from a request's headers alone (HttpServerOptions::screen): its status and the
// error's message.
struct HttpRefusal {
  int status;
  std::string message;
};

struct HttpServerOptions {
  // HOST:PORT (port 0 picks a free one); `flag` names it in errors ("--http-address").
  std::string address;
  std::string flag;
  // Threads that run the event loops and the handlers (each serves many connections).
  int thread_count = 4;
  // Larger bodies are answered 413 without being read.
  size_t max_body_bytes = 256u << 20;
  // Content codings (content_coding.h): a body in gzip or deflate is inflated as it arrives, up to
  // max_body_bytes inflated (beyond: 413, the rest never inflated; not a whole stream: 400), and one in
  // any other coding is answered 415 before it is read; an answer is compressed when the request's
  // Accept-Encoding asks for gzip or deflate. Off: Content-Encoding and Accept-Encoding are not read.
  bool content_codings = false;
  // Connections open at once; one arriving past it is closed at once (at most thread_count more may
  // slip in while several threads accept together).
  int max_connections = 1024;
  // A connection that moves no byte for this long is closed (libmicrohttpd's own timeout; `bounds`
  // holds the ones that a client trickling bytes cannot reset).
  std::chrono::seconds idle_timeout{60};
  // Memory, time and connections per address that clients may hold (http_client_bounds.h); all off
  // unless set.
  HttpClientBounds bounds;
  // Told when the bytes held against bounds.max_buffered_bytes change, by how much; may be empty.
  // Called on any thread, without the server's locks held.
  std::function<void(int64_t delta)> on_buffered_bytes;
  // Told of each connection the server closed or refused to hold a bound; may be empty. Called on
  // the server's threads, without its locks held.
  std::function<void(HttpClosure why)> on_closed;
  // HTTPS with these credentials; null: plaintext.
  std::shared_ptr<HttpTls> tls;
  // Set: a request whose path needs_token accepts must carry an accepted token, checked when its
  // headers arrive (before its body is read); refused with 401 and counted as `auth_endpoint`.
  const TokenAuthenticator* auth = nullptr;
  std::function<bool(const std::string& path)> needs_token;
  const char* auth_endpoint = "http";
  // Set: asked once a request's headers arrive, after the token check and before its body is read
  // (the REST endpoint's API gate, api_groups.h); a refusal it returns is answered instead, and the
  // body is never read. Called on the server's threads, several at once.
  std::function<std::optional<HttpRefusal>(const HttpRequest& request)> screen;
};

class HttpServer {
 public:
  using Handler = std::function<void(const HttpRequest& request, HttpReply reply)>;
  // How long the destructor lets answers already given finish writing.
  static constexpr std::chrono::seconds kFlushTimeout{10};
  // How often connections waiting for their answers are checked for a client that left.
  static constexpr std::chrono::milliseconds kClientGonePoll{100};

  // Listens and serves; UNAVAILABLE naming the flag when it cannot listen.
  static Status Start(const HttpServerOptions& options, Handler handler, std::unique_ptr<HttpServer>* server);
  // Stops taking connections, waits for the replies still owed, then closes every connection.
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Stops accepting connections; requests on open connections are still handled (e.g. while the
  // server drains). Safe to call more than once.
  void StopAccepting();
  // Blocks until every request handed to the handler has been answered, or `deadline` passes; true
  // when none is owed. For a drain, after StopAccepting.
  bool WaitForReplies(std::chrono::steady_clock::time_point deadline) EXCLUDES(mutex_);

 private:
  friend class HttpReply;
  friend struct http_internal::Exchange;
  friend struct http_internal::Callbacks;
  HttpServer(const HttpServerOptions& options, Handler handler, int listen_fd, int port);
  // A request handed to the handler: its reply is owed until sent, its exchange open until
  // libmicrohttpd completes it (answer written, or the client gone).
  void ReplyOwed() EXCLUDES(mutex_);
  void ReplyDone() EXCLUDES(mutex_);
  void ExchangeClosed() EXCLUDES(mutex_);

  const HttpServerOptions options_;
  const Handler handler_;
  int listen_fd_;
  const int port_;
  MHD_Daemon* daemon_ = nullptr;
  Mutex mutex_;
  std::condition_variable changed_;
  int replies_owed_ GUARDED_BY(mutex_) = 0;
  int exchanges_open_ GUARDED_BY(mutex_) = 0;
  // Connections suspended while their answer is computed: libmicrohttpd does not read them, so the
  // watcher polls them for a client that went away (HttpReply::OnClientGone).
  std::set<http_internal::Exchange*> waiting_ GUARDED_BY(mutex_);
  bool stop_watching_ GUARDED_BY(mutex_) = false;
  std::condition_variable watcher_wake_;
  std::thread watcher_;
  void StartWatching(http_internal::Exchange* exchange) EXCLUDES(mutex_);
  // Also drops the exchange's OnClientGone callback: it never runs once the answer is given.
  void StopWatching(http_internal::Exchange* exchange) EXCLUDES(mutex_);
  void WatchWaitingClients() EXCLUDES(mutex_);

  // Where a connection is in its request cycle: which of bounds' timeouts runs.
  enum class Phase { kFirstHeaders, kIdle, kHeaders, kBody, kHandling, kSending, kClosing };
  struct ConnectionClock {
    int fd = -1;
    Phase phase = Phase::kFirstHeaders;
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  };
  void ConnectionOpened(MHD_Connection* connection, int fd) EXCLUDES(mutex_);
  void ConnectionClosed(MHD_Connection* connection) EXCLUDES(mutex_);
  // The connection enters `phase`; its deadline is that phase's timeout from now (none if zero). The
  // first request's headers keep the deadline counted from the connection's opening.
  void Enter(MHD_Connection* connection, Phase phase) EXCLUDES(mutex_);
  // Shuts the sockets of connections past their deadline (libmicrohttpd then closes them); returns
  // why, for on_closed.
  std::vector<HttpClosure> CloseOverdue() REQUIRES(mutex_);
  // Takes `bytes` of bounds.max_buffered_bytes and of `client`'s share of it; false (nothing taken)
  // when `may_refuse` and they do not fit. Release gives them back.
  bool Hold(const std::string& client, uint64_t bytes, bool may_refuse) EXCLUDES(budget_mutex_);
  void Release(const std::string& client, uint64_t bytes) EXCLUDES(budget_mutex_);

  std::unordered_map<MHD_Connection*, ConnectionClock> clocks_ GUARDED_BY(mutex_);
  std::atomic<int> connections_open_{0};
  Mutex budget_mutex_;
  uint64_t buffered_bytes_ GUARDED_BY(budget_mutex_) = 0;
  // By client address; an address holding nothing has no entry.
  std::unordered_map<std::string, uint64_t> buffered_by_client_ GUARDED_BY(budget_mutex_);
};

}  // namespace graphserve
