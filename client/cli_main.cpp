// graphserve-cli: health checks, metadata, model configs and one-off inference against a KServe v2 gRPC
// server, and plan-grid, a bucket grid proposed from a graphserve's traffic.
// Exit status: 0 on success (for `health`: live and ready), 1 otherwise, with the gRPC status code name
// and message on stderr. 1 is also what a Docker HEALTHCHECK must return for "unhealthy".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <google/protobuf/text_format.h>
#include <nlohmann/json.hpp>

#include "address_flag.h"
#include "graphserve/client/client.h"
#include "graphserve/client/number_flags.h"
#include "plan_grid_command.h"

namespace {

using graphserve::InferenceClient;
// Keys in the order written, which reads better than sorted.
using json = nlohmann::ordered_json;

constexpr int kFailure = 1;

struct ConnectionFlags {
  std::string address = "localhost:8001";
  int64_t timeout_ms = 10000;
  graphserve::ClientSecurityFlags security;
  // What the security flags and GRAPHSERVE_AUTH_TOKEN say, read once the flags are parsed.
  graphserve::ClientOptions options;
};

struct InferFlags {
  std::string model;
  int64_t rows = 1;
  int64_t length = 8;
  std::vector<int64_t> ids;
  uint64_t seed = 0;
  std::string contents = "raw";
  std::vector<std::string> outputs;
  std::string request_id;
  bool json = false;
};

// How many leading values an output summary shows.
constexpr size_t kFirstValues = 5;

int Fail(const InferenceClient& client, const grpc::Status& status) {
  std::cerr << graphserve::DescribeCallError(status, client.address()) << "\n";
  return kFailure;
}

InferenceClient MakeClient(const ConnectionFlags& flags) {
  graphserve::ClientOptions options = flags.options;
  options.timeout_ms = flags.timeout_ms;
  return InferenceClient(flags.address, options);
}

std::string FormatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

template <typename Repeated>
std::vector<int64_t> ToShape(const Repeated& dims) {
  return std::vector<int64_t>(dims.begin(), dims.end());
}

// ---- health ---------------------------------------------------------------------------------------

int RunHealth(const ConnectionFlags& flags, double wait_s) {
  InferenceClient client = MakeClient(flags);
  grpc::Status waited;
  if (wait_s > 0) {
    // Not fatal by itself: the checks below report the state as it is now.
    waited = client.WaitForReady(std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1000)));
  }
  bool live = false;
  grpc::Status status = client.ServerLive(&live);
  // Unreachable still: one message, not the wait's and then the same again.
  if (!status.ok()) return Fail(client, status);
  if (!waited.ok()) std::cerr << "not ready after --wait-s " << wait_s << " s\n";
  bool ready = false;
  status = client.ServerReady(&ready);
  if (!status.ok()) return Fail(client, status);
  std::cout << "live: " << (live ? "true" : "false") << "\nready: " << (ready ? "true" : "false")
            << "\n";
  return live && ready ? 0 : kFailure;
}

// ---- metadata -------------------------------------------------------------------------------------

json TensorsJson(
    const google::protobuf::RepeatedPtrField<inference::ModelMetadataResponse::TensorMetadata>&
        tensors) {
  json list = json::array();
  for (const auto& tensor : tensors) {
    list.push_back({{"name", tensor.name()},
                    {"datatype", tensor.datatype()},
                    {"shape", ToShape(tensor.shape())}});
  }
  return list;
}

void PrintTensors(
    const char* title,
    const google::protobuf::RepeatedPtrField<inference::ModelMetadataResponse::TensorMetadata>&
        tensors) {
  std::cout << title << ":\n";
  for (const auto& tensor : tensors) {
    std::cout << "  " << tensor.name() << " " << tensor.datatype() << " "
              << ShapeString(ToShape(tensor.shape())) << "\n";
  }
}

