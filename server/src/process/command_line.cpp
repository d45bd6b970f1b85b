#include "graphserve/server/process/command_line.h"

#include <CLI/CLI.hpp>
#include <spdlog/common.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <sstream>
#include <string_view>
#include <utility>

#include "graphserve/server/batching/batch_planner.h"
#include "graphserve/server/http/rest_codec.h"
#include "graphserve/server/observability/log_settings.h"
#include "graphserve/server/observability/trace_settings.h"
#include "graphserve/server/security/auth.h"

namespace graphserve {
namespace {

constexpr const char* kTritonGroup = "tritonserver's flags (docs/running.md, \"tritonserver flags\")";

// A tritonserver flag graphserve cannot honour: refused naming it and saying why, unless its value
// is `accepted` (a '|'-separated list, compared without case): the value that asks for what
// graphserve does anyway. Each takes a value, as in Triton.
struct RefusedTritonFlag {
  const char* name;
  const char* accepted;  // nullptr: no value is
  const char* why;
};

constexpr const char* kFalse = "false|off|0";
constexpr const char* kNoBackends =
    "graphserve has no backends or repository agents: it runs TorchScript and AOTInductor models itself";
constexpr const char* kMemoryPools =
    "graphserve sizes each model's pinned staging buffers and CUDA graph pool from its bucket grid "
    "(docs/configuration.md)";
constexpr const char* kTls =
    "graphserve's TLS covers every port: --tls-cert-file, --tls-key-file and --tls-client-ca-file";
constexpr const char* kGrpcChannel =
    "graphserve keeps gRPC's own keepalive and connection-age settings; idle connections close after "
    "--connection-idle-timeout-s";
constexpr const char* kNoForwarding = "graphserve does not turn headers into request parameters";
constexpr const char* kOneProcessPerPort = "graphserve binds each port for itself alone";
constexpr const char* kNoSageMaker = "graphserve serves no SageMaker endpoint";
constexpr const char* kNoVertexAi = "graphserve serves no Vertex AI endpoint";

constexpr RefusedTritonFlag kRefusedTritonFlags[] = {
    {"--id", nullptr, "graphserve's ServerMetadata always names it 'graphserve'"},
    {"--backend-directory", nullptr, kNoBackends},
    {"--backend-config", nullptr, kNoBackends},
    {"--repoagent-directory", nullptr, kNoBackends},
    {"--model-load-thread-count", nullptr, "graphserve loads one model at a time, while the others serve"},
    {"--model-load-retry-count", "0", "graphserve does not retry a failed load"},
    {"--model-namespacing", kFalse, "a model's name is its folder's name in the one repository"},
    {"--model-load-gpu-limit", nullptr, "graphserve sets no limit on a GPU's memory for loading"},
    {"--pinned-memory-pool-byte-size", nullptr, kMemoryPools},
    {"--cuda-memory-pool-byte-size", nullptr, kMemoryPools},
    {"--cuda-virtual-address-size", nullptr, kMemoryPools},
    {"--min-supported-compute-capability", nullptr, "libtorch decides which GPUs it can run on"},
    {"--rate-limit", "off", "graphserve has no rate limiter: admission and queue policies bound the work"},
    {"--rate-limit-resource", nullptr, "graphserve has no rate limiter"},
    {"--response-cache-byte-size", nullptr, "graphserve has no response cache"},
    {"--cache-config", nullptr, "graphserve has no response cache"},
    {"--cache-directory", nullptr, "graphserve has no response cache"},
    {"--buffer-manager-thread-count", nullptr, "graphserve has no buffer manager threads"},
    {"--host-policy", nullptr, "graphserve places instances by instance_group alone"},
    {"--log-file", "", "graphserve logs to stdout only"},
    {"--grpc-use-ssl", kFalse, kTls},
    {"--grpc-use-ssl-mutual", kFalse, kTls},
    {"--grpc-server-cert", nullptr, kTls},
    {"--grpc-server-key", nullptr, kTls},
    {"--grpc-root-cert", nullptr, kTls},
    {"--grpc-infer-allocation-pool-size", nullptr, "graphserve keeps no pool of response objects"},
    {"--grpc-keepalive-time", nullptr, kGrpcChannel},
    {"--grpc-keepalive-timeout", nullptr, kGrpcChannel},
    {"--grpc-keepalive-permit-without-calls", nullptr, kGrpcChannel},
    {"--grpc-http2-max-pings-without-data", nullptr, kGrpcChannel},
    {"--grpc-http2-min-recv-ping-interval-without-data", nullptr, kGrpcChannel},
    {"--grpc-http2-max-ping-strikes", nullptr, kGrpcChannel},
    {"--grpc-max-connection-age", nullptr, kGrpcChannel},
    {"--grpc-max-connection-age-grace", nullptr, kGrpcChannel},
    {"--grpc-header-forward-pattern", nullptr, kNoForwarding},
    {"--http-header-forward-pattern", nullptr, kNoForwarding},
    {"--reuse-grpc-port", kFalse, kOneProcessPerPort},
    {"--reuse-http-port", kFalse, kOneProcessPerPort},
    {"--allow-sagemaker", kFalse, kNoSageMaker},
    {"--sagemaker-port", nullptr, kNoSageMaker},
    {"--sagemaker-safe-port-range", nullptr, kNoSageMaker},
    {"--sagemaker-thread-count", nullptr, kNoSageMaker},
    {"--allow-vertex-ai", kFalse, kNoVertexAi},
    {"--vertex-ai-port", nullptr, kNoVertexAi},
    {"--vertex-ai-thread-count", nullptr, kNoVertexAi},
    {"--vertex-ai-default-model", nullptr, kNoVertexAi},
    {"--allow-cpu-metrics", kFalse, "graphserve exports none of Triton's nv_cpu_* metrics"},
    {"--metrics-interval-ms", nullptr, "graphserve reads its metrics at each scrape"},
    {"--metrics-config", nullptr, "graphserve's metric families are fixed (docs/metrics.md)"},
};

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

bool IsAccepted(const RefusedTritonFlag& flag, const std::string& value) {
  if (flag.accepted == nullptr) return false;
  const std::string wanted = Lower(value);
  std::string_view accepted = flag.accepted;
  while (true) {
    const size_t bar = accepted.find('|');
    if (accepted.substr(0, bar) == wanted) return true;
    if (bar == std::string_view::npos) return false;
    accepted.remove_prefix(bar + 1);
  }
}

// Triton's booleans: true, on, 1, false, off, 0, in any case.
Status ParseTritonBool(const std::string& flag, const std::string& text, bool* value) {
  const std::string lower = Lower(text);
  if (lower == "true" || lower == "on" || lower == "1") {
    *value = true;
  } else if (lower == "false" || lower == "off" || lower == "0") {
    *value = false;
  } else {
    return InvalidArgument(flag + ": '" + text + "' is not a boolean (true, on, 1, false, off, 0)");
  }
  return Status::Ok();
}

// Triton's --log-verbose: a level (0 off, 1 and up more and more detail), or true (1) / false (0).
Status ParseVerboseLevel(const std::string& text, uint32_t* level) {
  const std::string lower = Lower(text);
  if (lower == "true" || lower == "false") {
    *level = lower == "true" ? 1 : 0;
    return Status::Ok();
  }
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) {
    return InvalidArgument("--log-verbose: '" + text + "' is not a level (0, 1, 2, ... or true, false)");
  }
  *level = static_cast<uint32_t>(std::stoul(text));
  return Status::Ok();
}

// Whether `address` names a port: "HOST:PORT" or "[V6]:PORT" rather than Triton's bare host.
bool NamesPort(const std::string& address) {
  if (!address.empty() && address.front() == '[') return address.find("]:") != std::string::npos;
  return address.find(':') != std::string::npos;
}

std::string PortOf(const std::string& address) { return address.substr(address.rfind(':') + 1); }

std::string HostOf(const std::string& address) { return address.substr(0, address.rfind(':')); }

// An endpoint's address as ListenOn takes it, checked here so that a mistake is reported before any
// port opens: "HOST:PORT" (HOST may be empty or a bracketed IPv6 address), the port 0 to 65535.
// Whether HOST is an address of this host is known only when listening.
Status CheckListenAddress(const char* flag, const std::string& address) {
  if (address.empty()) return Status::Ok();  // the endpoint is off
  const std::string port = NamesPort(address) ? PortOf(address) : std::string();
  const bool valid = !port.empty() && port.size() <= 5 &&
                     port.find_first_not_of("0123456789") == std::string::npos && std::stoi(port) <= 65535;
  if (valid) return Status::Ok();
  return InvalidArgument(std::string(flag) + " " + address + ": expected HOST:PORT, the port 0 to 65535");
}

// The values of graphserve's flags that the options hold in another form.
// A flag given in seconds, as the server's options keep it (whole milliseconds, truncated).
std::chrono::milliseconds Milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

struct GraphserveValues {
  double drain_timeout_s = 30.0;
  double idle_timeout_s = 0;
  double grpc_connection_age_s = 0;
  double grpc_connection_age_grace_s = 0;
  double grpc_answer_write_timeout_s = 0;
  // HttpClientBounds' timeouts, in seconds as given.
  double http_header_timeout_s = 0;
  double http_body_timeout_s = 0;
  double http_keep_alive_timeout_s = 0;
  double http_send_timeout_s = 0;
  int64_t http_infer_deadline_ms = 0;
  double metrics_client_timeout_s = 0;
  int64_t busy_poll_us = -1;
  std::string control_mode = "none";
  std::string log_format = "plain";
  std::string admin_apis = "open";
};

// One endpoint's flags: graphserve's --X-address, and Triton's --X-port and --allow-X.
struct EndpointFlags {
  const char* name;     // "gRPC"
  const char* address;  // "--grpc-address"
  const char* port;     // "--grpc-port"
  const char* allow;    // "--allow-grpc"
  int port_value = 0;
  std::string allow_value;
};

// tritonserver's flags that graphserve honours, as given.
struct TritonValues {
  EndpointFlags grpc{"gRPC", "--grpc-address", "--grpc-port", "--allow-grpc", 0, ""};
  EndpointFlags http{"REST", "--http-address", "--http-port", "--allow-http", 0, ""};
  EndpointFlags metrics{"metrics", "--metrics-address", "--metrics-port", "--allow-metrics", 0, ""};
  std::string model_store;
  std::string log_verbose, log_info, log_warning, log_error;
  std::string exit_on_error, strict_readiness, strict_model_config, allow_gpu_metrics;
  std::string grpc_infer_response_compression_level = "none";
  // Triton's --trace-config values, and its older flags that each set one of them.
  std::vector<std::string> trace_config;
  std::string trace_file, trace_level, trace_rate, trace_count, trace_log_frequency;
  int repository_poll_secs = 15;
  double exit_timeout_secs = 30;
  // Triton's restricted APIs, one value per occurrence (api_groups.h reads them).
  std::vector<std::string> grpc_restricted_protocols, http_restricted_apis;
  std::vector<std::string> refused_values = std::vector<std::string>(std::size(kRefusedTritonFlags));
};

// The REST port's HttpClientBounds (docs/security.md says why each default).
void AddHttpBoundFlags(CLI::App& app, HttpClientBounds* bounds, GraphserveValues* values) {
  app.add_option("--http-max-buffered-bytes", bounds->max_buffered_bytes,
                 "bytes of REST request bodies being received or awaiting their answer, plus answers not yet "
                 "sent, held at once; a body past it is answered 503 unread; 0: no bound")
      ->capture_default_str();
  app.add_option(
         "--http-max-buffered-bytes-per-client", bounds->max_buffered_bytes_per_client,
         "the same, for the connections of one client address together, so that one client cannot take "
         "it all; 0: no bound")
      ->capture_default_str();
  const std::pair<const char*, const char*> timeouts[] = {
      {"--http-header-timeout-s",
       "a REST request's line and headers must arrive within this of the connection's opening (or, on a "
       "kept-alive "
       "connection, of its request line), however many bytes trickle in; 0: no bound"},
      {"--http-body-timeout-s", "a REST request's body must arrive within this of its headers; 0: no bound"},
      {"--http-keep-alive-timeout-s",
       "a kept-alive REST connection with no next request for this long is closed; 0: "
       "never"},
      {"--http-send-timeout-s",
       "a REST answer not read by its client within this is dropped and its connection "
       "closed (graphserve_http_connections_closed_total); 0: no bound"},
  };
  double* seconds[] = {&values->http_header_timeout_s, &values->http_body_timeout_s,
                       &values->http_keep_alive_timeout_s, &values->http_send_timeout_s};
  const std::chrono::milliseconds defaults[] = {bounds->header_timeout, bounds->body_timeout,
                                                bounds->keep_alive_timeout, bounds->send_timeout};
  for (size_t i = 0; i < std::size(timeouts); ++i) {
    *seconds[i] = defaults[i].count() / 1000.0;
    app.add_option(timeouts[i].first, *seconds[i], timeouts[i].second)
        ->capture_default_str()
        ->check(CLI::Range(0.0, 86400.0));  // a day
  }
  app.add_option(
         "--http-max-connections-per-client", bounds->max_connections_per_client,
         "REST connections one client address may have open at once; more are closed on arrival; 0: no "
         "bound (behind a proxy every client shares its address)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1u << 20));
}

void AddGraphserveFlags(CLI::App& app, CommandLine* line, GraphserveValues* values) {
  ServerOptions& options = line->server;
  app.add_option("--grpc-address", options.grpc_address,
                 "HOST:PORT of the gRPC endpoint ('' for none; a bare HOST takes --grpc-port)")
      ->capture_default_str();
  app.add_option("--grpc-max-concurrent-streams", options.grpc_max_concurrent_streams,
                 "calls one gRPC connection may have open at once (HTTP/2 streams); more wait in the client")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--grpc-max-connections-per-client", options.grpc_max_connections_per_client,
                 "gRPC connections one client address may have open at once (at most a quarter of those the "
                 "open-file limit leaves); more are closed on arrival; 0: no bound (behind a proxy every "
                 "client shares its address)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--grpc-infer-threads", options.grpc_infer_threads,
                 "threads taking ModelInfer calls off gRPC (each drains a completion queue of its own); "
                 "0: half the usable cores (CPU affinity and cgroup quota), 2 to 16")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  app.add_option("--busy-poll-us", values->busy_poll_us,
                 "after each event, ModelInfer's threads and idle batchers poll for work this long without "
                 "sleeping: a lone request skips thread wake-ups, at the price of CPU; 0: they sleep at once; "
                 "-1: 300 with 8 usable cores or more, else 0")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, kMaxBusyPollUs));
  app.add_option("--busy-poll-threads", options.busy_poll_threads,
                 "how many of ModelInfer's threads may busy-poll at once (each spinning thread holds a core)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_flag("--grpc-executor-offload", line->grpc_executor_offload,
               "let gRPC move a busy connection's transport work to its executor thread, as gRPC does; "
               "=false keeps it on the polling thread that picked it up, but then a message of a few MiB "
               "can wait 10 s for a timer")
      ->capture_default_str();
  values->idle_timeout_s = options.connection_idle_timeout.count() / 1000.0;
  app.add_option("--connection-idle-timeout-s", values->idle_timeout_s,
                 "close a gRPC connection that has had no call for this long, freeing its descriptor; 0: never")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 604800.0));  // a week: gRPC takes milliseconds as an int
  app.add_option("--grpc-memory-budget-bytes", options.grpc_memory_budget_bytes,
                 "bytes gRPC's transport may hold for all connections together (read buffers, messages not "
                 "yet complete); past it gRPC cancels streams with RESOURCE_EXHAUSTED until it is back under")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{16} * 1024 * 1024, int64_t{1} << 46));
  values->grpc_connection_age_s = options.grpc_max_connection_age.count() / 1000.0;
  app.add_option("--grpc-max-connection-age-s", values->grpc_connection_age_s,
                 "ask a gRPC connection this old to go (GOAWAY: clients reconnect for later calls); with the "
                 "grace, bounds how long a message that never completes is held; 0: no age")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 604800.0));
  values->grpc_connection_age_grace_s = options.grpc_max_connection_age_grace.count() / 1000.0;
  app.add_option("--grpc-max-connection-age-grace-s", values->grpc_connection_age_grace_s,
                 "then close it, cancelling the calls and streams still open on it")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 604800.0));
  values->grpc_answer_write_timeout_s = options.grpc_answer_write_timeout.count() / 1000.0;
  app.add_option("--grpc-answer-write-timeout-s", values->grpc_answer_write_timeout_s,
                 "drop a gRPC answer the client has not read within this long and cancel its call "
                 "(graphserve_answers_dropped_total); 0: no limit")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 604800.0));
  app.add_option("--max-request-bytes", options.max_request_bytes,
                 "largest gRPC request message and REST request body accepted (RESOURCE_EXHAUSTED / 413 "
                 "beyond); 0: derived from the largest request the repository's models take")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{256} * 1024 * 1024));
  app.add_option("--max-shared-memory-regions", options.shared_memory.max_regions,
                 "system and CUDA shared-memory regions clients may have registered at once (Triton's "
                 "shared-memory extensions; RESOURCE_EXHAUSTED beyond); 0 turns shared memory off")
      ->capture_default_str()
      ->check(CLI::Range(size_t{0}, size_t{65536}));
  app.add_option(
         "--max-shared-memory-bytes", options.shared_memory.max_mapped_bytes,
         "bytes of clients' shared-memory objects and CUDA memory the server may have mapped at once, "
         "the regions' byte sizes added up (an unregistered region counts until its requests finish)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 46));
  app.add_option("--http-address", options.http_address,
                 "HOST:PORT of the KServe v2 HTTP/REST endpoint (as Triton's port 8000); '' for none; a bare "
                 "HOST takes --http-port")
      ->capture_default_str();
  app.add_option("--http-thread-count", options.http_thread_count,
                 "threads of the REST endpoint (each serves many keep-alive connections)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  AddHttpBoundFlags(app, &options.http_bounds, values);
  values->http_infer_deadline_ms = options.http_infer_deadline.count();
  app.add_option(
         "--http-infer-deadline-ms", values->http_infer_deadline_ms,
         "deadline of a REST infer call whose request sends no `timeout` parameter, and the cap on one "
         "that does: queued work past it is dropped unrun and admission refuses at once what cannot "
         "meet it (504); 0: none. The default is tritonclient.http's network timeout")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, kLongestRestDeadlineUs / 1000));
  app.add_option("--metrics-address", options.metrics_address,
                 "HOST:PORT of the Prometheus /metrics endpoint ('' for none; a bare HOST takes --metrics-port)")
      ->capture_default_str();
  app.add_option("--metrics-max-connections", options.metrics.max_connections,
                 "/metrics connections held at once (at most an eighth of what the open-file limit leaves "
                 "the ports); past it a new connection takes the place of one waiting for a request, or gets "
                 "503 when none is")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  app.add_option("--metrics-max-connections-per-address", options.metrics.max_connections_per_address,
                 "/metrics connections held at once from one client address; past it the address's oldest "
                 "connection waiting for a request makes room, or the new one gets 503")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  values->metrics_client_timeout_s = options.metrics.client_timeout.count() / 1000.0;
  app.add_option(
         "--metrics-client-timeout-s", values->metrics_client_timeout_s,
         "how long a /metrics connection has to send each request whole (from its opening or its "
         "previous answer) and to read each answer, however slowly it trickles bytes; then it is closed")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--model-repository", options.repository.model_repository,
                 "folder with one sub-folder per model: config.pbtxt and model.pt2 or model.pt, or "
                 "Triton's numbered version folders (MODEL/1/model.pt; the highest is served); "
                 "without it the built-in 'encoder' is served");
  app.add_option("--model-control-mode", values->control_mode,
                 "none: serve every model of the repository; explicit: serve the --load-model ones, "
                 "then load and unload through the repository API; poll: serve every model, then load, "
                 "reload and unload as folders appear, change and leave (as Triton's flag)")
      ->capture_default_str();
  app.add_option("--load-model", options.repository.startup_models,
                 "with --model-control-mode explicit: a model to load at start ('*': all); repeatable");
  app.add_option("--device", options.repository.device, "cpu, cuda, cuda:N or auto (CUDA when present)")
      ->capture_default_str();
  app.add_option("--log-level", line->log_level, "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  app.add_option("--log-format", values->log_format,
                 "plain (human-readable) or json (one JSON object per line, for log collectors); Triton's "
                 "ISO8601 is plain, its default glog-style lines")
      ->capture_default_str();
  app.add_option("--log-rate-limit", line->client_log_limit.lines,
                 "lines a kind of client-caused event (bad request, refused call or connection, a library's "
                 "line) may log per 10 s; the rest are counted in graphserve_log_lines_suppressed_total and "
                 "the next line written says how many; 0: no limit")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  app.add_option("--drain-timeout-s", values->drain_timeout_s,
                 "on SIGINT/SIGTERM, how long in-flight requests may take before they are cancelled")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));  // a day; 1e300 overflowed the deadline and skipped the drain
  app.add_option("--tls-cert-file", options.tls.cert_file,
                 "PEM certificate chain: serve TLS on the gRPC, REST and /metrics ports (with --tls-key-file)");
  app.add_option("--tls-key-file", options.tls.key_file, "PEM private key of --tls-cert-file");
  app.add_option("--tls-client-ca-file", options.tls.client_ca_file,
                 "PEM CA certificates: mutual TLS, clients must present a certificate they signed");
  app.add_option("--tls-reload-interval-s", options.tls.reload_interval_s,
                 "how often changed certificate files are picked up (SIGHUP: the HTTP ports at once)")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  app.add_flag("--metrics-plaintext", options.metrics_plaintext,
               "keep /metrics on plain HTTP when the other ports serve TLS");
  app.add_option("--auth-token-file", options.auth.token_file,
                 "file of accepted tokens, one per line; callers send 'authorization: Bearer TOKEN' or "
                 "'x-api-key: TOKEN' (GRAPHSERVE_AUTH_TOKEN in the environment adds tokens too)");
  app.add_flag("--trace-file-from-clients", options.trace.clients_may_set_file,
               "let clients set trace_file over the trace API: the server then writes wherever a client "
               "asks (off: only --trace-config triton,file=PATH chooses it)");
  app.add_option("--trace-queue-capacity", options.trace.queue_capacity,
                 "sampled traces waiting to be written to the trace file; more are dropped and counted in "
                 "graphserve_trace_dropped_total")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_option("--trace-max-traces-per-file", options.trace.max_traces_per_file,
                 "traces written to one trace file (its rolled files together) while the server runs; more "
                 "are dropped and counted in graphserve_trace_dropped_total, so tracing cannot fill the disk")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_flag("--auth-health", options.auth.protect_health,
               "health probes (grpc.health.v1, ServerLive/Ready, /v2/health/*) need a token too");
  app.add_flag("--metrics-auth", options.auth.protect_metrics, "/metrics needs a token too");
  app.add_option(
         "--admin-apis", values->admin_apis,
         "open: every API group is served to every caller (as Triton); closed: the admin groups "
         "(model-repository, logging, trace, shared-memory) are refused on each port unless its "
         "--grpc-restricted-protocol / --http-restricted-api names them (then their header opens them)")
      ->capture_default_str()
      ->check(CLI::IsMember({"open", "closed"}));
}

