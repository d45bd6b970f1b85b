#include "fuzz_support.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "graphserve/server/config/config.h"
#include "graphserve/server/config/triton_config.h"
#include "graphserve/server/grpc/request_codec.h"

namespace graphserve::fuzz {
namespace {

// The token model of a BERT export with INT32 ids (as ONNX-era exports have them) and a
// half-precision answer: other element sizes than the built-in encoder's on both sides.
constexpr const char* kBert32Config = R"pb(
  name: "bert32"
  platform: "torch_aoti"
  max_batch_size: 16
  max_sequence_length: 128
  input { name: "input_ids" data_type: TYPE_INT32 dims: [ -1 ] }
  input { name: "attention_mask" data_type: TYPE_INT32 dims: [ -1 ] }
  input { name: "token_type_ids" data_type: TYPE_INT32 dims: [ -1 ] }
  output { name: "last_hidden_state" data_type: TYPE_FP16 dims: [ -1, 8 ] }
  output { name: "pooler_output" data_type: TYPE_FP16 dims: [ 8 ] }
  dynamic_batching {
    default_queue_policy { default_timeout_microseconds: 100000 allow_timeout_override: true }
  }
)pb";

// Fixed-shape, and small enough that a whole valid request fits in a fuzz input.
constexpr const char* kTabularConfig = R"pb(
  name: "tabular"
  platform: "pytorch_libtorch"
  max_batch_size: 4
  input { name: "features" data_type: TYPE_FP32 dims: [ 2, 3 ] }
  input { name: "flags" data_type: TYPE_BOOL dims: [ 3 ] }
  output { name: "score" data_type: TYPE_FP32 dims: [ 1 ] }
  dynamic_batching { default_queue_policy { allow_timeout_override: true } }
)pb";

FuzzModel LoadModel(inference::ModelConfig config) {
  ModelSpec spec;
  Status status = ResolveModelConfig("", &config, nullptr);
  if (status.ok()) status = ModelSpecFromConfig(config, &spec);
  Check(status.ok(), "status.ok()", "a fuzz model's config: " + status.message(), __FILE__, __LINE__);
  return FuzzModel{spec, SchedulerOptionsFromConfig(config).queue_policy};
}

FuzzModel LoadModel(const char* text) {
  inference::ModelConfig config;
  const Status status = ParseModelConfig(text, "fuzz model", &config);
  Check(status.ok(), "status.ok()", "a fuzz model's config: " + status.message(), __FILE__, __LINE__);
  return LoadModel(config);
}

// What DecodeInferRequest promises of an accepted request (request_codec.h, executor.h).
void CheckItem(const ModelSpec& spec, const QueuePolicy& queue_policy, const PendingRequest& pending) {
  const InferenceItem& item = pending.item;
  FUZZ_CHECK(item.rows >= 1 && item.rows <= spec.max_batch_size, "rows within max_batch_size");
  if (spec.has_sequence_length()) {
    FUZZ_CHECK(item.length >= 1 && item.length <= spec.max_sequence_length,
               "length within max_sequence_length");
  } else {
    FUZZ_CHECK(item.length == kFixedShapeLength, "a fixed-shape model's length");
  }
  FUZZ_CHECK(item.inputs.size() == spec.inputs.size(), "one tensor per input");
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const HostTensor& tensor = item.inputs[i];
    FUZZ_CHECK(tensor.dtype == spec.inputs[i].dtype, "input dtype");
    FUZZ_CHECK(tensor.shape == PaddedShape(spec.inputs[i], BucketShape{item.rows, item.length}),
               "input '" + spec.inputs[i].name + "' shaped [rows, dims...] with the item's length");
    FUZZ_CHECK(tensor.bytes.size() == size_t(tensor.element_count()) * ElementSize(tensor.dtype),
               "input '" + spec.inputs[i].name + "' bytes agree with its shape");
  }
  FUZZ_CHECK(item.outputs_wanted.size() == spec.outputs.size(), "one flag per output");
  FUZZ_CHECK(std::count(item.outputs_wanted.begin(), item.outputs_wanted.end(), true) > 0,
             "some output wanted");
  FUZZ_CHECK(pending.timeout_override_us >= 0, "timeout override not negative");
  // Whatever a request asks, the queue policy only ever shortens the default wait.
  const int64_t queue_timeout_us = queue_policy.TimeoutFor(pending.timeout_override_us);
  FUZZ_CHECK(queue_policy.default_timeout_us == 0 || (queue_timeout_us > 0 &&
                                                      queue_timeout_us <= queue_policy.default_timeout_us),
             "queue timeout only shortens");
}

