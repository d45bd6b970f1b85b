// InferenceClient: one deadline per call, and readiness polling.
#include "graphserve/client/client.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

namespace graphserve {

namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const ClientOptions& options) {
  grpc::ChannelArguments args;
  // An encoder's last_hidden_state at batch 32 x 512 tokens is 16 MiB, beyond gRPC's 4 MiB default.
  args.SetMaxReceiveMessageSize(-1);
  if (options.max_reconnect_backoff_ms > 0) {
    const int backoff_ms =
        static_cast<int>(std::min<int64_t>(options.max_reconnect_backoff_ms, INT32_MAX));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff_ms);
    // The initial backoff (1 s by default) must not exceed the cap, or the cap has no effect at first.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(backoff_ms, 1000));
  }
  if (!options.tls) return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = options.tls_root_pem;
  tls.pem_cert_chain = options.tls_cert_pem;
  tls.pem_private_key = options.tls_key_pem;
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(tls), args);
}

bool ReadFile(const std::string& flag, const std::string& path, std::string* text, std::string* error) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  if (file) contents << file.rdbuf();
  if (!file || file.bad()) {
    *error = flag + ": cannot read " + path;
    return false;
  }
  *text = contents.str();
  return true;
}

// The first token of `text`: lines (and commas) apart, blank lines and '#' comments skipped.
std::string FirstToken(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line, '\n')) {
    line = line.substr(0, line.find(','));
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    return line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
  }
  return "";
}

// A port as typed: decimal digits only, 1..65535.
bool ValidPort(const std::string& port) {
  if (port.empty() || port.size() > 5) return false;
  if (!std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  const int number = std::stoi(port);
  return number >= 1 && number <= 65535;
}

}  // namespace

std::string DescribeCallError(const grpc::Status& status, const std::string& address) {
  const std::string& message = status.error_message();
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    // gRPC's wording of its transport errors (core's subchannel and resolver messages).
    if (message.find("Connection refused") != std::string::npos) {
      return "cannot reach graphserve at " + address + " (connection refused); is it running?";
    }
    // An HTTP/1.x server where gRPC (HTTP/2) was expected: most often graphserve's metrics port.
    if (message.find("http1.x server") != std::string::npos ||
        message.find("Failed parsing HTTP/2") != std::string::npos) {
      return address + " answers HTTP/1.x, not gRPC: is it graphserve's metrics port? The gRPC port is " +
             std::to_string(kDefaultGrpcPort) + " unless --grpc-address says otherwise";
    }
    if (message.find("DNS resolution failed") != std::string::npos) {
      return "cannot reach graphserve at " + address + " (its host name does not resolve)";
    }
  }
  return std::string(StatusCodeName(status.error_code())) + ": " + message;
}

namespace {

// NormalizeServerAddress for a port of `protocol` ("gRPC", "REST") whose default is `default_port`;
// unix: paths only where gRPC takes them.
bool NormalizeAddress(const std::string& address, const char* protocol, int default_port, bool allow_unix,
                      std::string* normalized, std::string* error) {
  const std::string example = " (e.g. localhost:" + std::to_string(default_port) + ")";
  if (allow_unix && address.rfind("unix:", 0) == 0) {
    *normalized = address;
    return true;
  }
  if (address.find("://") != std::string::npos) {
    *error = "'" + address + "': drop the scheme; graphserve's " + protocol + " address is HOST:PORT" + example;
    return false;
  }
  std::string host;
  std::string port;
  bool port_given = false;  // a ':' after the host, even with nothing after it
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos) {
      *error = "'" + address + "': an IPv6 address needs its closing ']'";
      return false;
    }
    host = address.substr(0, close + 1);
    const std::string rest = address.substr(close + 1);
    if (!rest.empty() && rest[0] != ':') {
      *error = "'" + address + "': expected ':PORT' after ']'";
      return false;
    }
    port_given = !rest.empty();
    if (port_given) port = rest.substr(1);
  } else {
    const size_t colon = address.find(':');
    if (colon != std::string::npos && address.find(':', colon + 1) != std::string::npos) {
      *error = "'" + address + "': put an IPv6 address in brackets, e.g. [::1]:" + std::to_string(default_port);
      return false;
    }
    host = address.substr(0, colon);
    port_given = colon != std::string::npos;
    if (port_given) port = address.substr(colon + 1);
  }
  if (host.empty() || host == "[]") {
    *error = "'" + address + "': no host; use HOST:PORT" + example;
    return false;
  }
  if (!port_given) port = std::to_string(default_port);
  if (!ValidPort(port)) {
    *error = "'" + address + "': the port must be a number from 1 to 65535";
    return false;
  }
  *normalized = host + ":" + port;
  return true;
}

}  // namespace

bool NormalizeServerAddress(const std::string& address, std::string* normalized, std::string* error) {
  return NormalizeAddress(address, "gRPC", kDefaultGrpcPort, /*allow_unix=*/true, normalized, error);
}

bool NormalizeHttpAddress(const std::string& address, std::string* normalized, std::string* error) {
  return NormalizeAddress(address, "REST", kDefaultHttpPort, /*allow_unix=*/false, normalized, error);
}