void AddTritonFlags(CLI::App& app, TritonValues* triton) {
  for (EndpointFlags* endpoint : {&triton->grpc, &triton->http, &triton->metrics}) {
    app.add_option(endpoint->port, endpoint->port_value,
                   std::string("Triton's: the port of the ") + endpoint->name + " endpoint, on the host of " +
                       endpoint->address)
        ->check(CLI::Range(0, 65535))
        ->group(kTritonGroup);
    app.add_option(endpoint->allow, endpoint->allow_value,
                   std::string("Triton's: false turns the ") + endpoint->name + " endpoint off (as " +
                       endpoint->address + " '')")
        ->group(kTritonGroup);
  }
  app.add_option("--model-store", triton->model_store, "Triton's: --model-repository")->group(kTritonGroup);
  app.add_option("--grpc-restricted-protocol", triton->grpc_restricted_protocols,
                 "Triton's: GROUP,GROUP,...:KEY=VALUE: those API groups are served over gRPC only to calls "
                 "with metadata triton-grpc-protocol-KEY: VALUE (others: UNAVAILABLE); repeatable, a group "
                 "in one value only")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(kTritonGroup);
  app.add_option("--http-restricted-api", triton->http_restricted_apis,
                 "Triton's: GROUP,GROUP,...:KEY=VALUE: those API groups are served over REST only to "
                 "requests with header KEY: VALUE (others: 403); repeatable, a group in one value only")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->group(kTritonGroup);
  app.add_option("--log-verbose", triton->log_verbose,
                 "Triton's: 1 is --log-level debug, 2 and up trace, 0 (or false) leaves --log-level info")
      ->group(kTritonGroup);
  app.add_option("--log-info", triton->log_info, "Triton's: false is --log-level warn")->group(kTritonGroup);
  app.add_option("--log-warning", triton->log_warning,
                 "Triton's: false (with --log-info false) is --log-level error")
      ->group(kTritonGroup);
  app.add_option("--log-error", triton->log_error,
                 "Triton's: false (with --log-info and --log-warning false) is --log-level off")
      ->group(kTritonGroup);
  app.add_option("--exit-on-error", triton->exit_on_error,
                 "Triton's (default true): exit when a model fails to load at start, naming every one that "
                 "failed; false serves the others and lists the failed ones, with their reasons, in the log and "
                 "the repository index")
      ->group(kTritonGroup);
  app.add_option("--grpc-infer-response-compression-level", triton->grpc_infer_response_compression_level,
                 "Triton's (default none): compress the answers of ModelInfer and ModelStreamInfer, with the "
                 "algorithm gRPC picks for the level among those the client accepts (tritonclient: low gzip, "
                 "medium and high deflate)")
      ->check(CLI::IsMember({"none", "low", "medium", "high"}, CLI::ignore_case))
      ->group(kTritonGroup);
  app.add_option("--strict-readiness", triton->strict_readiness,
                 "Triton's (default true): report ready only while every model loaded or tried serves; false: "
                 "ready once start-up is over")
      ->group(kTritonGroup);
  app.add_option("--allow-gpu-metrics", triton->allow_gpu_metrics,
                 "Triton's (default true): export nv_gpu_* utilization, memory and power of the GPUs the "
                 "driver's NVML library reports; false: none")
      ->group(kTritonGroup);
  app.add_option("--strict-model-config", triton->strict_model_config,
                 "Triton's: graphserve completes no config from the model file (true); false is accepted and "
                 "changes nothing")
      ->group(kTritonGroup);
  app.add_flag("--disable-auto-complete-config",
               "Triton's: what graphserve does anyway (no config is completed from the model file)")
      ->group(kTritonGroup);
  app.add_option("--repository-poll-secs", triton->repository_poll_secs,
                 "Triton's: with --model-control-mode poll, seconds between two reads of the repository")
      ->capture_default_str()
      ->check(CLI::Range(0, 86400))
      ->group(kTritonGroup);
  app.add_option("--exit-timeout-secs", triton->exit_timeout_secs, "Triton's: --drain-timeout-s")
      ->check(CLI::Range(0.0, 86400.0))
      ->group(kTritonGroup);
  app.add_option("--trace-config", triton->trace_config,
                 "Triton's request tracing, repeatable: triton,file=PATH, triton,log-frequency=N, "
                 "level=OFF|TIMESTAMPS, rate=N, count=N (docs/running.md, \"Tracing\")")
      ->group(kTritonGroup);
  const std::pair<const char*, std::string*> old_trace_flags[] = {
      {"--trace-file", &triton->trace_file},
      {"--trace-level", &triton->trace_level},
      {"--trace-rate", &triton->trace_rate},
      {"--trace-count", &triton->trace_count},
      {"--trace-log-frequency", &triton->trace_log_frequency},
  };
  for (const auto& [flag, value] : old_trace_flags) {
    app.add_option(flag, *value, "Triton's older spelling of a --trace-config setting")->group(kTritonGroup);
  }
  // Hidden from --help (they do nothing graphserve can), refused after parsing with their reason.
  for (size_t i = 0; i < std::size(kRefusedTritonFlags); ++i) {
    app.add_option(kRefusedTritonFlags[i].name, triton->refused_values[i])->group("");
  }
}