// The REST answer's framing: a JSON header, then exactly the binary outputs it declares.
void CheckRestAnswer(const inference::ModelInferResponse& response, const RestOutputFormat& format) {
  const RestInferBody answer = EncodeRestInferResponse(response, format);
  const size_t header_size = answer.json_length.value_or(answer.body.size());
  FUZZ_CHECK(header_size <= answer.body.size(), "Inference-Header-Content-Length within the body");
  const auto header = nlohmann::json::parse(answer.body.substr(0, header_size), nullptr, false);
  FUZZ_CHECK(header.is_object(), "the REST answer's header is a JSON object");
  size_t binary = 0;
  for (const auto& output : header.at("outputs")) {
    if (output.contains("parameters")) binary += output["parameters"].at("binary_data_size").get<size_t>();
  }
  FUZZ_CHECK(header_size + binary == answer.body.size(), "binary_data_size adds up to the body");
}

}  // namespace

void Check(bool condition, const char* expression, const std::string& what, const char* file, int line) {
  if (condition) return;
  std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", file, line, expression, what.c_str());
  std::abort();
}

void SilenceLogs() { spdlog::set_level(spdlog::level::off); }

const std::vector<FuzzModel>& Models() {
  static const std::vector<FuzzModel> models = {
      LoadModel(BuiltinEncoderConfig()), LoadModel(kBert32Config), LoadModel(kTabularConfig)};
  return models;
}

const FuzzModel& ModelFor(const std::string& name) {
  const std::vector<FuzzModel>& models = Models();
  for (const FuzzModel& model : models) {
    if (model.spec.name == name) return model;
  }
  return models[name.size() % models.size()];
}

bool DecodeAndAnswer(const FuzzModel& model, const RestOutputFormat& format,
                     inference::ModelInferRequest* request) {
  PendingRequest pending;
  const Status status = DecodeInferRequest(model.spec, request, &pending);
  if (!status.ok()) {
    FUZZ_CHECK(status.code() == StatusCode::kInvalidArgument, "a refusal is INVALID_ARGUMENT");
    return false;
  }
  CheckItem(model.spec, model.queue_policy, pending);

  // The engine's answer: a tensor per output, empty where not wanted (PendingRequest::done).
  const ModelSpec& spec = model.spec;
  std::vector<HostTensor> outputs(spec.outputs.size());
  size_t wanted = 0;
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    outputs[i].dtype = spec.outputs[i].dtype;
    if (!pending.item.outputs_wanted[i]) continue;
    ++wanted;
    outputs[i].shape = PaddedShape(spec.outputs[i], BucketShape{pending.item.rows, pending.item.length});
    outputs[i].bytes.assign(size_t(outputs[i].element_count()) * ElementSize(outputs[i].dtype), '\0');
  }
  inference::ModelInferResponse response;
  EncodeInferResponse(spec, "1", *request, std::move(outputs), &response);
  FUZZ_CHECK(size_t(response.outputs_size()) == wanted, "each wanted output answered once");
  FUZZ_CHECK(response.raw_output_contents_size() == response.outputs_size(), "one raw content per output");
  CheckRestAnswer(response, format);
  return true;
}

}  // namespace graphserve::fuzz