bool LoadClientSecurity(const ClientSecurityFlags& flags, ClientOptions* options, std::string* error) {
  if (flags.tls_cert_file.empty() != flags.tls_key_file.empty()) {
    *error = "--tls-cert-file and --tls-key-file (mutual TLS) go together";
    return false;
  }
  options->tls = flags.tls || !flags.tls_ca_file.empty() || !flags.tls_cert_file.empty();
  if (!flags.tls_ca_file.empty() && !ReadFile("--tls-ca-file", flags.tls_ca_file, &options->tls_root_pem, error)) {
    return false;
  }
  if (!flags.tls_cert_file.empty() &&
      (!ReadFile("--tls-cert-file", flags.tls_cert_file, &options->tls_cert_pem, error) ||
       !ReadFile("--tls-key-file", flags.tls_key_file, &options->tls_key_pem, error))) {
    return false;
  }
  if (!flags.token_file.empty()) {
    std::string text;
    if (!ReadFile("--auth-token-file", flags.token_file, &text, error)) return false;
    options->token = FirstToken(text);
    if (options->token.empty()) {
      *error = "--auth-token-file: " + flags.token_file + " holds no token";
      return false;
    }
  } else if (const char* env = std::getenv("GRAPHSERVE_AUTH_TOKEN")) {
    options->token = FirstToken(env);
  }
  return true;
}

InferenceClient::InferenceClient(const std::string& address, const ClientOptions& options)
    : address_(address),
      options_(options),
      channel_(MakeChannel(address, options)),
      stub_(inference::GRPCInferenceService::NewStub(channel_)) {}

void InferenceClient::Prepare(grpc::ClientContext* context) const {
  if (!options_.token.empty()) context->AddMetadata("authorization", "Bearer " + options_.token);
  if (options_.timeout_ms > 0) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::milliseconds(options_.timeout_ms));
  }
}

grpc::Status InferenceClient::ServerLive(bool* live) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::ServerLiveResponse response;
  grpc::Status status = stub_->ServerLive(&context, inference::ServerLiveRequest(), &response);
  *live = status.ok() && response.live();
  return status;
}

grpc::Status InferenceClient::ServerReady(bool* ready) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::ServerReadyResponse response;
  grpc::Status status = stub_->ServerReady(&context, inference::ServerReadyRequest(), &response);
  *ready = status.ok() && response.ready();
  return status;
}

grpc::Status InferenceClient::ModelReady(const std::string& model, bool* ready) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::ModelReadyRequest request;
  request.set_name(model);
  inference::ModelReadyResponse response;
  grpc::Status status = stub_->ModelReady(&context, request, &response);
  *ready = status.ok() && response.ready();
  return status;
}

grpc::Status InferenceClient::ServerMetadata(inference::ServerMetadataResponse* response) {
  grpc::ClientContext context;
  Prepare(&context);
  return stub_->ServerMetadata(&context, inference::ServerMetadataRequest(), response);
}

grpc::Status InferenceClient::ModelMetadata(const std::string& model,
                                            inference::ModelMetadataResponse* response) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::ModelMetadataRequest request;
  request.set_name(model);
  return stub_->ModelMetadata(&context, request, response);
}

grpc::Status InferenceClient::ModelConfig(const std::string& model,
                                          inference::ModelConfigResponse* response) {
  grpc::ClientContext context;
  Prepare(&context);
  inference::ModelConfigRequest request;
  request.set_name(model);
  return stub_->ModelConfig(&context, request, response);
}

grpc::Status InferenceClient::ModelInfer(const inference::ModelInferRequest& request,
                                         inference::ModelInferResponse* response) {
  grpc::ClientContext context;
  Prepare(&context);
  return stub_->ModelInfer(&context, request, response);
}

grpc::Status InferenceClient::WaitForReady(std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point give_up = Clock::now() + timeout;
  const auto poll_interval =
      std::chrono::milliseconds(std::max<int64_t>(options_.ready_poll_interval_ms, 1));
  std::string last = "no answer yet";
  while (true) {
    // Not truncated to whole milliseconds: that gave up to 1 ms before the timeout.
    const Clock::duration left = give_up - Clock::now();
    if (left <= Clock::duration::zero()) break;
    // Prepared as every call is, for its token (a server whose health probes need one answers
    // nothing else) and the per-call deadline; one poll may not outlast the overall timeout either.
    grpc::ClientContext context;
    Prepare(&context);
    const auto poll_end = std::chrono::system_clock::now() + std::chrono::ceil<std::chrono::milliseconds>(left);
    if (poll_end < context.deadline()) context.set_deadline(poll_end);
    inference::ServerReadyResponse response;
    const grpc::Status status =
        stub_->ServerReady(&context, inference::ServerReadyRequest(), &response);
    if (status.ok() && response.ready()) return grpc::Status::OK;
    last = status.ok() ? std::string("ready=false")
                       : std::string(StatusCodeName(status.error_code())) + ": " +
                             status.error_message();
    std::this_thread::sleep_until(std::min(Clock::now() + poll_interval, give_up));
  }
  return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                      address_ + " not ready after " + std::to_string(timeout.count()) +
                          " ms; last answer: " + last);
}

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::DO_NOT_USE: break;
  }
  return "UNKNOWN_CODE";
}

}  // namespace graphserve