std::string Join(const google::protobuf::RepeatedPtrField<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

int RunMetadata(const ConnectionFlags& flags, const std::string& model, bool as_json) {
  InferenceClient client = MakeClient(flags);
  if (model.empty()) {
    inference::ServerMetadataResponse metadata;
    const grpc::Status status = client.ServerMetadata(&metadata);
    if (!status.ok()) return Fail(client, status);
    if (as_json) {
      const std::vector<std::string> extensions(metadata.extensions().begin(),
                                                metadata.extensions().end());
      std::cout << json{{"name", metadata.name()},
                        {"version", metadata.version()},
                        {"extensions", extensions}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << "name: " << metadata.name() << "\nversion: " << metadata.version()
                << "\nextensions: " << Join(metadata.extensions()) << "\n";
    }
    return 0;
  }
  inference::ModelMetadataResponse metadata;
  const grpc::Status status = client.ModelMetadata(model, &metadata);
  if (!status.ok()) return Fail(client, status);
  if (as_json) {
    const std::vector<std::string> versions(metadata.versions().begin(), metadata.versions().end());
    std::cout << json{{"name", metadata.name()},
                      {"versions", versions},
                      {"platform", metadata.platform()},
                      {"inputs", TensorsJson(metadata.inputs())},
                      {"outputs", TensorsJson(metadata.outputs())}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << "name: " << metadata.name() << "\nversions: " << Join(metadata.versions())
              << "\nplatform: " << metadata.platform() << "\n";
    PrintTensors("inputs", metadata.inputs());
    PrintTensors("outputs", metadata.outputs());
  }
  return 0;
}

// ---- config --------------------------------------------------------------------------------------

// In protobuf text format, the config.pbtxt syntax, so that the answer can be read or saved as one.
int RunConfig(const ConnectionFlags& flags, const std::string& model) {
  InferenceClient client = MakeClient(flags);
  inference::ModelConfigResponse response;
  const grpc::Status status = client.ModelConfig(model, &response);
  if (!status.ok()) return Fail(client, status);
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(response.config(), &text)) {
    std::cerr << "INTERNAL: the server's config cannot be printed as text\n";
    return kFailure;
  }
  std::cout << text;
  return 0;
}

// ---- infer ----------------------------------------------------------------------------------------

// min/max/mean over the finite values; NaN and infinities are counted apart, since one of them is
// usually the bug being looked for.
struct Summary {
  int64_t finite = 0;
  int64_t non_finite = 0;
  double min = 0;
  double max = 0;
  double mean = 0;
  std::vector<double> first;
};

template <typename T>
Summary Summarize(const std::vector<T>& values) {
  Summary summary;
  double sum = 0;
  summary.min = std::numeric_limits<double>::infinity();
  summary.max = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < values.size(); ++i) {
    const double value = static_cast<double>(values[i]);
    if (i < kFirstValues) summary.first.push_back(value);
    if (!std::isfinite(value)) {
      ++summary.non_finite;
      continue;
    }
    ++summary.finite;
    sum += value;
    summary.min = std::min(summary.min, value);
    summary.max = std::max(summary.max, value);
  }
  if (summary.finite > 0) {
    summary.mean = sum / static_cast<double>(summary.finite);
  } else {
    summary.min = summary.max = 0;
  }
  return summary;
}

// Summarises FP32 and INT64 outputs; other datatypes are reported by size only.
grpc::Status SummarizeOutput(const graphserve::OutputView& output, bool* has_summary,
                             Summary* summary) {
  *has_summary = false;
  if (output.datatype == "FP32") {
    std::vector<float> values;
    grpc::Status status = graphserve::OutputAsFloats(output, &values);
    if (!status.ok()) return status;
    *summary = Summarize(values);
    *has_summary = true;
  } else if (output.datatype == "INT64") {
    std::vector<int64_t> values;
    grpc::Status status = graphserve::OutputAsInt64s(output, &values);
    if (!status.ok()) return status;
    *summary = Summarize(values);
    *has_summary = true;
  }
  return grpc::Status::OK;
}

int RunInfer(const ConnectionFlags& flags, const InferFlags& infer) {
  InferenceClient client = MakeClient(flags);
  graphserve::RequestSpec spec;
  spec.model = infer.model;
  spec.request_id = infer.request_id;
  spec.rows = infer.rows;
  spec.length = infer.length;
  spec.seed = infer.seed;
  spec.ids = infer.ids;
  spec.encoding =
      infer.contents == "typed" ? graphserve::InputEncoding::kTyped : graphserve::InputEncoding::kRaw;
  spec.outputs = infer.outputs;

  // The metadata says which inputs to fill; a server without ModelMetadata gets the encoder's inputs.
  // So does a model the server does not know: the request is sent anyway, so that what the user
  // sees is the server's answer to the infer call itself.
  inference::ModelInferRequest request;
  inference::ModelMetadataResponse metadata;
  grpc::Status status = client.ModelMetadata(infer.model, &metadata);
  if (status.ok()) {
    status = graphserve::MakeRequestFromMetadata(metadata, spec, &request);
  } else if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED ||
             status.error_code() == grpc::StatusCode::NOT_FOUND) {
    status = graphserve::MakeTokenRequest(spec, &request);
  }
  if (!status.ok()) return Fail(client, status);

  inference::ModelInferResponse response;
  const auto start = std::chrono::steady_clock::now();
  status = client.ModelInfer(request, &response);
  const double latency_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) return Fail(client, status);

  json outputs = json::array();
  std::string text;
  for (const auto& tensor : response.outputs()) {
    graphserve::OutputView output;
    status = graphserve::FindOutput(response, tensor.name(), &output);
    if (!status.ok()) return Fail(client, status);
    bool has_summary = false;
    Summary summary;
    status = SummarizeOutput(output, &has_summary, &summary);
    if (!status.ok()) return Fail(client, status);

    json entry = {{"name", tensor.name()}, {"datatype", tensor.datatype()}, {"shape", output.shape}};
    text += tensor.name() + " " + tensor.datatype() + " " + ShapeString(output.shape);
    if (has_summary) {
      entry["min"] = summary.min;
      entry["max"] = summary.max;
      entry["mean"] = summary.mean;
      entry["non_finite"] = summary.non_finite;
      entry["first"] = summary.first;
      text += "  min " + FormatNumber(summary.min) + "  max " + FormatNumber(summary.max) +
              "  mean " + FormatNumber(summary.mean);
      if (summary.non_finite > 0) text += "  non-finite " + std::to_string(summary.non_finite);
      text += "\n  first:";
      for (double value : summary.first) text += " " + FormatNumber(value);
    } else {
      entry["bytes"] = output.raw.size();
      text += "  " + std::to_string(output.raw.size()) + " bytes";
    }
    text += "\n";
    outputs.push_back(std::move(entry));
  }

  if (infer.json) {
    std::cout << json{{"model_name", response.model_name()},
                      {"model_version", response.model_version()},
                      {"id", response.id()},
                      {"latency_ms", latency_ms},
                      {"outputs", outputs}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << "model: " << response.model_name() << " (version " << response.model_version()
              << ")\nid: " << response.id() << "\nlatency: " << std::fixed << std::setprecision(3)
              << latency_ms << " ms\n"
              << text;
  }
  return 0;
}

