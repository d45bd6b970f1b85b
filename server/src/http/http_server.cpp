#include "graphserve/server/http/http_server.h"

#include <microhttpd.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "common/listen_socket.h"
#include "common/thread_name.h"
#include "graphserve/server/http/content_coding.h"
#include "graphserve/server/http/rest_codec.h"
#include "graphserve/server/observability/log_limiter.h"
#include "graphserve/server/security/auth.h"
#include "security/http_tls.h"

namespace graphserve {
namespace http_internal {

// One request on one connection, from its headers until libmicrohttpd reports it completed.
struct Exchange {
  enum class State { kReceiving, kHandling, kSuspended, kAnswered };

  Exchange(HttpServer* owner, MHD_Connection* on) : server(owner), connection(on) {}

  // Why a body that arrived whole is refused instead of handed on.
  enum class BodyProblem { kNone, kTooLarge, kInflatesTooLarge, kCorrupt, kOverBudget };

  HttpServer* server;
  MHD_Connection* connection;
  HttpRequest request;
  size_t received_bytes = 0;  // of the body as sent, before any inflating
  BodyProblem body_problem = BodyProblem::kNone;
  // Bytes of the server's buffer budget this exchange holds (its body, then its answer too), given
  // back when libmicrohttpd completes it. Written by the libmicrohttpd thread before the handler,
  // then by Send before the resume that lets the exchange complete.
  uint64_t held_bytes = 0;
  std::string client;  // the address whose share of the budget held_bytes counts in
  // A body with a Content-Length was held whole from its headers; a chunked or compressed one is
  // held piece by piece.
  bool body_held_whole = false;
  // A compressed body's (HttpServerOptions::content_codings): inflated into request.body as it arrives.
  std::unique_ptr<BodyInflater> inflater;
  ContentCoding coding = ContentCoding::kIdentity;
  bool handed_to_handler = false;  // the libmicrohttpd thread's own
  // A body with neither Content-Length nor chunked framing: its answer closes the connection.
  bool unframed_body = false;
  // The connection's socket, which the watcher polls while the connection is suspended.
  int fd = -1;
  // HttpReply::OnClientGone's; guarded by server->mutex_ (the watcher reads it under that alone).
  std::function<void()> on_client_gone;
  Mutex mutex;
  State state GUARDED_BY(mutex) = State::kReceiving;
  // Written by Send before the state turns kAnswered, read (by Queue) only after.
  HttpResponse response;

  void Send(HttpResponse answer) {
    HttpServer* owner = server;
    MHD_Connection* suspended = nullptr;
    // An answer already computed is not refused, but counts until written, so that clients that do
    // not read leave no room for more bodies.
    owner->Hold(client, answer.body.size(), /*may_refuse=*/false);
    held_bytes += answer.body.size();
    {
      MutexLock lock(&mutex);
      // Out of the watcher's sight before the state turns kAnswered: an answer that comes while the
      // handler still runs is queued by the libmicrohttpd thread as soon as it sees kAnswered, and the
      // exchange deleted once sent (a refusal from another thread at once hit this under overload);
      // and after a resume the socket may close and its number be reused.
      owner->StopWatching(this);
      response = std::move(answer);
      if (state == State::kSuspended) suspended = connection;
      state = State::kAnswered;
    }
    // A suspended connection is not processed, so the exchange lives until this resume; after it,
    // libmicrohttpd may complete and delete it at once.
    if (suspended != nullptr) MHD_resume_connection(suspended);
    owner->ReplyDone();
  }
};

// RFC 9110 5.6.2's tchar: what a header name is made of.
constexpr const char* kTokenCharacters =
    "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

struct Callbacks {
  static MHD_Result CollectHeader(void* headers, MHD_ValueKind, const char* key, const char* value) {
    static_cast<std::vector<std::pair<std::string, std::string>>*>(headers)->emplace_back(
        key, value == nullptr ? "" : value);
    return MHD_YES;
  }

