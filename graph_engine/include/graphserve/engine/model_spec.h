#pragma once
// What a model looks like to the engine: its tensors, limits and bucket grid. The server builds a
// ModelSpec from config.pbtxt (server/config) and hands it to CreateExecutor. Value type.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graphserve/engine/status.h"
#include "graphserve/engine/tensor.h"

namespace graphserve {

// Platform names as they appear in config.pbtxt and in model metadata.
inline constexpr const char* kPlatformTorchScript = "pytorch_libtorch";  // model.pt
inline constexpr const char* kPlatformAotInductor = "torch_aoti";         // model.pt2
inline constexpr const char* kPlatformBuiltinEncoder = "graphserve_encoder";

// The model file a platform loads from its model's folder unless the config names another
// (default_model_filename); Triton's PyTorch backend uses the same names.
inline constexpr const char* kTorchScriptFileName = "model.pt";
inline constexpr const char* kAotInductorFileName = "model.pt2";

struct TensorSpec {
  std::string name;
  DataType dtype = DataType::kFp32;
  // One row's shape (no batch dimension). -1 marks the variable dimension: for inputs the request's
  // sequence length, for outputs "the same length as the inputs".
  std::vector<int64_t> dims;
  // Inputs only: the value that padding writes.
  double pad_value = 0.0;

  // Index into `dims` of the -1 entry, or -1 when the tensor has no variable dimension.
  int variable_dim() const;
};

enum class Precision { kFp32, kFp16, kBf16 };
const char* PrecisionName(Precision precision);

// A (batch rows × sequence length) shape that batches are padded to.
struct BucketShape {
  int64_t batch = 0;
  int64_t length = 0;

  bool operator==(const BucketShape& other) const {
    return batch == other.batch && length == other.length;
  }
  bool operator<(const BucketShape& other) const {
    return batch != other.batch ? batch < other.batch : length < other.length;
  }
  // "8x128"; a fixed-shape model's buckets read "8x-" (ModelSpec::BucketLabel).
  std::string ToString() const;
};

// The one length of every request and bucket of a fixed-shape model (one whose inputs have no -1
// dimension, e.g. an image classifier on [3, 224, 224]): its grid collapses to batch sizes only,
// while the batcher, padding and accounting still work on (rows x length) with length 1.
inline constexpr int64_t kFixedShapeLength = 1;

// "8x128", or "8x-" when the model has no variable dimension: the bucket's name in metrics labels,
// logs and tool reports.
std::string BucketLabel(const BucketShape& shape, bool has_sequence_length);

// The inclusive range of values an input may carry, checked by the server before batching; an unset
// end: unbounded on that side.
struct ValueRange {
  std::optional<double> min;
  std::optional<double> max;
};

struct ModelSpec {
  std::string name;
  std::string platform;  // kPlatformAotInductor, kPlatformTorchScript or kPlatformBuiltinEncoder
  int64_t max_batch_size = 1;
  int64_t max_sequence_length = 1;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  // Ascending, deduplicated, capped by max_batch_size / max_sequence_length, and ending at them.
  // A fixed-shape model has max_sequence_length and bucket_lengths {kFixedShapeLength}.
  std::vector<int64_t> bucket_batch_sizes;
  std::vector<int64_t> bucket_lengths;
  Precision precision = Precision::kFp32;
  bool cuda_graphs_disabled = false;
  double verify_rtol = 0.0;  // 0: the precision's default
  // One per input, in input order, or empty when no input is bounded.
  std::vector<ValueRange> input_ranges;

  // The smallest bucket that holds `rows` × `length`, or {rows, length} itself (an oversize batch)
  // when none does.
  BucketShape BucketFor(int64_t rows, int64_t length) const;
  bool IsOversize(int64_t rows, int64_t length) const;
  // Whether some input has a -1 dimension; false for a fixed-shape model.
  bool has_sequence_length() const;
  // graphserve::BucketLabel for this model.
  std::string BucketLabel(const BucketShape& shape) const;
};

// The grid used when config.pbtxt names none: dense at small sizes and sparse at large ones,
// capped by (and always including) the model's limits.
// Index of the smallest entry of the ascending `grid` that is >= value; grid.size() when none is (an
// oversize value). The one bucket lookup of the engine, the batcher and the tools.
size_t SmallestAtLeast(const std::vector<int64_t>& grid, int64_t value);

// [shape.batch, tensor.dims...] with the variable dimension replaced by shape.length: the shape of a
// tensor padded to a bucket.
std::vector<int64_t> PaddedShape(const TensorSpec& tensor, const BucketShape& shape);

// A tensor's dims as graphserve serves them: each >= 1, or -1 for its one variable dimension.
// INVALID_ARGUMENT naming the tensor otherwise (the config loader and the engine both check this).
Status CheckTensorDims(const std::string& tensor, const std::vector<int64_t>& dims);

// What every platform needs of a spec (inputs and outputs declared with valid dims, positive bucket
// sizes, a fixed-shape model's lengths all kFixedShapeLength and no -1 in its outputs);
// INVALID_ARGUMENT naming the model otherwise. The platform checks the rest.
Status CheckModelSpec(const ModelSpec& spec);

std::vector<int64_t> DefaultBucketBatchSizes(int64_t max_batch_size);
std::vector<int64_t> DefaultBucketLengths(int64_t max_sequence_length);

}  // namespace graphserve