bool Given(const CLI::App& app, const char* flag) { return app.count(flag) > 0; }

// An alias and its graphserve flag given with different values.
Status Disagree(const std::string& first, const std::string& second) {
  return InvalidArgument(first + " and " + second + " disagree: give one of them");
}

Status RefuseTritonFlags(const CLI::App& app, const TritonValues& triton) {
  for (size_t i = 0; i < std::size(kRefusedTritonFlags); ++i) {
    const RefusedTritonFlag& flag = kRefusedTritonFlags[i];
    if (!Given(app, flag.name) || IsAccepted(flag, triton.refused_values[i])) continue;
    return InvalidArgument(std::string(flag.name) + " " + triton.refused_values[i] +
                           ": tritonserver's flag is not supported: " + flag.why);
  }
  return Status::Ok();
}

// --X-port sets the port of --X-address, and --allow-X false turns the endpoint off.
Status ApplyEndpointFlags(const CLI::App& app, const EndpointFlags& flags, const std::string& default_address,
                          std::string* address) {
  const bool address_given = Given(app, flags.address);
  const bool port_given = Given(app, flags.port);
  if (Given(app, flags.allow)) {
    bool allowed = true;
    Status status = ParseTritonBool(flags.allow, flags.allow_value, &allowed);
    if (!status.ok()) return status;
    if (!allowed) {
      if (port_given || (address_given && !address->empty())) {
        return InvalidArgument(std::string(flags.allow) + " false turns the " + flags.name + " endpoint off: leave " +
                               (port_given ? flags.port : flags.address) + " out");
      }
      address->clear();
      return Status::Ok();
    }
    if (address->empty()) {
      return Disagree(std::string(flags.allow) + " " + flags.allow_value, std::string(flags.address) + " ''");
    }
  }
  if (address->empty()) {
    if (port_given) {
      return InvalidArgument(std::string(flags.port) + ": the " + flags.name + " endpoint is off (" + flags.address +
                             " '')");
    }
    return Status::Ok();
  }
  const std::string port = std::to_string(flags.port_value);
  if (!NamesPort(*address)) {  // Triton's form: the host alone
    *address += ":" + (port_given ? port : PortOf(default_address));
    return Status::Ok();
  }
  if (!port_given) return Status::Ok();
  if (!address_given) {
    *address = HostOf(*address) + ":" + port;
    return Status::Ok();
  }
  const std::string named = PortOf(*address);
  const bool same = !named.empty() && named.size() <= 5 && named.find_first_not_of("0123456789") == std::string::npos &&
                    std::stoi(named) == flags.port_value;
  if (!same) return Disagree(std::string(flags.address) + " " + *address, std::string(flags.port) + " " + port);
  return Status::Ok();
}