  // A body's framing that two readers could read differently is refused before the body is read:
  // behind a proxy that took the other reading, the rest of the bytes would become a request of
  // their own (request smuggling). Returns the HTTP status, or 0 when the framing is plain.
  static int CheckFraming(const std::vector<std::pair<std::string, std::string>>& headers, std::string* why) {
    const auto named = [](const std::string& key, const char* name) { return strcasecmp(key.c_str(), name) == 0; };
    std::string length;
    bool has_length = false;
    for (const auto& [key, value] : headers) {
      // RFC 9110 5.1: a field name is a token. "Transfer-Encoding :" (a space before the colon) or
      // an empty name is read as a different header by some proxies: the classic smuggling shapes.
      if (key.empty() || key.find_first_not_of(kTokenCharacters) != std::string::npos) {
        *why = "header name '" + key.substr(0, 40) + "': not a token (RFC 9110 5.1)";
        return MHD_HTTP_BAD_REQUEST;
      }
      if (named(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        if (strcasecmp(value.c_str(), "chunked") != 0) {
          *why = "Transfer-Encoding: '" + value.substr(0, 40) + "' is not served (only chunked)";
          return MHD_HTTP_NOT_IMPLEMENTED;
        }
      }
      if (!named(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) continue;
      if (value.empty() || value.size() > 19 || value.find_first_not_of("0123456789") != std::string::npos) {
        *why = "Content-Length: '" + value.substr(0, 40) + "' is not a byte count";
        return MHD_HTTP_BAD_REQUEST;
      }
      if (has_length && value != length) {
        *why = "Content-Length: given twice, with different values";
        return MHD_HTTP_BAD_REQUEST;
      }
      has_length = true;
      length = value;
    }
    return 0;
  }

  static MHD_Result Queue(Exchange* exchange) {
    HttpResponse& answer = exchange->response;
    if (exchange->server->options_.content_codings && !answer.body.empty()) Compress(exchange->request, &answer);
    // The body lives in the exchange, which outlives the response: libmicrohttpd deletes the
    // exchange (OnCompleted) only once the body is sent or the connection is gone.
    MHD_Response* response =
        MHD_create_response_from_buffer(answer.body.size(), answer.body.data(), MHD_RESPMEM_PERSISTENT);
    if (response == nullptr) return MHD_NO;
    if (!answer.content_type.empty()) {
      MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, answer.content_type.c_str());
    }
    for (const auto& [name, value] : answer.headers) {
      MHD_add_response_header(response, name.c_str(), value.c_str());
    }
    // libmicrohttpd reads such a body as empty and what follows the headers as the next request,
    // where an HTTP/1.0 reader in front (a proxy) takes it as the body: with the connection closed
    // after this answer, there is no next request for the two to disagree about (smuggling).
    if (exchange->unframed_body) MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
    const MHD_Result queued = MHD_queue_response(exchange->connection, answer.status, response);
    MHD_destroy_response(response);
    exchange->server->Enter(exchange->connection, HttpServer::Phase::kSending);
    return queued;
  }

  // On the libmicrohttpd thread that writes the answer, not on the thread that gave it (gRPC's).
  static void Compress(const HttpRequest& request, HttpResponse* answer) {
    const ContentCoding coding = ChooseResponseCoding(request.Header(MHD_HTTP_HEADER_ACCEPT_ENCODING));
    if (coding == ContentCoding::kIdentity) return;
    answer->body = CompressBody(answer->body, coding);
    answer->headers.emplace_back(MHD_HTTP_HEADER_CONTENT_ENCODING, ContentCodingName(coding));
    answer->headers.emplace_back(MHD_HTTP_HEADER_VARY, MHD_HTTP_HEADER_ACCEPT_ENCODING);
  }

  // The coding of the body to come, from its Content-Encoding; false (with the answer's message) for
  // one not served.
  static bool ReadContentEncoding(Exchange* exchange, std::string* why) {
    const std::string* header = exchange->request.Header(MHD_HTTP_HEADER_CONTENT_ENCODING);
    if (header == nullptr) return true;
    const std::optional<ContentCoding> coding = ParseContentEncoding(*header);
    if (!coding) {
      *why = "Content-Encoding: '" + header->substr(0, 40) + "' is not served (gzip, deflate or identity)";
      return false;
    }
    exchange->coding = *coding;
    if (*coding != ContentCoding::kIdentity) {
      // The inflated body is held to the same bound as a plain one.
      exchange->inflater = std::make_unique<BodyInflater>(*coding, exchange->server->options_.max_body_bytes);
    }
    return true;
  }

  // A piece of the body: kept, or inflated when compressed, until the body is known to be refused.
  static void TakeBodyPiece(Exchange* exchange, std::string_view piece) {
    exchange->received_bytes += piece.size();
    std::string& body = exchange->request.body;
    HttpServer* server = exchange->server;
    if (exchange->received_bytes > server->options_.max_body_bytes) {
      exchange->body_problem = Exchange::BodyProblem::kTooLarge;  // a chunked body: read to its end, then refused
    }
    if (exchange->body_problem == Exchange::BodyProblem::kNone && !exchange->inflater &&
        !exchange->body_held_whole && !HoldMore(exchange, piece.size())) {
      exchange->body_problem = Exchange::BodyProblem::kOverBudget;
    }
    if (exchange->body_problem != Exchange::BodyProblem::kNone) {
      DropBody(exchange);
      return;
    }
    if (!exchange->inflater) {
      body.append(piece);
      return;
    }
    const size_t before = body.size();
    switch (exchange->inflater->Add(piece, &body)) {
      case BodyInflater::Result::kMore:
        // What one piece inflates to is only known once inflated: held then, or the body dropped.
        if (HoldMore(exchange, body.size() - before)) return;
        exchange->body_problem = Exchange::BodyProblem::kOverBudget;
        break;
      case BodyInflater::Result::kTooLarge: exchange->body_problem = Exchange::BodyProblem::kInflatesTooLarge; break;
      case BodyInflater::Result::kCorrupt: exchange->body_problem = Exchange::BodyProblem::kCorrupt; break;
    }
    DropBody(exchange);
  }

  static bool HoldMore(Exchange* exchange, uint64_t bytes) {
    if (!exchange->server->Hold(exchange->client, bytes, /*may_refuse=*/true)) return false;
    exchange->held_bytes += bytes;
    return true;
  }

  // A refused body is not kept: the rest of it is read and dropped, then the refusal answered.
  static void DropBody(Exchange* exchange) {
    exchange->request.body.clear();
    exchange->request.body.shrink_to_fit();
    exchange->server->Release(exchange->client, std::exchange(exchange->held_bytes, 0));
    exchange->body_held_whole = false;
  }

  // The whole body is in: answers the refusal it earned, if any.
  static std::optional<MHD_Result> RefuseBody(Exchange* exchange) {
    if (exchange->inflater && exchange->body_problem == Exchange::BodyProblem::kNone &&
        !exchange->inflater->Complete()) {
      exchange->body_problem = Exchange::BodyProblem::kCorrupt;  // the stream stopped short
    }
    exchange->inflater.reset();  // its window's memory, while the request waits for its answer
    const HttpServer& server = *exchange->server;
    switch (exchange->body_problem) {
      case Exchange::BodyProblem::kNone: return std::nullopt;
      case Exchange::BodyProblem::kTooLarge: return Answer(exchange, MHD_HTTP_CONTENT_TOO_LARGE, TooLarge(server));
      case Exchange::BodyProblem::kInflatesTooLarge:
        return Answer(exchange, MHD_HTTP_CONTENT_TOO_LARGE,
                      std::string("the request body inflates (Content-Encoding: ") +
                          ContentCodingName(exchange->coding) + ") to more than the " +
                          std::to_string(server.options_.max_body_bytes) + " bytes graphserve accepts");
      case Exchange::BodyProblem::kOverBudget:
        return Answer(exchange, MHD_HTTP_SERVICE_UNAVAILABLE, OverBudget(server), {{"Retry-After", "1"}});
      case Exchange::BodyProblem::kCorrupt: break;
    }
    return Answer(exchange, MHD_HTTP_BAD_REQUEST,
                  std::string("body: not one complete ") + ContentCodingName(exchange->coding) +
                      " stream, as its Content-Encoding says");
  }

  static MHD_Result Answer(Exchange* exchange, int status, const std::string& message,
                           std::vector<std::pair<std::string, std::string>> headers = {}) {
    exchange->response.headers = std::move(headers);
    exchange->response.status = status;
    exchange->response.content_type = "application/json";
    exchange->response.body = ErrorBody(message);
    {
      MutexLock lock(&exchange->mutex);
      exchange->state = Exchange::State::kAnswered;
    }
    return Queue(exchange);
  }

  static Exchange::State StateOf(Exchange* exchange) {
    MutexLock lock(&exchange->mutex);
    return exchange->state;
  }

  static MHD_Result OnRequest(void* self, MHD_Connection* connection, const char* url, const char* method,
                              const char*, const char* upload_data, size_t* upload_data_size,
                              void** context) {
    auto* server = static_cast<HttpServer*>(self);
    auto* exchange = static_cast<Exchange*>(*context);
    if (exchange == nullptr) {  // the headers have arrived
      exchange = new Exchange(server, connection);
      *context = exchange;
      exchange->request.method = method;
      exchange->request.path = url;
      exchange->client = Peer(connection);
      if (server->options_.auth != nullptr) exchange->request.peer = exchange->client;
      if (const MHD_ConnectionInfo* info =
              MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD)) {
        exchange->fd = info->connect_fd;
      }
      MHD_get_connection_values(connection, MHD_HEADER_KIND, &CollectHeader, &exchange->request.headers);
      const char* length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                       MHD_HTTP_HEADER_CONTENT_LENGTH);
      if (exchange->request.path.empty() || exchange->request.path.front() != '/') {
        // Only origin-form targets ("/v2/..."): an absolute URL or "*" names no route here.
        return Answer(exchange, MHD_HTTP_BAD_REQUEST, "request target: not a path starting with '/'");
      }
      std::string framing_error;
      if (const int status = CheckFraming(exchange->request.headers, &framing_error); status != 0) {
        // libmicrohttpd closes the connection after an answer given before the body is read.
        return Answer(exchange, status, framing_error);
      }
      if (!Authorized(*server, exchange->request)) {
        return Answer(exchange, MHD_HTTP_UNAUTHORIZED, "a token is required: authorization: Bearer TOKEN",
                      {{"WWW-Authenticate", "Bearer"}});
      }
      if (server->options_.screen) {
        if (const std::optional<HttpRefusal> refusal = server->options_.screen(exchange->request)) {
          return Answer(exchange, refusal->status, refusal->message);
        }
      }
      if (length != nullptr && std::strtoull(length, nullptr, 10) > server->options_.max_body_bytes) {
        // Answered before the body is read; libmicrohttpd then closes the connection.
        return Answer(exchange, MHD_HTTP_CONTENT_TOO_LARGE, TooLarge(*server));
      }
      std::string coding_error;
      if (server->options_.content_codings && !ReadContentEncoding(exchange, &coding_error)) {
        return Answer(exchange, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, coding_error,
                      {{MHD_HTTP_HEADER_ACCEPT_ENCODING, "gzip, deflate"}});  // RFC 9110 15.5.16
      }
      exchange->unframed_body = length == nullptr && exchange->request.method != "GET" &&
                                exchange->request.method != "HEAD" &&
                                exchange->request.Header(MHD_HTTP_HEADER_TRANSFER_ENCODING) == nullptr;
      if (length != nullptr && !exchange->inflater) {
        // Held whole before a byte is read: refused now, the client has sent only its headers.
        const uint64_t declared = std::strtoull(length, nullptr, 10);
        if (!HoldMore(exchange, declared)) {
          return Answer(exchange, MHD_HTTP_SERVICE_UNAVAILABLE, OverBudget(*server), {{"Retry-After", "1"}});
        }
        exchange->body_held_whole = true;
        exchange->request.body.reserve(declared);
      }
      server->Enter(connection, HttpServer::Phase::kBody);
      return MHD_YES;
    }
    if (*upload_data_size > 0) {  // a piece of the body
      TakeBodyPiece(exchange, std::string_view(upload_data, *upload_data_size));
      *upload_data_size = 0;
      return MHD_YES;
    }
    if (StateOf(exchange) == Exchange::State::kReceiving) {  // the whole request is in
      if (const std::optional<MHD_Result> refused = RefuseBody(exchange)) return *refused;
      {
        MutexLock lock(&exchange->mutex);
        exchange->state = Exchange::State::kHandling;
      }
      server->Enter(connection, HttpServer::Phase::kHandling);
      exchange->handed_to_handler = true;
      server->ReplyOwed();
      server->handler_(exchange->request, HttpReply(exchange));
      MutexLock lock(&exchange->mutex);
      if (exchange->state != Exchange::State::kAnswered) {
        // Answered later, from another thread: the connection waits without holding a thread.
        MHD_suspend_connection(connection);
        exchange->state = Exchange::State::kSuspended;
        server->StartWatching(exchange);
        return MHD_YES;
      }
    }
    return Queue(exchange);  // answered, inline or after a resume
  }

