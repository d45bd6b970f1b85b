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

// The tensors a ragged model gets besides its inputs, made by the batcher from the rows' lengths
// (config.pbtxt's batch_input kinds of Triton; the others are refused at load). Each row of a
// ragged batch is one row of a request: a request of shape [r, L] is r rows of L tokens.
enum class BatchInputKind {
  kNone,                             // not a batch input
  kElementCount,                     // BATCH_ELEMENT_COUNT: [R], each row's tokens
  kAccumulatedElementCount,          // BATCH_ACCUMULATED_ELEMENT_COUNT: [R], their running sum
  kAccumulatedElementCountWithZero,  // BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO: [R + 1], 0 first
};

struct TensorSpec {
  std::string name;
  DataType dtype = DataType::kFp32;
  // One row's shape (no batch dimension). -1 marks the variable dimension: for inputs the request's
  // sequence length, for outputs "the same length as the inputs".
  std::vector<int64_t> dims;
  // Inputs only: the value that padding writes.
  double pad_value = 0.0;
  // A ragged model's input with allow_ragged_batch, or its output scattered back by
  // BATCH_SCATTER_WITH_INPUT_SHAPE: its -1 is the first dim, and the model sees every row's tokens
  // end to end, [bucket tokens, dims after the -1...] (PaddedShape).
  bool ragged = false;
  // A batch input (ModelSpec::batch_inputs): made by the batcher, never sent by a client.
  BatchInputKind batch_input_kind = BatchInputKind::kNone;

  // Index into `dims` of the -1 entry, or -1 when the tensor has no variable dimension.
  int variable_dim() const;
};

enum class Precision { kFp32, kFp16, kBf16 };
const char* PrecisionName(Precision precision);

// A (batch rows × sequence length) shape that batches are padded to. For a ragged model
// (ModelSpec::ragged) `batch` is the rows and `length` the total tokens of the bucket: its requests'
// rows end to end, the tail tokens one filler row, the rest of the rows empty.
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
  // The grid's axes: ascending, deduplicated, capped by max_sequence_length and (but for sizes
  // that only max_batch_tokens admits) by max_batch_size. A fixed-shape model has
  // max_sequence_length and bucket_lengths {kFixedShapeLength}.
  std::vector<int64_t> bucket_batch_sizes;
  std::vector<int64_t> bucket_lengths;
  // The token budget of a batch beyond max_batch_size rows; 0: none. With a budget the grid's
  // points (its buckets) are the (b, L) of the axes with b <= max_batch_size or b × L <=
  // max_batch_tokens (IsGridPoint): a staircase, as many rows at every length as a request may
  // carry, and more for short lengths, so a formed batch may hold more rows than a request.
  // Without one every (b, L) of the axes is a point (the config loader keeps b <= max_batch_size).
  int64_t max_batch_tokens = 0;
  // The input that tells the model which positions of the variable dimension are real (a 0/1
  // mask, padded with 0; config: sequence_mask_input). Only then may a batch pad that dimension:
  // a model that does not mask computes padded positions into its answers (a mean over the
  // length, a softmax). Empty: every batch holds requests of one length and runs at that length
  // exactly; only its rows are padded (rows never meet). See masks_padding().
  std::string sequence_mask_input;
  Precision precision = Precision::kFp32;
  bool cuda_graphs_disabled = false;
  double verify_rtol = 0.0;  // 0: the precision's default
  // One per input, in input order, or empty when no input is bounded.
  std::vector<ValueRange> input_ranges;
  // Triton's ragged batching: every input is ragged (TensorSpec::ragged), requests of any lengths
  // share a batch with no padding between them, and the buckets are (rows, total tokens):
  // bucket_batch_sizes are the rows, bucket_lengths the token sizes (up to max_batch_tokens, the
  // token budget of a batch), every pair of them a point. max_sequence_length still bounds one row,
  // max_batch_size a batch's real rows; the largest row size is RaggedLargestRows(max_batch_size).
  bool ragged = false;
  // The model's arguments after its inputs, in config order (ragged models only).
  std::vector<TensorSpec> batch_inputs;

  // Whether a batch may pad the variable dimension: the model names its mask input, it has no
  // variable dimension (its one length is never padded), or it is ragged (nothing is padded
  // inside a row).
  bool masks_padding() const { return ragged || !sequence_mask_input.empty() || !has_sequence_length(); }
  // The model's positional arguments: its inputs, then its batch inputs.
  std::vector<TensorSpec> arguments() const;
  // What a request of `rows` × `length` adds to a batch along BucketShape::length: its length, or
  // for a ragged model its tokens (rows × length).
  int64_t ItemExtent(int64_t rows, int64_t length) const { return ragged ? rows * length : length; }
  // The elements a batch of `shape` computes: batch × length, or a ragged bucket's tokens.
  int64_t BucketElements(const BucketShape& shape) const {
    return ragged ? shape.length : shape.batch * shape.length;
  }
  // The smallest bucket that holds `rows` × `length`: the smallest bucket length >= length (for a
  // model that does not mask padding, `length` itself, when it is a bucket length), and at it the
  // smallest batch size >= rows among those that are points there; {rows, length} itself (an
  // off-grid batch, run eagerly) when none does. Ragged: `length` is the total tokens, and a
  // bucket with more tokens than that needs a spare row for the filler (RaggedRowsNeeded); more
  // than max_batch_size real rows is off the grid.
  BucketShape BucketFor(int64_t rows, int64_t length) const;
  // Whether no bucket holds `rows` × `length` (BucketFor's off-grid case): longer or wider than the
  // grid, or, for a model that does not mask padding, a length that is no bucket length.
  bool IsOversize(int64_t rows, int64_t length) const;
  // Whether `length` is off the grid only because the model does not mask padding: a shorter
  // bucket length would hold it if padding were safe.
  bool IsUnpaddableLength(int64_t length) const;
  // Whether `shape` is a point of the grid.
  bool HasBucket(const BucketShape& shape) const;
  // The largest batch size at the bucket length a batch of `length` pads to (the smallest >= it);
  // 0 when the length is beyond the grid or no size is a point there.
  int64_t LargestBatchFor(int64_t length) const;
  // Every point of the grid, batch-major: each batch size's lengths in ascending order.
  std::vector<BucketShape> Buckets() const;
  // The point with the most batch × length (the larger batch on a tie); {0, 0} for an empty grid.
  BucketShape LargestBucket() const;
  // Whether some input has a -1 dimension; false for a fixed-shape model.
  bool has_sequence_length() const;
  // graphserve::BucketLabel for this model.
  std::string BucketLabel(const BucketShape& shape) const;
};