void AddConnectionFlags(CLI::App* command, ConnectionFlags* flags) {
  graphserve::AddAddressFlag(command, &flags->address);
  command->add_option("--timeout-ms", flags->timeout_ms, "Deadline of each RPC in ms; 0: none")
      ->check(graphserve::NonNegativeFlag())
      ->capture_default_str();
  command->add_flag("--tls", flags->security.tls, "Connect over TLS, trusting the system's CAs");
  command->add_option("--tls-ca-file", flags->security.tls_ca_file,
                      "PEM CA that signed the server's certificate (implies --tls)");
  command->add_option("--tls-cert-file", flags->security.tls_cert_file,
                      "PEM client certificate, for a server that requires mutual TLS");
  command->add_option("--tls-key-file", flags->security.tls_key_file, "PEM private key of --tls-cert-file");
  command->add_option("--auth-token-file", flags->security.token_file,
                      "File whose first line is the token to send (default: $GRAPHSERVE_AUTH_TOKEN)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"graphserve-cli: talk to a KServe v2 gRPC inference server"};
  app.require_subcommand(1);
  ConnectionFlags connection;

  CLI::App* health = app.add_subcommand(
      "health", "Print whether the server is live and ready; exit 0 only when both are true");
  AddConnectionFlags(health, &connection);
  double wait_s = 0;
  health->add_option("--wait-s", wait_s, "Wait up to this many seconds for readiness")
      ->check(graphserve::NonNegativeFlag());

  CLI::App* metadata =
      app.add_subcommand("metadata", "Print the server's metadata, or a model's with --model");
  AddConnectionFlags(metadata, &connection);
  std::string metadata_model;
  bool metadata_json = false;
  metadata->add_option("--model", metadata_model, "Model whose inputs and outputs to print");
  metadata->add_flag("--json", metadata_json, "Print JSON");

  CLI::App* config = app.add_subcommand(
      "config", "Print a model's effective configuration in config.pbtxt (text) format");
  AddConnectionFlags(config, &connection);
  std::string config_model;
  config->add_option("--model", config_model, "Model name")->required();

  CLI::App* infer = app.add_subcommand(
      "infer", "Send one request of generated token ids and summarise the outputs");
  AddConnectionFlags(infer, &connection);
  InferFlags infer_flags;
  infer->add_option("--model", infer_flags.model, "Model name")->required();
  CLI::Option* rows = infer->add_option("--rows", infer_flags.rows, "Batch size")
                          ->check(graphserve::PositiveFlag())
                          ->capture_default_str();
  CLI::Option* length = infer->add_option("--length", infer_flags.length, "Tokens per row")
                            ->check(graphserve::PositiveFlag())
                            ->capture_default_str();
  infer->add_option("--ids", infer_flags.ids, "One row of these token ids, e.g. 101,2023,102")
      ->delimiter(',')
      ->excludes(rows)
      ->excludes(length);
  infer->add_option("--seed", infer_flags.seed, "Seed of the random ids and floats")
      ->capture_default_str();
  infer->add_option("--contents", infer_flags.contents, "How inputs travel: raw bytes or typed")
      ->check(CLI::IsMember({"typed", "raw"}))
      ->capture_default_str();
  infer->add_option("--output", infer_flags.outputs, "Output to return (repeatable); default: all");
  infer->add_option("--id", infer_flags.request_id, "Request id, echoed by the server");
  infer->add_flag("--json", infer_flags.json, "Print JSON");

  CLI::App* plan = app.add_subcommand(
      "plan-grid",
      "Propose a bucket grid for a model from its traffic and bucket times (the server's /metrics)");
  AddConnectionFlags(plan, &connection);
  graphserve::PlanGridFlags plan_flags;
  plan->add_option("--model", plan_flags.model, "Model name")->required();
  plan->add_option("--metrics-url", plan_flags.metrics_url,
                   "The server's /metrics (default: http[s]://HOST:8002/metrics of --address, https with TLS)");
  plan->add_option("--device", plan_flags.device,
                   "Device whose bucket times to plan with (default: the only one, or the first CUDA one)");
  plan->add_option("--memory-budget-mib", plan_flags.memory_budget_mib,
                   "Graph memory the proposal may hold (default: today's, i.e. no larger largest bucket)")
      ->check(graphserve::NonNegativeFlag());
  plan->add_option("--max-lengths", plan_flags.max_lengths, "Most sequence lengths the proposal may have")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  plan->add_flag("--json", plan_flags.json, "Print JSON");

  // CLI11 answers a mistyped subcommand with "A subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* subcommand : app.get_subcommands({})) {
      known = known || subcommand->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + subcommand->get_name();
    }
    if (!known) {
      std::cerr << "unknown subcommand '" << argv[1] << "' (one of: " << names << ")\n";
      return kFailure;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // CLI11 prints the help or the usage error; every failure exits 1, as promised above.
    return app.exit(error) == 0 ? 0 : kFailure;
  }

  std::string error;
  if (!graphserve::LoadClientSecurity(connection.security, &connection.options, &error)) {
    std::cerr << error << "\n";
    return kFailure;
  }
  if (health->parsed()) return RunHealth(connection, wait_s);
  if (metadata->parsed()) return RunMetadata(connection, metadata_model, metadata_json);
  if (config->parsed()) return RunConfig(connection, config_model);
  if (plan->parsed()) {
    graphserve::ClientOptions options = connection.options;
    options.timeout_ms = connection.timeout_ms;
    return graphserve::RunPlanGrid(connection.address, options, plan_flags);
  }
  return RunInfer(connection, infer_flags);
}