  // Before the body is read: a caller without a token costs no more than its headers.
  static bool Authorized(const HttpServer& server, const HttpRequest& request) {
    const TokenAuthenticator* auth = server.options_.auth;
    if (auth == nullptr || (server.options_.needs_token && !server.options_.needs_token(request.path))) {
      return true;
    }
    const std::string* authorization = request.Header("authorization");
    const std::string* api_key = request.Header("x-api-key");
    if (auth->Accepts(authorization == nullptr ? "" : *authorization, api_key == nullptr ? "" : *api_key)) {
      return true;
    }
    auth->Refused(server.options_.auth_endpoint, request.peer);
    return false;
  }

  // Each connection gets its clock (HttpClientBounds' timeouts) and counts toward the cap; a TLS one
  // also takes the credentials current now and keeps them until it closes.
  static void OnConnection(void* self, MHD_Connection* connection, void** socket_context,
                           MHD_ConnectionNotificationCode code) {
    auto* server = static_cast<HttpServer*>(self);
    using Held = std::shared_ptr<const HttpTls::Credentials>;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
      // Before libmicrohttpd closes the socket: the watcher never shuts a number already reused.
      server->ConnectionClosed(connection);
      delete static_cast<Held*>(*socket_context);
      *socket_context = nullptr;
      return;
    }
    const MHD_ConnectionInfo* fd = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    server->ConnectionOpened(connection, fd == nullptr ? -1 : fd->connect_fd);
    if (!server->options_.tls) return;
    const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (info == nullptr || info->tls_session == nullptr) return;  // keeps the daemon's first credentials
    *socket_context = new Held(server->options_.tls->Attach(static_cast<gnutls_session_int*>(info->tls_session)));
  }

