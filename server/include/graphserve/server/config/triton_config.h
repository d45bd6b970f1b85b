#pragma once
// Triton's model configuration as graphserve serves it: a config.pbtxt written for Triton resolved
// into the settings graphserve acts on, where a model's instances go, and the effective config that
// the ModelConfig RPC answers. docs/configuration.md ("Triton model configurations") has the
// field-by-field table. Stateless functions; thread-safe.
#include <string>
#include <vector>

#include "graphserve/engine/model_spec.h"
#include "graphserve/engine/status.h"
#include "graphserve/server/batching/scheduler_options.h"
#include "graphserve/server/config/config.h"
#include "model_config.pb.h"

namespace graphserve {

// The length limit of a variable-length model whose config gives none, nor any bucket length.
inline constexpr int64_t kDefaultMaxSequenceLength = 512;

// graphserve's settings as `parameters` keys, so that a config Triton must load too can carry them
// (Triton passes parameters to its backend, which ignores keys it does not know).
inline constexpr const char* kParameterMaxSequenceLength = "max_sequence_length";  // "256"
inline constexpr const char* kParameterBucketBatchSizes = "bucket_batch_sizes";    // "1,2,4,8"
inline constexpr const char* kParameterBucketSequenceLengths = "bucket_sequence_lengths";
inline constexpr const char* kParameterMaxBatchTokens = "max_batch_tokens";  // "16384"
inline constexpr const char* kParameterPrecision = "precision";             // fp32, fp16, bf16
inline constexpr const char* kParameterBatchingPolicy = "batching_policy";  // size_binned, fifo
inline constexpr const char* kParameterSequenceMaskInput = "sequence_mask_input";  // "attention_mask"
inline constexpr const char* kParameterBatchingDisabled = "batching_disabled";      // "true", "false"
inline constexpr const char* kParameterCudaGraphVerifyRtol = "cuda_graph_verify_rtol";  // "0.01"
// Per input: the prefix, then the input's name ("pad_value:input_ids" = "0").
inline constexpr const char* kParameterPadValue = "pad_value:";
inline constexpr const char* kParameterMinValue = "min_value:";
inline constexpr const char* kParameterMaxValue = "max_value:";

// Rewrites `config` in place into the fields ModelSpecFromConfig, SchedulerOptionsFromConfig and
// InstancePlacements read:
//   - platform, when only backend "pytorch" is given, from the model file in `model_dir` (the
//     version folder where there is one): default_model_filename when set, else model.pt2
//     (torch_aoti), else model.pt (pytorch_libtorch);
//   - graphserve's parameters keys (above) into their fields;
//   - optimization.cuda.graphs: false into cuda_graphs.disable; graph_spec (every point of a grid
//     of batch sizes × lengths, ModelSpec's staircase where buckets.max_batch_tokens is set) into
//     buckets;
//   - dynamic_batching.preferred_batch_size into buckets.batch_sizes when nothing else gives them;
//     default_queue_policy.max_queue_size into max_queue_size;
//   - a variable-length model without max_sequence_length gets its largest bucket length, else
//     kDefaultMaxSequenceLength, with a warning.
// A setting that would change answers if ignored (reshape, is_shape_tensor, allow_ragged_batch,
// optional, max_batch_size 0, KIND_MODEL, more than one version, sequence_batching, batch_input,
// batch_output), and settings that contradict each other, are INVALID_ARGUMENT naming the field.
// A field graphserve does not act on is a warning naming it, logged and appended to `warnings`
// (may be null). `model_dir` may be empty when the platform is given. Resolving again changes
// nothing.
Status ResolveModelConfig(const std::string& model_dir, inference::ModelConfig* config,
                          ConfigWarnings* warnings);

// Where one instance group's instances go: `count` of them on each of `devices`.
struct InstancePlacement {
  std::string name;  // the group's name; may be empty
  int count = 1;
  std::vector<std::string> devices;  // "cpu", "cuda:N", or the default device as given
};

// One placement per instance_group, or one instance on `default_device` when there is none. A
// group's devices: `devices` when listed, else by kind: KIND_GPU on cuda:G for each G of gpus
// (cuda:0 when none), KIND_CPU on cpu, KIND_AUTO on `default_device` (on its gpus when it lists
// some, as in Triton). INVALID_ARGUMENT naming the group for KIND_MODEL, a negative count or GPU,
// gpus on KIND_CPU, or devices given together with a kind or gpus.
Status InstancePlacements(const inference::ModelConfig& config, const std::string& default_device,
                          std::vector<InstancePlacement>* placements);

// A loaded model, as the ModelConfig RPC describes it.
struct ServedModel {
  inference::ModelConfig config;  // resolved
  ModelSpec spec;
  SchedulerOptions scheduler;
  std::vector<InstancePlacement> placements;  // devices resolved: "cpu", "cuda:N"
  // The grid points that replay as a CUDA graph on every instance.
  std::vector<BucketShape> graph_buckets;
};

// The config graphserve serves the model with, in Triton's schema alone, so that Triton's clients
// parse it strictly: Triton's fields with defaults filled in, preferred_batch_size = the grid's batch
// sizes up to max_batch_size (Triton's bound), one instance group per kind, one
// optimization.cuda.graph_spec per graph bucket (each input's -1 replaced by the bucket's length),
// and graphserve's own settings as the `parameters` keys above (bucket_batch_sizes lists every batch
// size, with max_batch_tokens), never in graphserve's own fields. Read back as a config.pbtxt, it
// resolves to the same model.
inference::ModelConfig EffectiveModelConfig(const ServedModel& model);

}  // namespace graphserve
