// graphserve: the server executable. Parses flags, starts a GraphServer, and waits for SIGINT or
// SIGTERM to drain and exit 0; SIGHUP reloads the token file and the TLS certificates.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <sys/resource.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <pthread.h>
#include <thread>

#include "graphserve/grpc_process.h"
#include "graphserve/server/observability/logging.h"
#include "graphserve/server/process/server.h"

namespace {

// How long a running batch may take after the drain timeout before the process exits regardless.
constexpr std::chrono::milliseconds kDrainGrace{10000};

}  // namespace

int main(int argc, char** argv) {
  graphserve::TurnOffAbseilDeadlockDetection();
  graphserve::ServerOptions options;
  std::string log_level = "info";
  std::string log_format = "plain";
  double drain_timeout_s = 30.0;
  std::string control_mode = "none";
  bool grpc_executor_offload = false;

  CLI::App app{"graphserve: a KServe v2 inference server that replays CUDA graphs for variable shapes"};
  app.add_option("--grpc-address", options.grpc_address, "HOST:PORT of the gRPC endpoint")
      ->capture_default_str();
  app.add_option("--grpc-max-concurrent-streams", options.grpc_max_concurrent_streams,
                 "calls one gRPC connection may have open at once (HTTP/2 streams); more wait in the client")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--grpc-infer-threads", options.grpc_infer_threads,
                 "threads taking ModelInfer calls off gRPC (each drains a completion queue of its own); "
                 "0: half the usable cores (CPU affinity and cgroup quota), 2 to 16")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  int64_t busy_poll_us = -1;
  app.add_option("--busy-poll-us", busy_poll_us,
                 "after each event, ModelInfer's threads and idle batchers poll for work this long without "
                 "sleeping: a lone request skips thread wake-ups, at the price of CPU; 0: they sleep at once; "
                 "-1: 300 with 8 usable cores or more, else 0")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, graphserve::kMaxBusyPollUs));
  app.add_option("--busy-poll-threads", options.busy_poll_threads,
                 "how many of ModelInfer's threads may busy-poll at once (each spinning thread holds a core)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_flag("--grpc-executor-offload", grpc_executor_offload,
               "let gRPC move a busy connection's transport work to its executor thread, as gRPC does by "
               "default; without it the polling thread that picked the work up finishes it (under "
               "overload the executor's few threads became the server's intake)");
  double idle_timeout_s = options.connection_idle_timeout.count() / 1000.0;
  app.add_option("--connection-idle-timeout-s", idle_timeout_s,
                 "close a gRPC connection that has had no call for this long, freeing its descriptor; 0: never")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 604800.0));  // a week: gRPC takes milliseconds as an int
  app.add_option("--max-request-bytes", options.max_request_bytes,
                 "largest gRPC request message and REST request body accepted (RESOURCE_EXHAUSTED / 413 "
                 "beyond); 0: derived from the largest request the repository's models take")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{256} * 1024 * 1024));
  app.add_option("--http-address", options.http_address,
                 "HOST:PORT of the KServe v2 HTTP/REST endpoint (as Triton's port 8000); '' for none")
      ->capture_default_str();
  app.add_option("--http-thread-count", options.http_thread_count,
                 "threads of the REST endpoint (each serves many keep-alive connections)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--metrics-address", options.metrics_address, "HOST:PORT of the Prometheus /metrics endpoint")
      ->capture_default_str();
  app.add_option("--model-repository", options.repository.model_repository,
                 "folder with one sub-folder per model: config.pbtxt and model.pt2 or model.pt, or "
                 "Triton's numbered version folders (MODEL/1/model.pt; the highest is served); "
                 "without it the built-in 'encoder' is served");
  app.add_option("--model-control-mode", control_mode,
                 "none: serve every model of the repository; explicit: serve the --load-model ones, "
                 "then load and unload through the repository API (as Triton's flag)")
      ->capture_default_str();
  app.add_option("--load-model", options.repository.startup_models,
                 "with --model-control-mode explicit: a model to load at start ('*': all); repeatable");
  app.add_option("--device", options.repository.device, "cpu, cuda, cuda:N or auto (CUDA when present)")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  app.add_option("--log-format", log_format,
                 "plain (human-readable) or json (one JSON object per line, for log collectors)")
      ->capture_default_str();
  graphserve::LogLimit client_log_limit;
  app.add_option("--log-rate-limit", client_log_limit.lines,
                 "lines a kind of client-caused event (bad request, refused call or connection, a library's "
                 "line) may log per 10 s; the rest are counted in graphserve_log_lines_suppressed_total and "
                 "the next line written says how many; 0: no limit")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  app.add_option("--drain-timeout-s", drain_timeout_s,
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
  app.add_flag("--auth-health", options.auth.protect_health,
               "health probes (grpc.health.v1, ServerLive/Ready, /v2/health/*) need a token too");
  app.add_flag("--metrics-auth", options.auth.protect_metrics, "/metrics needs a token too");
  app.set_version_flag("--version", GRAPHSERVE_VERSION);
  CLI11_PARSE(app, argc, argv);
  options.drain_timeout = std::chrono::milliseconds(static_cast<int64_t>(drain_timeout_s * 1000));
  options.connection_idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(idle_timeout_s * 1000));
  options.busy_poll = std::chrono::microseconds(busy_poll_us);
  // From the environment rather than a flag: a flag's value is visible to every user in `ps`.
  if (const char* tokens = std::getenv("GRAPHSERVE_AUTH_TOKEN")) options.auth.env_tokens = tokens;

  graphserve::LogFormat format = graphserve::LogFormat::kPlain;
  graphserve::Status status = graphserve::ParseLogFormat(log_format, &format);
  if (status.ok()) status = graphserve::ParseModelControlMode(control_mode, &options.repository.control_mode);
  if (status.ok()) status = graphserve::ValidateTlsOptions(options.tls);
  if (status.ok() && !options.auth.enabled() && (options.auth.protect_health || options.auth.protect_metrics)) {
    status = graphserve::InvalidArgument(
        "--auth-health and --metrics-auth need tokens: --auth-token-file or GRAPHSERVE_AUTH_TOKEN");
  }
  if (status.ok() && options.auth.enabled()) {  // a missing or empty token file is a flag mistake too
    std::unique_ptr<graphserve::TokenAuthenticator> tokens;
    status = graphserve::TokenAuthenticator::Create(options.auth, nullptr, &tokens);
  }
  if (status.ok() && options.auth.enabled() && !options.tls.enabled()) {
    // A token sent in plaintext can be read on the way, and gRPC 1.51 checks metadata only on TLS
    // credentials (on plaintext it aborted the process at start-up).
    status = graphserve::InvalidArgument(
        "--auth-token-file and GRAPHSERVE_AUTH_TOKEN need TLS: --tls-cert-file and --tls-key-file");
  }
  if (status.ok() && options.metrics_plaintext && !options.tls.enabled()) {
    status = graphserve::InvalidArgument("--metrics-plaintext needs --tls-cert-file");
  }
  if (status.ok()) status = graphserve::SetupLogging(log_level, format, client_log_limit);
  if (!status.ok()) {
    fprintf(stderr, "%s\n", status.message().c_str());
    return 2;
  }

  // Each connection is a descriptor: with the common soft limit of 1024 (or a container's lower
  // one), idle connections could exhaust them while the hard limit allows far more.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    const rlim_t soft = files.rlim_cur;
    files.rlim_cur = files.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &files) == 0) {
      spdlog::info("open-file limit raised from {} to {}", soft, files.rlim_max);
    }
  }

  // Block the stop and reload signals in every thread (threads inherit the mask) and take them
  // synchronously here, so that shutdown and reload run in ordinary code rather than in a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // After the mask: initialising gRPC starts its threads.
  if (!grpc_executor_offload) {
    if (graphserve::KeepGrpcTransportWorkOnPollingThreads()) {
      spdlog::info("gRPC's executor is off: each connection's transport work stays on the polling threads");
    } else {
      spdlog::warn("this gRPC build has no switch for its executor: a busy connection's transport work may "
                   "move to gRPC's executor thread");
    }
  }

  graphserve::GraphServer server;
  status = server.Start(options);
  if (!status.ok()) {
    spdlog::critical("cannot start: {}", status.ToString());
    server.Shutdown();
    return 1;
  }
  int signal_number = 0;
  while (sigwait(&signals, &signal_number) == 0 && signal_number == SIGHUP) server.Reload();
  spdlog::info("received {}", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  // Shutdown cancels what is left at the drain timeout, then waits for the batches already running.
  // A batch that hangs (a stuck device) must not hold an orchestrator's restart forever: past the
  // timeout plus a grace for one batch, the process leaves without waiting.
  std::thread([deadline = options.drain_timeout + kDrainGrace] {
    std::this_thread::sleep_for(deadline);
    spdlog::critical("shutdown still waiting {} ms after the signal: exiting without it", deadline.count());
    spdlog::shutdown();
    _exit(1);
  }).detach();
  server.Shutdown();
  spdlog::info("stopped");
  return 0;
}