  // Past the cap a connection is closed at once: left in the listen backlog, the client would wait
  // with no answer and no error (libmicrohttpd stops accepting at its own limit).
  static MHD_Result Admit(void* self, const sockaddr*, socklen_t) {
    auto* server = static_cast<HttpServer*>(self);
    if (server->connections_open_.load() < server->options_.max_connections) return MHD_YES;
    LogLimited(LogKind::kRefusedConnection, "http-cap", spdlog::level::warn,
               "{}: {} connections open, the most it takes at once; closing a new one", server->options_.flag,
               server->options_.max_connections);
    if (server->options_.on_closed) server->options_.on_closed(HttpClosure::kConnectionCap);
    return MHD_NO;
  }

  // The request line is in: a kept-alive connection's wait for its next request is over.
  static void* OnRequestLine(void* self, const char*, MHD_Connection* connection) {
    static_cast<HttpServer*>(self)->Enter(connection, HttpServer::Phase::kHeaders);
    return nullptr;  // OnRequest still sees a null context at the headers
  }

  static std::string Peer(MHD_Connection* connection) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == nullptr || info->client_addr == nullptr) return "?";
    return AddressText(info->client_addr);
  }

  // libmicrohttpd's own unescaping, but a decoded NUL ("%00") becomes 0xFF instead of ending the
  // path early: "/v2/models/m%00/x" was routed as "/v2/models/m". 0xFF is not UTF-8, so the REST
  // layer refuses the path (400) instead.
  static size_t Unescape(void*, MHD_Connection*, char* text) {
    const size_t length = MHD_http_unescape(text);
    for (size_t i = 0; i < length; ++i) {
      if (text[i] == '\0') text[i] = static_cast<char>(0xFF);
    }
    return length;
  }

  static void OnCompleted(void* self, MHD_Connection* connection, void** context,
                          MHD_RequestTerminationCode termination) {
    auto* server = static_cast<HttpServer*>(self);
    server->Enter(connection, HttpServer::Phase::kIdle);
    auto* exchange = static_cast<Exchange*>(*context);
    if (exchange == nullptr) return;
    const bool handled = exchange->handed_to_handler;
    // Set, if at all, by Send, which comes before the resume that lets the exchange complete.
    if (exchange->response.on_finished) {
      exchange->response.on_finished(termination == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    }
    server->Release(exchange->client, exchange->held_bytes);
    delete exchange;
    *context = nullptr;
    if (handled) server->ExchangeClosed();
  }

  static void Log(void*, const char* format, va_list arguments) {
    LogHttpLibraryLine("http", format, arguments);
  }

  static std::string OverBudget(const HttpServer& server) {
    const HttpClientBounds& bounds = server.options_.bounds;
    std::string held;
    if (bounds.max_buffered_bytes_per_client > 0) {
      held = "for this client (at most " + std::to_string(bounds.max_buffered_bytes_per_client) +
             " bytes, --http-max-buffered-bytes-per-client)";
    }
    if (bounds.max_buffered_bytes > 0) {
      held += std::string(held.empty() ? "" : " or ") + "for all clients (at most " +
              std::to_string(bounds.max_buffered_bytes) + " bytes, --http-max-buffered-bytes)";
    }
    return "the request bodies and unsent answers held " + held + " leave no room for this body; retry later";
  }

  static std::string TooLarge(const HttpServer& server) {
    return "the request body is larger than the " + std::to_string(server.options_.max_body_bytes) +
           " bytes graphserve accepts";
  }
};

}  // namespace http_internal

