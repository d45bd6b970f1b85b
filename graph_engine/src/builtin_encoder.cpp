#include "builtin_encoder.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <exception>
#include <set>
#include <string>
#include <utility>

#include "engine_log.h"
#include "torch_errors.h"

namespace graphserve {
namespace {

torch::nn::LayerNorm MakeLayerNorm() {
  // BERT's epsilon.
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({kEncoderHiddenSize}).eps(1e-12));
}

std::string DimsAndType(DataType dtype, const std::vector<int64_t>& dims) {
  return std::string(DataTypeName(dtype)) + " " + ShapeToString(dims);
}

Status CheckTensor(const std::string& model, const char* role, const TensorSpec& tensor,
                   DataType expected_dtype, const std::vector<int64_t>& expected_dims) {
  if (tensor.dtype != expected_dtype || tensor.dims != expected_dims) {
    return InvalidArgument("model '" + model + "': the built-in encoder's " + role + " '" +
                           tensor.name + "' must be " + DimsAndType(expected_dtype, expected_dims) +
                           ", the config has " + DimsAndType(tensor.dtype, tensor.dims));
  }
  return Status::Ok();
}

// Maps the spec's input and output order onto the encoder's arguments and results.
class BuiltinEncoderModel : public Model {
 public:
  BuiltinEncoderModel(BuiltinEncoder encoder, size_t input_ids_index, size_t attention_mask_index,
                      std::vector<bool> output_is_pooler)
      : encoder_(std::move(encoder)),
        input_ids_index_(input_ids_index),
        attention_mask_index_(attention_mask_index),
        output_is_pooler_(std::move(output_is_pooler)) {}

  Status Forward(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>* outputs) override {
    EncoderOutputs results =
        encoder_->forward(inputs.at(input_ids_index_), inputs.at(attention_mask_index_));
    outputs->clear();
    for (bool is_pooler : output_is_pooler_) {
      outputs->push_back(is_pooler ? results.pooler_output : results.last_hidden_state);
    }
    return Status::Ok();
  }

 private:
  BuiltinEncoder encoder_;
  const size_t input_ids_index_;
  const size_t attention_mask_index_;
  // Per spec output: true for pooler_output, false for last_hidden_state.
  const std::vector<bool> output_is_pooler_;
};

}  // namespace

EncoderLayerImpl::EncoderLayerImpl()
    : qkv_(register_module("qkv", torch::nn::Linear(kEncoderHiddenSize, 3 * kEncoderHiddenSize))),
      attention_output_(register_module("attention_output",
                                        torch::nn::Linear(kEncoderHiddenSize, kEncoderHiddenSize))),
      attention_norm_(register_module("attention_norm", MakeLayerNorm())),
      ffn_input_(
          register_module("ffn_input", torch::nn::Linear(kEncoderHiddenSize, kEncoderFfnSize))),
      ffn_output_(
          register_module("ffn_output", torch::nn::Linear(kEncoderFfnSize, kEncoderHiddenSize))),
      ffn_norm_(register_module("ffn_norm", MakeLayerNorm())) {}

at::Tensor EncoderLayerImpl::forward(const at::Tensor& hidden, const at::Tensor& additive_mask) {
  const int64_t batch = hidden.size(0);
  const int64_t length = hidden.size(1);
  // [B, L, 3H] -> [3, B, heads, L, head size]
  const at::Tensor qkv = qkv_->forward(hidden)
                             .view({batch, length, 3, kEncoderHeads, kEncoderHeadSize})
                             .permute({2, 0, 3, 1, 4});
  const at::Tensor query = qkv[0];
  const at::Tensor key = qkv[1];
  const at::Tensor value = qkv[2];
  const double scale = 1.0 / std::sqrt(static_cast<double>(kEncoderHeadSize));
  const at::Tensor scores = at::matmul(query, key.transpose(-2, -1)) * scale + additive_mask;
  const at::Tensor context = at::matmul(at::softmax(scores, -1), value)
                                 .transpose(1, 2)
                                 .reshape({batch, length, kEncoderHiddenSize});
  const at::Tensor attended =
      attention_norm_->forward(hidden + attention_output_->forward(context));
  const at::Tensor ffn = ffn_output_->forward(at::gelu(ffn_input_->forward(attended)));
  return ffn_norm_->forward(attended + ffn);
}