Status ApplyEndpoints(const CLI::App& app, const TritonValues& triton, ServerOptions* options) {
  const ServerOptions defaults;
  Status status = ApplyEndpointFlags(app, triton.grpc, defaults.grpc_address, &options->grpc_address);
  if (status.ok()) status = ApplyEndpointFlags(app, triton.http, defaults.http_address, &options->http_address);
  if (status.ok()) {
    status = ApplyEndpointFlags(app, triton.metrics, defaults.metrics_address, &options->metrics_address);
  }
  if (!status.ok()) return status;
  for (const auto& [flag, address] :
       {std::pair<const char*, const std::string*>{"--grpc-address", &options->grpc_address},
        {"--http-address", &options->http_address},
        {"--metrics-address", &options->metrics_address}}) {
    status = CheckListenAddress(flag, *address);
    if (!status.ok()) return status;
  }
  if (options->grpc_address.empty() && options->http_address.empty()) {
    return InvalidArgument("the gRPC and REST endpoints are both off: no endpoint would serve requests");
  }
  options->grpc_infer_response_compression_level = Lower(triton.grpc_infer_response_compression_level);
  if (options->metrics_address.empty() && (options->metrics_plaintext || options->auth.protect_metrics)) {
    return InvalidArgument(std::string(options->metrics_plaintext ? "--metrics-plaintext" : "--metrics-auth") +
                           ": the metrics endpoint is off");
  }
  return Status::Ok();
}

