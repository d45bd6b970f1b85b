#include "graphserve/server/observability/metrics_endpoint.h"

#include "graphserve/server/http/http_server.h"
#include "graphserve/server/observability/metrics.h"

namespace graphserve {

Status MetricsEndpoint::Start(const std::string& address, const ServerMetrics* metrics,
                              std::unique_ptr<MetricsEndpoint>* endpoint, std::shared_ptr<HttpTls> tls,
                              const TokenAuthenticator* auth) {
  HttpServerOptions options;
  options.address = address;
  options.flag = "--metrics-address";
  options.thread_count = 2;
  options.max_body_bytes = 0;  // scrapes send no body
  options.max_connections = 64;
  options.idle_timeout = kClientTimeout;
  options.tls = std::move(tls);
  options.auth = auth;
  options.auth_endpoint = "metrics";
  std::unique_ptr<HttpServer> server;
  const Status status = HttpServer::Start(
      options,
      [metrics](const HttpRequest& request, HttpReply reply) {
        HttpResponse response;
        response.content_type = "text/plain; charset=utf-8";
        if (request.method != "GET" && request.method != "HEAD") {
          response.status = 405;
          response.headers = {{"Allow", "GET, HEAD"}};
          response.body = "only GET\n";
        } else if (request.path != "/metrics") {
          response.status = 404;
          response.body = "graphserve serves /metrics\n";
        } else {
          response.content_type = "text/plain; version=0.0.4; charset=utf-8";
          response.body = metrics->TextExposition();
        }
        reply.Send(std::move(response));
      },
      &server);
  if (!status.ok()) return status;
  endpoint->reset(new MetricsEndpoint(std::move(server)));
  return Status::Ok();
}

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<HttpServer> server) : server_(std::move(server)) {}
MetricsEndpoint::~MetricsEndpoint() = default;

int MetricsEndpoint::port() const { return server_->port(); }

}  // namespace graphserve