BuiltinEncoderImpl::BuiltinEncoderImpl()
    : token_embeddings_(register_module(
          "token_embeddings", torch::nn::Embedding(kEncoderVocabSize, kEncoderHiddenSize))),
      position_embeddings_(register_module(
          "position_embeddings", torch::nn::Embedding(kEncoderMaxPositions, kEncoderHiddenSize))),
      embedding_norm_(register_module("embedding_norm", MakeLayerNorm())) {
  for (int64_t i = 0; i < kEncoderLayers; ++i) {
    layers_.push_back(register_module("layer" + std::to_string(i), EncoderLayer()));
  }
  pooler_ = register_module("pooler", torch::nn::Linear(kEncoderHiddenSize, kEncoderHiddenSize));

  // The modules' constructors drew their initial values from torch's global generator, which other
  // threads may use concurrently; overwrite every parameter from a private, seeded one, visiting
  // modules in registration order so that the draws are the same in every process.
  at::Generator generator = at::detail::createCPUGenerator(kEncoderWeightSeed);
  torch::NoGradGuard no_grad;
  for (const std::shared_ptr<torch::nn::Module>& module : modules(/*include_self=*/false)) {
    if (auto* linear = module->as<torch::nn::Linear>()) {
      linear->weight.normal_(0.0, kEncoderInitStd, generator);
      linear->bias.zero_();
    } else if (auto* embedding = module->as<torch::nn::Embedding>()) {
      embedding->weight.normal_(0.0, kEncoderInitStd, generator);
    } else if (auto* norm = module->as<torch::nn::LayerNorm>()) {
      norm->weight.fill_(1.0);
      norm->bias.zero_();
    }
  }
  for (at::Tensor& parameter : parameters()) parameter.requires_grad_(false);
}

EncoderOutputs BuiltinEncoderImpl::forward(const at::Tensor& input_ids,
                                           const at::Tensor& attention_mask) {
  const int64_t batch = input_ids.size(0);
  const int64_t length = input_ids.size(1);
  const at::Tensor& embedding_weight = token_embeddings_->weight;
  // The server does not check token ids against the vocabulary. An id out of range would make the
  // embedding lookup throw on a CPU and, on CUDA, trip a device-side assert that leaves the whole
  // CUDA context unusable; clamping keeps one bad request from taking down every model on the GPU
  // and costs no host sync.
  const at::Tensor token_ids = input_ids.clamp(0, kEncoderVocabSize - 1);
  // Positions 0..L-1 are the first L rows of the table: a view, with no index tensor to allocate.
  const at::Tensor positions = position_embeddings_->weight.narrow(0, 0, length);
  at::Tensor hidden = embedding_norm_->forward(token_embeddings_->forward(token_ids) + positions);

  const at::Tensor additive_mask = (attention_mask == 0)
                                       .to(embedding_weight.scalar_type())
                                       .mul(kEncoderMaskedScore)
                                       .view({batch, 1, 1, length});
  for (EncoderLayer& layer : layers_) hidden = layer->forward(hidden, additive_mask);

  EncoderOutputs outputs;
  outputs.pooler_output = at::tanh(pooler_->forward(hidden.select(1, 0)));
  outputs.last_hidden_state = std::move(hidden);
  return outputs;
}