// Triton's level switches onto --log-level.
Status ApplyLogFlags(const CLI::App& app, const TritonValues& triton, CommandLine* line) {
  TritonLogLevels levels;
  bool any_switch = false;
  const std::pair<const char*, std::pair<const std::string*, bool*>> switches[] = {
      {"--log-info", {&triton.log_info, &levels.info}},
      {"--log-warning", {&triton.log_warning, &levels.warning}},
      {"--log-error", {&triton.log_error, &levels.error}},
  };
  for (const auto& [flag, value] : switches) {
    if (!Given(app, flag)) continue;
    any_switch = true;
    const Status status = ParseTritonBool(flag, *value.first, value.second);
    if (!status.ok()) return status;
  }
  if (Given(app, "--log-verbose")) {
    any_switch = true;
    const Status status = ParseVerboseLevel(triton.log_verbose, &levels.verbose_level);
    if (!status.ok()) return status;
  }
  if (!any_switch) return Status::Ok();
  spdlog::level::level_enum level = spdlog::level::info;
  const Status status = SpdlogLevelFor(levels, &level, LogSwitchNames::kFlags);
  if (!status.ok()) return status;
  const spdlog::string_view_t level_name = spdlog::level::to_string_view(level);
  const std::string name(level_name.data(), level_name.size());
  const spdlog::level::level_enum given = spdlog::level::from_str(line->log_level);
  // An unknown --log-level (from_str's off) is SetupLogging's to refuse, naming it.
  const bool known = given != spdlog::level::off || line->log_level == "off";
  if (Given(app, "--log-level") && known && given != level) {
    return Disagree("--log-level " + line->log_level,
                    "Triton's --log-verbose/--log-info/--log-warning/--log-error (--log-level " + name + ")");
  }
  line->log_level = name;
  return Status::Ok();
}