// Index of the smallest entry of the ascending `grid` that is >= value; grid.size() when none is (an
// oversize value). The one bucket lookup of the engine, the batcher and the tools.
size_t SmallestAtLeast(const std::vector<int64_t>& grid, int64_t value);

// Rows a ragged bucket of `bucket_tokens` needs for `rows` real rows of `tokens` tokens: one more
// for the filler row when the tokens do not fill it. The filler is a row of its own, never a real
// row's tail, so that no padded token is attended to by a real one.
inline int64_t RaggedRowsNeeded(int64_t rows, int64_t tokens, int64_t bucket_tokens) {
  return tokens < bucket_tokens ? rows + 1 : rows;
}

// The rows of a ragged model's largest bucket, the last of its row sizes: a batch holds at most
// max_batch_size real rows, and one spare row is kept for their tail's filler, so that a full
// batch (a lone request of max_batch_size rows included) has a bucket whatever its tokens.
inline int64_t RaggedLargestRows(int64_t max_batch_size) { return max_batch_size + 1; }

// [shape.batch, tensor.dims...] with the variable dimension replaced by shape.length: the shape of a
// tensor padded to a bucket. A ragged tensor: [shape.length, dims after the -1...]; a batch input:
// [shape.batch] or, with the zero, [shape.batch + 1].
std::vector<int64_t> PaddedShape(const TensorSpec& tensor, const BucketShape& shape);

// [rows, tensor.dims...] with the variable dimension replaced by `length`: one request's own shape
// of the tensor, ragged or not.
std::vector<int64_t> ItemShape(const TensorSpec& tensor, int64_t rows, int64_t length);

// A ragged input `name` of one element per token (dims [-1], TensorSpec::ragged), and a batch input
// of `kind`: the tensors a ragged spec is made of.
TensorSpec RaggedTokenInput(const std::string& name, DataType dtype);
TensorSpec BatchInputOf(const std::string& name, BatchInputKind kind, DataType dtype);

// The config name of a batch input kind ("BATCH_ELEMENT_COUNT", ...).
const char* BatchInputKindName(BatchInputKind kind);

// A tensor's dims as graphserve serves them: each >= 1, or -1 for its one variable dimension.
// INVALID_ARGUMENT naming the tensor otherwise (the config loader and the engine both check this).
Status CheckTensorDims(const std::string& tensor, const std::vector<int64_t>& dims);

// What every platform needs of a spec (inputs and outputs declared with valid dims, positive bucket
// sizes, a fixed-shape model's lengths all kFixedShapeLength and no -1 in its outputs);
// INVALID_ARGUMENT naming the model otherwise. The platform checks the rest.
Status CheckModelSpec(const ModelSpec& spec);

// Whether (batch, length) of a grid's axes is one of its points (ModelSpec::max_batch_tokens):
// always without a budget (0); with one, when batch <= max_batch_size or batch × length <=
// max_batch_tokens. Free of overflow.
bool IsGridPoint(int64_t batch, int64_t length, int64_t max_batch_size, int64_t max_batch_tokens);

// The default grid's token budget and its largest batch size (a length-varying model whose config
// names no batch sizes); model_spec.cpp has the measurements behind them.
inline constexpr int64_t kDefaultMaxBatchTokens = 16384;
inline constexpr int64_t kDefaultLargestBatch = 512;

// The batch sizes default and planned grids choose from: 1, 2, 3, 4, 6, 8, 12, ... (powers of two and
// 1.5 times them) up to `limit` (none for a limit below 1).
std::vector<int64_t> BatchSizeSteps(int64_t limit);

// The grid used when config.pbtxt names none: dense at small sizes and sparse at large ones,
// capped by (and always including) the model's limits. Batch sizes are BatchSizeSteps below
// max_batch_size, then max_batch_size itself; with a budget, the steps above max_batch_size follow,
// up to kDefaultLargestBatch, while they fit the budget at `shortest_length` (the grid's first
// length).
std::vector<int64_t> DefaultBucketBatchSizes(int64_t max_batch_size, int64_t max_batch_tokens = 0,
                                             int64_t shortest_length = 1);
std::vector<int64_t> DefaultBucketLengths(int64_t max_sequence_length);
// A ragged model's default token sizes: BatchSizeSteps from the smaller of 16 and
// max_sequence_length up to `max_batch_tokens`, which ends them (at most a third of a bucket is
// tail).
std::vector<int64_t> DefaultRaggedTokenSizes(int64_t max_sequence_length, int64_t max_batch_tokens);
// A ragged model's default row sizes: 9, 33, 129, 513, ... (8 × 4^k real rows and the filler's)
// below RaggedLargestRows(max_batch_size), which ends them. FlashAttention launches work for every
// row of a bucket, empty ones included, so a batch of few rows replays a bucket of few.
std::vector<int64_t> DefaultRaggedRowSizes(int64_t max_batch_size);

}  // namespace graphserve