Status ValidateEncoderSpec(const ModelSpec& spec) {
  const std::string prefix = "model '" + spec.name + "': ";
  if (spec.inputs.size() != 2) {
    return InvalidArgument(prefix +
                           "the built-in encoder takes 2 inputs (input_ids, attention_mask), "
                           "the config declares " +
                           std::to_string(spec.inputs.size()));
  }
  std::set<std::string> input_names;
  for (const TensorSpec& input : spec.inputs) {
    if (input.name != kEncoderInputIds && input.name != kEncoderAttentionMask) {
      return InvalidArgument(prefix + "the built-in encoder has no input '" + input.name +
                             "' (its inputs are input_ids and attention_mask)");
    }
    if (!input_names.insert(input.name).second) {
      return InvalidArgument(prefix + "input '" + input.name + "' is declared twice");
    }
    Status status = CheckTensor(spec.name, "input", input, DataType::kInt64, {-1});
    if (!status.ok()) return status;
    if (input.name == kEncoderAttentionMask && input.pad_value != 0.0) {
      return InvalidArgument(prefix +
                             "attention_mask must be padded with 0 so that padding is "
                             "masked out, the config pads with " +
                             std::to_string(input.pad_value));
    }
  }
  if (spec.outputs.empty()) {
    return InvalidArgument(prefix +
                           "the config declares no outputs (the built-in encoder has "
                           "last_hidden_state and pooler_output)");
  }
  std::set<std::string> output_names;
  for (const TensorSpec& output : spec.outputs) {
    Status status;
    if (output.name == kEncoderLastHiddenState) {
      status = CheckTensor(spec.name, "output", output, DataType::kFp32, {-1, kEncoderHiddenSize});
    } else if (output.name == kEncoderPoolerOutput) {
      status = CheckTensor(spec.name, "output", output, DataType::kFp32, {kEncoderHiddenSize});
    } else {
      return InvalidArgument(prefix + "the built-in encoder has no output '" + output.name +
                             "' (its outputs are last_hidden_state and pooler_output)");
    }
    if (!status.ok()) return status;
    if (!output_names.insert(output.name).second) {
      return InvalidArgument(prefix + "output '" + output.name + "' is declared twice");
    }
  }
  if (spec.max_sequence_length < 1 || spec.max_sequence_length > kEncoderMaxPositions) {
    return InvalidArgument(
        prefix + "max_sequence_length " + std::to_string(spec.max_sequence_length) +
        " is outside the built-in encoder's 1.." + std::to_string(kEncoderMaxPositions));
  }
  for (int64_t length : spec.bucket_lengths) {
    if (length > kEncoderMaxPositions) {
      return InvalidArgument(prefix + "bucket length " + std::to_string(length) +
                             " exceeds the built-in encoder's " +
                             std::to_string(kEncoderMaxPositions) + " positions");
    }
  }
  return Status::Ok();
}

Status CreateBuiltinEncoderModel(const ModelSpec& spec, const c10::Device& device,
                                 std::unique_ptr<Model>* model) {
  Status status = ValidateEncoderSpec(spec);
  if (!status.ok()) return status;
  const size_t input_ids_index = spec.inputs[0].name == kEncoderInputIds ? 0 : 1;
  std::vector<bool> output_is_pooler;
  for (const TensorSpec& output : spec.outputs) {
    output_is_pooler.push_back(output.name == kEncoderPoolerOutput);
  }
  try {
    BuiltinEncoder encoder;
    encoder->to(device, PrecisionScalarType(spec.precision));
    encoder->eval();
    *model = std::make_unique<BuiltinEncoderModel>(
        std::move(encoder), input_ids_index, 1 - input_ids_index, std::move(output_is_pooler));
  } catch (const std::exception& error) {
    return Internal("model '" + spec.name + "': building the built-in encoder on " + device.str() +
                    " failed: " + ExceptionMessage(error));
  }
  EngineLog(LogLevel::kInfo, "model '" + spec.name + "': built-in encoder (" +
                                 std::to_string(kEncoderLayers) + " layers, hidden " +
                                 std::to_string(kEncoderHiddenSize) + ", " +
                                 PrecisionName(spec.precision) + ") on " + device.str());
  return Status::Ok();
}

}  // namespace graphserve