Status ApplyRepositoryFlags(const CLI::App& app, const TritonValues& triton, CommandLine* line) {
  RepositoryOptions& repository = line->server.repository;
  if (Given(app, "--model-store")) {
    if (Given(app, "--model-repository") && repository.model_repository != triton.model_store) {
      return Disagree("--model-store " + triton.model_store, "--model-repository " + repository.model_repository);
    }
    repository.model_repository = triton.model_store;
  }
  if (Given(app, "--exit-on-error")) {
    const Status status = ParseTritonBool("--exit-on-error", triton.exit_on_error, &repository.exit_on_error);
    if (!status.ok()) return status;
  }
  if (Given(app, "--strict-readiness")) {
    const Status status =
        ParseTritonBool("--strict-readiness", triton.strict_readiness, &line->server.strict_readiness);
    if (!status.ok()) return status;
  }
  if (Given(app, "--allow-gpu-metrics")) {
    const Status status =
        ParseTritonBool("--allow-gpu-metrics", triton.allow_gpu_metrics, &line->server.gpu_metrics);
    if (!status.ok()) return status;
  }
  if (Given(app, "--strict-model-config")) {
    bool strict = true;
    const Status status = ParseTritonBool("--strict-model-config", triton.strict_model_config, &strict);
    if (!status.ok()) return status;
    if (!strict) {
      line->notes.push_back(
          "--strict-model-config=false: graphserve completes no config from the model file (it derives only "
          "the platform of backend \"pytorch\"); each model's config.pbtxt names its inputs, outputs and "
          "max_batch_size, as with Triton's --strict-model-config=true");
    }
  }
  const bool polling = repository.control_mode == ModelControlMode::kPoll;
  if (Given(app, "--repository-poll-secs") && !polling) {
    return InvalidArgument("--repository-poll-secs: only with --model-control-mode poll");
  }
  if (polling && triton.repository_poll_secs == 0) {
    return InvalidArgument("--repository-poll-secs 0: --model-control-mode poll would never poll (use none)");
  }
  repository.poll_interval = std::chrono::seconds(triton.repository_poll_secs);
  return Status::Ok();
}