const std::string* HttpRequest::Header(const std::string& name) const {
  for (const auto& [key, value] : headers) {
    if (strcasecmp(key.c_str(), name.c_str()) == 0) return &value;
  }
  return nullptr;
}

HttpReply::~HttpReply() {
  if (exchange_ != nullptr) {
    HttpResponse response;
    response.status = 500;
    response.body = ErrorBody("the request was dropped without an answer");
    std::exchange(exchange_, nullptr)->Send(std::move(response));
  }
}

void HttpReply::Send(HttpResponse response) {
  if (exchange_ == nullptr) return;
  std::exchange(exchange_, nullptr)->Send(std::move(response));
}

void HttpReply::OnClientGone(std::function<void()> cancel) {
  if (exchange_ == nullptr) return;
  HttpServer* server = exchange_->server;
  MutexLock lock(&server->mutex_);
  exchange_->on_client_gone = std::move(cancel);
}

void HttpServer::StartWatching(http_internal::Exchange* exchange) {
  MutexLock lock(&mutex_);
  waiting_.insert(exchange);
}

void HttpServer::StopWatching(http_internal::Exchange* exchange) {
  // Declared first, so destroyed after the lock is released: it may hold the last of something.
  std::function<void()> dropped;
  MutexLock lock(&mutex_);
  waiting_.erase(exchange);
  dropped = std::exchange(exchange->on_client_gone, nullptr);
}

