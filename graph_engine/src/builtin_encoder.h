#pragma once
// The built-in model of platform "graphserve_encoder": a small BERT-style transformer encoder whose
// weights are generated from a fixed seed, so that graphserve can be served, tested and benchmarked
// without a model file and every process computes the same outputs.
//
// Architecture: token embedding + learned position embedding, LayerNorm; kEncoderLayers post-LN
// blocks (multi-head self-attention with an additive key mask, then a GELU feed-forward, each
// followed by residual + LayerNorm, as in BERT); pooler = tanh(Linear(hidden state at position 0)).
// Not thread-safe: one executor owns an instance.
#include <torch/nn.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "model.h"

namespace graphserve {

inline constexpr int64_t kEncoderVocabSize = 1024;
inline constexpr int64_t kEncoderLayers = 4;
inline constexpr int64_t kEncoderHiddenSize = 256;
inline constexpr int64_t kEncoderHeads = 4;
inline constexpr int64_t kEncoderHeadSize = kEncoderHiddenSize / kEncoderHeads;
inline constexpr int64_t kEncoderFfnSize = 1024;
inline constexpr int64_t kEncoderMaxPositions = 512;
inline constexpr uint64_t kEncoderWeightSeed = 20240611;
// Standard deviation of the initial weights, as in BERT.
inline constexpr double kEncoderInitStd = 0.02;
// Added to the attention score of a masked key. exp() of it underflows to exactly 0 in fp32, fp16
// and bf16, so a masked key gets exactly zero weight, while staying finite in fp16 (a row whose
// keys are all masked, a padding row, then averages instead of producing NaN).
inline constexpr double kEncoderMaskedScore = -1e4;

// The names the encoder's spec must use.
inline constexpr const char* kEncoderInputIds = "input_ids";
inline constexpr const char* kEncoderAttentionMask = "attention_mask";
inline constexpr const char* kEncoderLastHiddenState = "last_hidden_state";
inline constexpr const char* kEncoderPoolerOutput = "pooler_output";

class EncoderLayerImpl : public torch::nn::Module {
 public:
  EncoderLayerImpl();
  // hidden: [B, L, H]; additive_mask: [B, 1, 1, L], 0 for real keys, kEncoderMaskedScore for
  // masked ones. Returns [B, L, H].
  at::Tensor forward(const at::Tensor& hidden, const at::Tensor& additive_mask);

 private:
  torch::nn::Linear qkv_{nullptr};
  torch::nn::Linear attention_output_{nullptr};
  torch::nn::LayerNorm attention_norm_{nullptr};
  torch::nn::Linear ffn_input_{nullptr};
  torch::nn::Linear ffn_output_{nullptr};
  torch::nn::LayerNorm ffn_norm_{nullptr};
};
TORCH_MODULE(EncoderLayer);

struct EncoderOutputs {
  at::Tensor last_hidden_state;  // [B, L, H]
  at::Tensor pooler_output;      // [B, H]
};

class BuiltinEncoderImpl : public torch::nn::Module {
 public:
  // Builds the network on the CPU in fp32 with the seeded weights (a generator of its own, so that
  // construction neither reads nor disturbs torch's global random state).
  BuiltinEncoderImpl();

  // input_ids, attention_mask: int64 [B, L] on the module's device, L <= kEncoderMaxPositions.
  // Outputs are in the module's dtype. Positions whose mask is 0 do not influence the outputs at
  // positions whose mask is not. No host syncs or data-dependent control flow: capturable.
  EncoderOutputs forward(const at::Tensor& input_ids, const at::Tensor& attention_mask);

 private:
  torch::nn::Embedding token_embeddings_{nullptr};
  torch::nn::Embedding position_embeddings_{nullptr};
  torch::nn::LayerNorm embedding_norm_{nullptr};
  std::vector<EncoderLayer> layers_;
  torch::nn::Linear pooler_{nullptr};
};
TORCH_MODULE(BuiltinEncoder);

// OK when `spec` describes the encoder: inputs input_ids and attention_mask (INT64, dims [-1],
// attention_mask padded with 0), outputs among last_hidden_state (FP32 [-1, 256]) and pooler_output
// (FP32 [256]), in any order, and max_sequence_length and bucket lengths <= 512. Otherwise
// INVALID_ARGUMENT naming the model and what differs.
Status ValidateEncoderSpec(const ModelSpec& spec);

// Validates `spec`, builds the encoder in spec.precision on `device` and wraps it as a Model that
// maps the spec's input and output order onto the encoder's.
Status CreateBuiltinEncoderModel(const ModelSpec& spec, const c10::Device& device,
                                 std::unique_ptr<Model>* model);

}  // namespace graphserve