// Triton's --grpc-restricted-protocol and --http-restricted-api, and --admin-apis.
Status ApplyRestrictionFlags(const GraphserveValues& values, const TritonValues& triton,
                             ApiAccessOptions* access) {
  for (const std::string& value : triton.grpc_restricted_protocols) {
    const Status status = access->grpc.Add("--grpc-restricted-protocol", value, /*grpc=*/true);
    if (!status.ok()) return status;
  }
  for (const std::string& value : triton.http_restricted_apis) {
    const Status status = access->http.Add("--http-restricted-api", value, /*grpc=*/false);
    if (!status.ok()) return status;
  }
  access->close_admin_groups = values.admin_apis == "closed";
  return Status::Ok();
}

// The checks of flags that depend on each other, and of the token file, before anything starts.
Status ValidateSecurity(const ServerOptions& options) {
  Status status = ValidateTlsOptions(options.tls);
  if (status.ok() && !options.auth.enabled() && (options.auth.protect_health || options.auth.protect_metrics)) {
    status = InvalidArgument(
        "--auth-health and --metrics-auth need tokens: --auth-token-file or GRAPHSERVE_AUTH_TOKEN");
  }
  if (status.ok() && options.auth.enabled()) {  // a missing or empty token file is a flag mistake too
    std::unique_ptr<TokenAuthenticator> tokens;
    status = TokenAuthenticator::Create(options.auth, nullptr, &tokens);
  }
  if (status.ok() && options.auth.enabled() && !options.tls.enabled()) {
    // A token sent in plaintext can be read on the way, and gRPC 1.51 checks metadata only on TLS
    // credentials (on plaintext it aborted the process at start-up).
    status = InvalidArgument(
        "--auth-token-file and GRAPHSERVE_AUTH_TOKEN need TLS: --tls-cert-file and --tls-key-file");
  }
  if (status.ok() && options.metrics_plaintext && !options.tls.enabled()) {
    status = InvalidArgument("--metrics-plaintext needs --tls-cert-file");
  }
  return status;
}

Status ParseLogFormatFlag(const std::string& text, LogFormat* format) {
  if (text == "ISO8601") {  // Triton's: graphserve's plain lines already carry ISO 8601 times
    *format = LogFormat::kPlain;
    return Status::Ok();
  }
  if (text == "default") {  // Triton's glog-style lines
    *format = LogFormat::kGlog;
    return Status::Ok();
  }
  return ParseLogFormat(text, format);
}