void HttpServer::WatchWaitingClients() {
  NameThisThread("gs-http-watch");
  MutexLock lock(&mutex_);
  while (!stop_watching_) {
    std::vector<pollfd> sockets;
    std::vector<http_internal::Exchange*> whose;
    for (http_internal::Exchange* exchange : waiting_) {
      if (exchange->fd < 0 || !exchange->on_client_gone) continue;
      sockets.push_back({exchange->fd, POLLRDHUP, 0});
      whose.push_back(exchange);
    }
    std::vector<std::function<void()>> cancels;
    const std::vector<HttpClosure> closed = CloseOverdue();
    // Without waiting: a socket still being watched stays open until StopWatching, under this lock.
    if (!sockets.empty() && poll(sockets.data(), sockets.size(), 0) > 0) {
      for (size_t i = 0; i < sockets.size(); ++i) {
        if ((sockets[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0) continue;
        cancels.push_back(std::move(whose[i]->on_client_gone));
        whose[i]->on_client_gone = nullptr;
      }
    }
    if (!cancels.empty() || (!closed.empty() && options_.on_closed)) {
      lock.Unlock();
      for (const std::function<void()>& cancel : cancels) cancel();
      cancels.clear();
      if (options_.on_closed) {
        for (const HttpClosure why : closed) options_.on_closed(why);
      }
      lock.Lock();
    }
    watcher_wake_.wait_for(lock.native(), kClientGonePoll);
  }
}

void HttpServer::ConnectionOpened(MHD_Connection* connection, int fd) {
  connections_open_.fetch_add(1);
  MutexLock lock(&mutex_);
  ConnectionClock& clock = clocks_[connection];
  clock.fd = fd;
  clock.phase = Phase::kFirstHeaders;
  if (options_.bounds.header_timeout.count() > 0) {
    clock.deadline = std::chrono::steady_clock::now() + options_.bounds.header_timeout;
  }
}

void HttpServer::ConnectionClosed(MHD_Connection* connection) {
  connections_open_.fetch_sub(1);
  MutexLock lock(&mutex_);
  clocks_.erase(connection);
}

void HttpServer::Enter(MHD_Connection* connection, Phase phase) {
  std::chrono::milliseconds timeout{0};
  switch (phase) {
    case Phase::kFirstHeaders:
    case Phase::kHeaders:
      timeout = options_.bounds.header_timeout;
      break;
    case Phase::kBody:
      timeout = options_.bounds.body_timeout;
      break;
    case Phase::kIdle:
      timeout = options_.bounds.keep_alive_timeout;
      break;
    case Phase::kSending:
      timeout = options_.bounds.send_timeout;
      break;
    case Phase::kHandling:
    case Phase::kClosing:
      break;
  }
  MutexLock lock(&mutex_);
  const auto found = clocks_.find(connection);
  if (found == clocks_.end()) return;
  ConnectionClock& clock = found->second;
  if (clock.phase == Phase::kClosing) return;  // shut already; its last callbacks change nothing
  // The first request's line and headers both count from the connection's opening.
  if (phase == Phase::kHeaders && clock.phase == Phase::kFirstHeaders) return;
  clock.phase = phase;
  clock.deadline = timeout.count() > 0 ? std::chrono::steady_clock::now() + timeout
                                       : std::chrono::steady_clock::time_point::max();
}

std::vector<HttpClosure> HttpServer::CloseOverdue() {
  std::vector<HttpClosure> closed;
  const auto now = std::chrono::steady_clock::now();
  for (auto& [connection, clock] : clocks_) {
    if (clock.deadline > now) continue;
    switch (clock.phase) {
      case Phase::kFirstHeaders:
      case Phase::kHeaders:
        closed.push_back(HttpClosure::kHeaderTimeout);
        break;
      case Phase::kBody:
        closed.push_back(HttpClosure::kBodyTimeout);
        break;
      case Phase::kIdle:
        closed.push_back(HttpClosure::kKeepAliveTimeout);
        break;
      case Phase::kSending:
        closed.push_back(HttpClosure::kSendTimeout);
        break;
      case Phase::kHandling:
      case Phase::kClosing:
        continue;
    }
    // Not close(): libmicrohttpd owns the descriptor. A shut socket reads its end at once, and the
    // connection is closed and completed the usual way (a suspended one is never overdue).
    if (clock.fd >= 0) shutdown(clock.fd, SHUT_RDWR);
    clock.phase = Phase::kClosing;
    clock.deadline = std::chrono::steady_clock::time_point::max();
  }
  return closed;
}

bool HttpServer::Hold(const std::string& client, uint64_t bytes, bool may_refuse) {
  if (bytes == 0) return true;
  const uint64_t budget = options_.bounds.max_buffered_bytes;
  const uint64_t share = options_.bounds.max_buffered_bytes_per_client;
  {
    MutexLock lock(&budget_mutex_);
    const auto found = buffered_by_client_.find(client);
    const uint64_t mine = found == buffered_by_client_.end() ? 0 : found->second;
    if (may_refuse &&
        ((budget > 0 && buffered_bytes_ + bytes > budget) || (share > 0 && mine + bytes > share))) {
      return false;
    }
    buffered_bytes_ += bytes;
    buffered_by_client_[client] = mine + bytes;
  }
  if (options_.on_buffered_bytes) options_.on_buffered_bytes(static_cast<int64_t>(bytes));
  return true;
}

void HttpServer::Release(const std::string& client, uint64_t bytes) {
  if (bytes == 0) return;
  {
    MutexLock lock(&budget_mutex_);
    buffered_bytes_ -= bytes;
    const auto found = buffered_by_client_.find(client);
    if (found != buffered_by_client_.end() && (found->second -= bytes) == 0) buffered_by_client_.erase(found);
  }
  if (options_.on_buffered_bytes) options_.on_buffered_bytes(-static_cast<int64_t>(bytes));
}

Status HttpServer::Start(const HttpServerOptions& options, Handler handler,
                         std::unique_ptr<HttpServer>* server) {
  std::string error;
  // Non-blocking: the pool's threads all accept on this socket.
  const int listen_fd = ListenOn(options.address, SOMAXCONN, /*non_blocking=*/true, &error);
  if (listen_fd < 0) return Unavailable(options.flag + ": cannot listen on " + options.address + ": " + error);
  std::unique_ptr<HttpServer> started(
      new HttpServer(options, std::move(handler), listen_fd, BoundPort(listen_fd)));
  unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  // Without TLS the list ends at its first entry; with it, libmicrohttpd starts from the first
  // credentials and OnConnection swaps in the current ones per connection.
  MHD_OptionItem tls_options[] = {
      {MHD_OPTION_END, 0, nullptr}, {MHD_OPTION_END, 0, nullptr}, {MHD_OPTION_END, 0, nullptr}};
  if (options.tls) {
    flags |= MHD_USE_TLS;
    tls_options[0] = {MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(options.tls->initial_cert_pem().c_str())};
    tls_options[1] = {MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(options.tls->initial_key_pem().c_str())};
  }
  const int threads = std::max(options.thread_count, 1);
  started->daemon_ = MHD_start_daemon(
      flags, 0, &http_internal::Callbacks::Admit, started.get(), &http_internal::Callbacks::OnRequest,
      started.get(),
      // First, so that libmicrohttpd's messages about the options after it reach the log too.
      MHD_OPTION_EXTERNAL_LOGGER, &http_internal::Callbacks::Log, nullptr, MHD_OPTION_ARRAY, tls_options,
      MHD_OPTION_LISTEN_SOCKET, listen_fd, MHD_OPTION_THREAD_POOL_SIZE, static_cast<unsigned>(threads),
      // Admit holds the cap; libmicrohttpd's limit only backs it up, above the few connections that
      // threads accepting together can let past it (at its own limit it would stop accepting).
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(options.max_connections + threads),
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, options.bounds.max_connections_per_client,
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(options.idle_timeout.count()),
      MHD_OPTION_NOTIFY_CONNECTION, &http_internal::Callbacks::OnConnection, started.get(),
      MHD_OPTION_URI_LOG_CALLBACK, &http_internal::Callbacks::OnRequestLine, started.get(),
      MHD_OPTION_NOTIFY_COMPLETED, &http_internal::Callbacks::OnCompleted, started.get(),
      MHD_OPTION_UNESCAPE_CALLBACK, &http_internal::Callbacks::Unescape, nullptr, MHD_OPTION_END);
  if (started->daemon_ == nullptr) {
    return Unavailable(options.flag + ": cannot start the HTTP server on " + options.address);
  }
  HttpServer* watching = started.get();
  started->watcher_ = std::thread([watching] { watching->WatchWaitingClients(); });
  *server = std::move(started);
  return Status::Ok();
}

HttpServer::HttpServer(const HttpServerOptions& options, Handler handler, int listen_fd, int port)
    : options_(options), handler_(std::move(handler)), listen_fd_(listen_fd), port_(port) {}

HttpServer::~HttpServer() {
  StopAccepting();
  if (watcher_.joinable()) {
    {
      MutexLock lock(&mutex_);
      stop_watching_ = true;
    }
    watcher_wake_.notify_all();
    watcher_.join();
  }
  if (daemon_ != nullptr) {
    MutexLock lock(&mutex_);
    // libmicrohttpd must not be stopped with suspended connections.
    while (replies_owed_ > 0) lock.Wait(changed_);
    // Answers given but not yet written out (a resumed connection, a large body) get a moment.
    const auto give_up = std::chrono::steady_clock::now() + kFlushTimeout;
    while (exchanges_open_ > 0 && changed_.wait_until(lock.native(), give_up) == std::cv_status::no_timeout) {
    }
    lock.Unlock();
    MHD_stop_daemon(daemon_);
  }
  if (listen_fd_ >= 0) close(listen_fd_);
}

void HttpServer::StopAccepting() {
  if (daemon_ != nullptr) MHD_quiesce_daemon(daemon_);  // returns our listen_fd_, closed below
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

bool HttpServer::WaitForReplies(std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(&mutex_);
  while (replies_owed_ > 0) {
    if (changed_.wait_until(lock.native(), deadline) == std::cv_status::timeout) return replies_owed_ == 0;
  }
  return true;
}

void HttpServer::ReplyOwed() {
  MutexLock lock(&mutex_);
  ++replies_owed_;
  ++exchanges_open_;
}

void HttpServer::ReplyDone() {
  MutexLock lock(&mutex_);
  if (--replies_owed_ == 0) changed_.notify_all();
}

void HttpServer::ExchangeClosed() {
  MutexLock lock(&mutex_);
  if (--exchanges_open_ == 0) changed_.notify_all();
}

}  // namespace graphserve