// Triton's older trace flags first, as the --trace-config settings they are, then --trace-config's
// own, in order: a later value of a setting wins, as in Triton.
Status ApplyTraceFlags(const CLI::App& app, const TritonValues& triton, TraceConfig* config) {
  const std::pair<const char*, std::pair<const char*, const std::string*>> old_flags[] = {
      {"--trace-file", {"triton,file=", &triton.trace_file}},
      {"--trace-level", {"level=", &triton.trace_level}},
      {"--trace-rate", {"rate=", &triton.trace_rate}},
      {"--trace-count", {"count=", &triton.trace_count}},
      {"--trace-log-frequency", {"triton,log-frequency=", &triton.trace_log_frequency}},
  };
  std::vector<std::string> settings;
  for (const auto& [flag, setting] : old_flags) {
    if (Given(app, flag)) settings.push_back(setting.first + *setting.second);
  }
  settings.insert(settings.end(), triton.trace_config.begin(), triton.trace_config.end());
  for (const std::string& setting : settings) {
    const Status status = ApplyTraceConfigFlag(setting, config);
    if (!status.ok()) return status;
  }
  if (config->timestamps && config->file.empty()) {
    return InvalidArgument(
        "--trace-config level=TIMESTAMPS needs a trace file: --trace-config triton,file=PATH");
  }
  return Status::Ok();
}

// Everything after CLI11 has read the command line.
Status Interpret(const CLI::App& app, const GraphserveValues& values, const TritonValues& triton, CommandLine* line) {
  ServerOptions& options = line->server;
  Status status = RefuseTritonFlags(app, triton);
  if (status.ok() && Given(app, "--exit-timeout-secs") && Given(app, "--drain-timeout-s") &&
      triton.exit_timeout_secs != values.drain_timeout_s) {
    std::ostringstream exit_timeout, drain_timeout;
    exit_timeout << "--exit-timeout-secs " << triton.exit_timeout_secs;
    drain_timeout << "--drain-timeout-s " << values.drain_timeout_s;
    status = Disagree(exit_timeout.str(), drain_timeout.str());
  }
  if (!status.ok()) return status;
  const double drain_timeout_s = Given(app, "--exit-timeout-secs") ? triton.exit_timeout_secs : values.drain_timeout_s;
  options.drain_timeout = Milliseconds(drain_timeout_s);
  options.connection_idle_timeout = Milliseconds(values.idle_timeout_s);
  options.grpc_max_connection_age = Milliseconds(values.grpc_connection_age_s);
  options.grpc_max_connection_age_grace = Milliseconds(values.grpc_connection_age_grace_s);
  options.grpc_answer_write_timeout = Milliseconds(values.grpc_answer_write_timeout_s);
  options.http_bounds.header_timeout = Milliseconds(values.http_header_timeout_s);
  options.http_bounds.body_timeout = Milliseconds(values.http_body_timeout_s);
  options.http_bounds.keep_alive_timeout = Milliseconds(values.http_keep_alive_timeout_s);
  options.http_bounds.send_timeout = Milliseconds(values.http_send_timeout_s);
  options.http_infer_deadline = std::chrono::milliseconds(values.http_infer_deadline_ms);
  options.metrics.client_timeout = Milliseconds(values.metrics_client_timeout_s);
  options.busy_poll = std::chrono::microseconds(values.busy_poll_us);
  // From the environment rather than a flag: a flag's value is visible to every user in `ps`.
  if (const char* tokens = std::getenv("GRAPHSERVE_AUTH_TOKEN")) options.auth.env_tokens = tokens;

  status = ParseLogFormatFlag(values.log_format, &line->log_format);
  if (status.ok()) status = ParseModelControlMode(values.control_mode, &options.repository.control_mode);
  if (status.ok()) status = ApplyEndpoints(app, triton, &options);
  if (status.ok()) status = ApplyLogFlags(app, triton, line);
  if (status.ok()) status = ApplyRepositoryFlags(app, triton, line);
  if (status.ok()) status = ApplyRestrictionFlags(values, triton, &options.api_access);
  if (status.ok()) status = ApplyTraceFlags(app, triton, &options.trace.global);
  if (status.ok()) status = ValidateSecurity(options);
  return status;
}

}  // namespace

Status ParseModelControlMode(const std::string& text, ModelControlMode* mode) {
  for (ModelControlMode candidate : {ModelControlMode::kNone, ModelControlMode::kExplicit, ModelControlMode::kPoll}) {
    if (text == ModelControlModeName(candidate)) {
      *mode = candidate;
      return Status::Ok();
    }
  }
  return InvalidArgument("--model-control-mode: '" + text + "' is not one of none, explicit, poll");
}

std::optional<int> ParseCommandLine(int argc, const char* const* argv, CommandLine* line, std::ostream& out,
                                    std::ostream& err) {
  CLI::App app{"graphserve: a KServe v2 inference server that replays CUDA graphs for variable shapes"};
  GraphserveValues values;
  TritonValues triton;
  AddGraphserveFlags(app, line, &values);
  AddTritonFlags(app, &triton);
  app.set_version_flag("--version", GRAPHSERVE_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // CLI11's own statuses (109 for an unknown flag, ...) would be one more set to document.
    const int cli11_status = app.exit(error, out, err);
    return cli11_status == 0 ? kExitStopped : kExitBadUsage;
  }
  const Status status = Interpret(app, values, triton, line);
  if (status.ok()) return std::nullopt;
  err << status.message() << "\n";
  return kExitBadUsage;
}

}  // namespace graphserve
