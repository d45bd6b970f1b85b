#include "graphserve/engine/model_spec.h"

#include <algorithm>
#include <limits>

namespace graphserve {
size_t SmallestAtLeast(const std::vector<int64_t>& grid, int64_t value) {
  return static_cast<size_t>(std::lower_bound(grid.begin(), grid.end(), value) - grid.begin());
}

int TensorSpec::variable_dim() const {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) return static_cast<int>(i);
  }
  return -1;
}

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kFp16: return "fp16";
    case Precision::kBf16: return "bf16";
  }
  return "fp32";
}

std::string BucketShape::ToString() const {
  return std::to_string(batch) + "x" + std::to_string(length);
}

std::string BucketLabel(const BucketShape& shape, bool has_sequence_length) {
  return has_sequence_length ? shape.ToString() : std::to_string(shape.batch) + "x-";
}

bool ModelSpec::has_sequence_length() const {
  return std::any_of(inputs.begin(), inputs.end(),
                     [](const TensorSpec& input) { return input.variable_dim() >= 0; });
}

std::string ModelSpec::BucketLabel(const BucketShape& shape) const {
  return graphserve::BucketLabel(shape, has_sequence_length());
}

bool IsGridPoint(int64_t batch, int64_t length, int64_t max_batch_size, int64_t max_batch_tokens) {
  if (max_batch_tokens == 0 || batch <= max_batch_size) return true;
  // batch × length <= budget, without the product (a config's values may be near int64's limit).
  return length > 0 && batch <= max_batch_tokens / length;
}

namespace {
// Whether (batch, length) of the axes is a point of `spec`'s grid: IsGridPoint, or any pair for a
// ragged model, whose length is its tokens (the budget bounds them already) and whose rows beyond
// max_batch_size are the spare one's.
bool IsPoint(const ModelSpec& spec, int64_t batch, int64_t length) {
  return spec.ragged || IsGridPoint(batch, length, spec.max_batch_size, spec.max_batch_tokens);
}
}  // namespace

std::vector<TensorSpec> ModelSpec::arguments() const {
  std::vector<TensorSpec> all = inputs;
  all.insert(all.end(), batch_inputs.begin(), batch_inputs.end());
  return all;
}

BucketShape ModelSpec::BucketFor(int64_t rows, int64_t length) const {
  if (IsOversize(rows, length)) return BucketShape{rows, length};
  if (ragged) {
    const int64_t tokens = bucket_lengths[SmallestAtLeast(bucket_lengths, length)];
    const int64_t needed = RaggedRowsNeeded(rows, length, tokens);
    return BucketShape{bucket_batch_sizes[SmallestAtLeast(bucket_batch_sizes, needed)], tokens};
  }
  return BucketShape{bucket_batch_sizes[SmallestAtLeast(bucket_batch_sizes, rows)],
                     bucket_lengths[SmallestAtLeast(bucket_lengths, length)]};
}

bool ModelSpec::IsUnpaddableLength(int64_t length) const {
  const size_t padded_length = SmallestAtLeast(bucket_lengths, length);
  return !masks_padding() && padded_length < bucket_lengths.size() &&
         bucket_lengths[padded_length] != length;
}

bool ModelSpec::IsOversize(int64_t rows, int64_t length) const {
  if (ragged) {
    // Every (rows, tokens) of the axes is a point; only the filler row may need a larger one. The
    // largest row size's spare row is the filler's, never a real one's.
    const size_t tokens = SmallestAtLeast(bucket_lengths, length);
    return rows > max_batch_size || tokens == bucket_lengths.size() ||
           SmallestAtLeast(bucket_batch_sizes, RaggedRowsNeeded(rows, length, bucket_lengths[tokens])) ==
               bucket_batch_sizes.size();
  }
  if (IsUnpaddableLength(length)) return true;
  const size_t batch = SmallestAtLeast(bucket_batch_sizes, rows);
  const size_t padded_length = SmallestAtLeast(bucket_lengths, length);
  // The sizes that are points at a length are a prefix of the axis (IsGridPoint only gets harder
  // to meet as the batch grows), so the smallest size holding the rows decides.
  return batch == bucket_batch_sizes.size() || padded_length == bucket_lengths.size() ||
         !IsGridPoint(bucket_batch_sizes[batch], bucket_lengths[padded_length], max_batch_size,
                      max_batch_tokens);
}

bool ModelSpec::HasBucket(const BucketShape& shape) const {
  return std::binary_search(bucket_batch_sizes.begin(), bucket_batch_sizes.end(), shape.batch) &&
         std::binary_search(bucket_lengths.begin(), bucket_lengths.end(), shape.length) &&
         IsPoint(*this, shape.batch, shape.length);
}

int64_t ModelSpec::LargestBatchFor(int64_t length) const {
  const size_t padded_length = SmallestAtLeast(bucket_lengths, length);
  if (padded_length == bucket_lengths.size()) return 0;
  for (auto size = bucket_batch_sizes.rbegin(); size != bucket_batch_sizes.rend(); ++size) {
    if (IsPoint(*this, *size, bucket_lengths[padded_length])) {
      return *size;
    }
  }
  return 0;
}

std::vector<BucketShape> ModelSpec::Buckets() const {
  std::vector<BucketShape> points;
  for (int64_t batch : bucket_batch_sizes) {
    for (int64_t length : bucket_lengths) {
      if (IsPoint(*this, batch, length)) {
        points.push_back(BucketShape{batch, length});
      }
    }
  }
  return points;
}

BucketShape ModelSpec::LargestBucket() const {
  BucketShape largest;
  for (const BucketShape& point : Buckets()) {
    const double elements = ragged ? static_cast<double>(point.length)
                                   : static_cast<double>(point.batch) * static_cast<double>(point.length);
    const double most = ragged ? static_cast<double>(largest.length)
                               : static_cast<double>(largest.batch) * static_cast<double>(largest.length);
    if (elements > most || (elements == most && point.batch > largest.batch)) largest = point;
  }
  return largest;
}

// Why kDefaultMaxBatchTokens is 16384 and kDefaultLargestBatch 512: replays of BERT-base (bf16,
// H200) run short requests far below the GPU's rate at 32 rows, and reach it near 8-16k tokens a
// batch. Padded tokens/s: length 16, 0.62M at 32 rows, 1.15M at 128, 1.54M at 512; length 32,
// 0.96M at 32, 1.86M at 256; length 64, 1.45M at 32, 2.12M at 256; length 128, 2.20M at 128.
// 16384 is also 32 × 512, the largest bucket of a BERT-like model's rectangular grid, so the graph
// pool (sized by the largest bucket's activations, attention's growing with the length) does not
// grow; 512 rows bounds the host work of assembling and answering one batch.
//
// Why steps of 1.5 (1, 2, 3, 4, 6, 8, 12, ...) rather than doubling: a batch is padded up to the
// next batch size, and with doubling a batch of 65 rows replays 128. On the H200 (BERT-base bf16,
// the skewed mix, one run each way, twice in alternating order) the finer steps served more real
// tokens/s at every closed-loop concurrency: 1.714M and 1.720M against 1.695M and 1.676M at 2048
// clients, 1.443M/1.434M against 1.409M/1.408M at 512, 737k/736k against 708k/708k at 64, and
// p50 no worse at 1 and 8. The cost is capture time (284 graphs instead of 160 for a 512-token
// model: ready in 22 s instead of 13 s); the graph pool stays the same (610 MiB), since it is
// sized by the largest bucket, which the budget fixes.
std::vector<int64_t> BatchSizeSteps(int64_t limit) {
  std::vector<int64_t> sizes;
  // Each power of two p is followed by p + p/2 and then 2p; the bound keeps the next step from
  // overflowing.
  for (int64_t size = 1; size <= limit && size <= (int64_t{1} << 61);) {
    sizes.push_back(size);
    const bool power_of_two = (size & (size - 1)) == 0;
    size = size == 1 ? 2 : power_of_two ? size + size / 2 : size / 3 * 4;
  }
  return sizes;
}

std::vector<int64_t> DefaultBucketBatchSizes(int64_t max_batch_size, int64_t max_batch_tokens,
                                             int64_t shortest_length) {
  std::vector<int64_t> sizes;
  if (max_batch_size < 1) return sizes;
  sizes = BatchSizeSteps(max_batch_size - 1);
  sizes.push_back(max_batch_size);
  // Beyond the rows a request may carry, the budget alone bounds a batch: the same steps, while
  // they fit it at the shortest length (and so are points of the grid at some length).
  for (int64_t size : BatchSizeSteps(kDefaultLargestBatch)) {
    if (size <= max_batch_size) continue;
    if (max_batch_tokens == 0 ||
        !IsGridPoint(size, shortest_length, max_batch_size, max_batch_tokens)) {
      break;
    }
    sizes.push_back(size);
  }
  return sizes;
}

std::vector<int64_t> DefaultBucketLengths(int64_t max_sequence_length) {
  std::vector<int64_t> lengths;
  if (max_sequence_length < 1) return lengths;
  // Steps of 8 up to 64 and of 16 up to 128, where most requests of a typical (log-normal, median
  // ~50) mix fall: a fixed step wastes at most 7 (15) positions per request, a large share of a
  // short one. Above, each doubling in four equal steps (160, 192, 224, 256, 320, ..., 512, 640,
  // ...): at most a quarter wasted, while the count (one CUDA graph per length and batch size) grows
  // only logarithmically. Long requests are few but costly: on a log-normal mix (median 48, sigma
  // 0.8, up to 512) the 11% above 128 tokens take about a third of the GPU's time, so their padding
  // counts. On the H200 (BERT-base bf16, that mix, BENCHMARKS.md, "Grid choices") the steps of 8
  // below 64 served 1-4% more real tokens/s than steps of 16 from 512 clients up and about the same
  // at 8 and 64, where steps of 8 up to 128 lost at 64 and 512 clients (finer bins, smaller
  // batches). 20 lengths for 512: with the default batch sizes and token budget, 284 graphs.
  constexpr int64_t kFineStep = 8;
  constexpr int64_t kLastFineStep = 64;
  constexpr int64_t kStep = 16;
  constexpr int64_t kLastStep = 128;
  constexpr int64_t kStepsPerDoubling = 4;
  for (int64_t length = kFineStep; length <= kLastStep && length < max_sequence_length;
       length += length < kLastFineStep ? kFineStep : kStep) {
    lengths.push_back(length);
  }
  for (int64_t power = kLastStep; power < max_sequence_length; power *= 2) {
    for (int64_t step = 1; step <= kStepsPerDoubling; ++step) {
      const int64_t length = power + power / kStepsPerDoubling * step;
      if (length >= max_sequence_length) break;
      lengths.push_back(length);
    }
    if (power > std::numeric_limits<int64_t>::max() / 4) break;
  }
  lengths.push_back(max_sequence_length);
  return lengths;
}

std::vector<int64_t> DefaultRaggedTokenSizes(int64_t max_sequence_length, int64_t max_batch_tokens) {
  // Below 16 tokens a bucket costs about a launch whatever it holds.
  const int64_t smallest = std::min<int64_t>(16, max_sequence_length);
  std::vector<int64_t> sizes;
  for (int64_t size : BatchSizeSteps(max_batch_tokens)) {
    if (size >= smallest && size < max_batch_tokens) sizes.push_back(size);
  }
  sizes.push_back(max_batch_tokens);
  return sizes;
}

std::vector<int64_t> DefaultRaggedRowSizes(int64_t max_batch_size) {
  // Steps of 4: a row costs FlashAttention little next to a token (an H100 layer of 1,024 tokens:
  // 16 µs in 33 rows, 32 in 289), so finer steps would mostly add graphs.
  const int64_t largest = RaggedLargestRows(max_batch_size);
  std::vector<int64_t> sizes;
  for (int64_t real_rows = 8; real_rows + 1 < largest; real_rows *= 4) {
    sizes.push_back(real_rows + 1);
    if (real_rows > std::numeric_limits<int64_t>::max() / 8) break;
  }
  sizes.push_back(largest);
  return sizes;
}

std::vector<int64_t> PaddedShape(const TensorSpec& tensor, const BucketShape& shape) {
  switch (tensor.batch_input_kind) {
    case BatchInputKind::kNone:
      break;
    case BatchInputKind::kAccumulatedElementCountWithZero:
      return {shape.batch + 1};
    case BatchInputKind::kElementCount:
    case BatchInputKind::kAccumulatedElementCount:
      return {shape.batch};
  }
  if (tensor.ragged) {
    // The config keeps a ragged tensor's -1 first: rows end to end along it.
    std::vector<int64_t> flat{shape.length};
    flat.insert(flat.end(), tensor.dims.begin() + 1, tensor.dims.end());
    return flat;
  }
  return ItemShape(tensor, shape.batch, shape.length);
}

TensorSpec RaggedTokenInput(const std::string& name, DataType dtype) {
  TensorSpec tensor{name, dtype, {-1}};
  tensor.ragged = true;
  return tensor;
}

TensorSpec BatchInputOf(const std::string& name, BatchInputKind kind, DataType dtype) {
  TensorSpec tensor{name, dtype, {}};
  tensor.batch_input_kind = kind;
  return tensor;
}

const char* BatchInputKindName(BatchInputKind kind) {
  switch (kind) {
    case BatchInputKind::kNone:
      return "none";
    case BatchInputKind::kElementCount:
      return "BATCH_ELEMENT_COUNT";
    case BatchInputKind::kAccumulatedElementCount:
      return "BATCH_ACCUMULATED_ELEMENT_COUNT";
    case BatchInputKind::kAccumulatedElementCountWithZero:
      return "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO";
  }
  return "none";
}

std::vector<int64_t> ItemShape(const TensorSpec& tensor, int64_t rows, int64_t length) {
  std::vector<int64_t> padded;
  padded.reserve(tensor.dims.size() + 1);
  padded.push_back(rows);
  for (int64_t dim : tensor.dims) padded.push_back(dim == -1 ? length : dim);
  return padded;
}

Status CheckTensorDims(const std::string& tensor, const std::vector<int64_t>& dims) {
  int variable_dims = 0;
  for (int64_t dim : dims) {
    if (dim == -1) {
      ++variable_dims;
    } else if (dim < 1) {
      return InvalidArgument(std::to_string(dim) + " in '" + tensor +
                             "' (dims are >= 1, or -1 for the variable dimension)");
    }
  }
  if (variable_dims > 1) {
    return InvalidArgument("'" + tensor +
                           "' has more than one -1; graphserve varies one dimension per tensor");
  }
  return Status::Ok();
}

namespace {

Status CheckTensorSpecs(const std::string& model, const char* role,
                        const std::vector<TensorSpec>& tensors) {
  if (tensors.empty()) return InvalidArgument("model '" + model + "' declares no " + role + "s");
  for (const TensorSpec& tensor : tensors) {
    const Status status = CheckTensorDims(tensor.name, tensor.dims);
    if (!status.ok()) {
      return InvalidArgument("model '" + model + "': " + role + " dims: " + status.message());
    }
  }
  return Status::Ok();
}

// A fixed-shape model pads nothing along a length: the batcher and the slicing rely on every
// request and bucket having kFixedShapeLength, and an output cannot follow a length there is not.
Status CheckFixedShapeSpec(const ModelSpec& spec) {
  const std::string model = "model '" + spec.name + "' (no input has a -1 dimension): ";
  if (spec.max_sequence_length != kFixedShapeLength ||
      spec.bucket_lengths != std::vector<int64_t>{kFixedShapeLength}) {
    return InvalidArgument(model + "max_sequence_length and bucket lengths must be " +
                           std::to_string(kFixedShapeLength));
  }
  for (const TensorSpec& output : spec.outputs) {
    if (output.variable_dim() >= 0) {
      return InvalidArgument(model + "output '" + output.name + "' has a -1 dimension");
    }
  }
  return Status::Ok();
}

// What the ragged geometry relies on (the config loader says which field is wrong; this guards the
// engine against a spec built elsewhere).
Status CheckRaggedSpec(const ModelSpec& spec) {
  const std::string model = "model '" + spec.name + "' (ragged): ";
  for (const TensorSpec& input : spec.inputs) {
    if (!input.ragged || input.dims.empty() || input.dims.front() != -1) {
      return InvalidArgument(model + "input '" + input.name + "' must be ragged with its -1 first");
    }
  }
  for (const TensorSpec& output : spec.outputs) {
    const int variable_dim = output.variable_dim();
    if (output.ragged != (variable_dim >= 0) || variable_dim > 0) {
      return InvalidArgument(model + "output '" + output.name +
                             "' must be scattered (ragged, -1 first) exactly when it has a -1");
    }
  }
  for (const TensorSpec& batch_input : spec.batch_inputs) {
    if (batch_input.batch_input_kind == BatchInputKind::kNone) {
      return InvalidArgument(model + "batch input '" + batch_input.name + "' has no kind");
    }
  }
  // Without the spare row a full batch with a tail would have no bucket (RaggedLargestRows).
  if (spec.bucket_batch_sizes.empty() ||
      spec.bucket_batch_sizes.back() != RaggedLargestRows(spec.max_batch_size)) {
    return InvalidArgument(model + "the largest bucket row size must be max_batch_size + 1 = " +
                           std::to_string(RaggedLargestRows(spec.max_batch_size)) +
                           " (a spare row for the tail of a full batch), got " +
                           (spec.bucket_batch_sizes.empty()
                                ? std::string("none")
                                : std::to_string(spec.bucket_batch_sizes.back())));
  }
  return Status::Ok();
}

}  // namespace

Status CheckModelSpec(const ModelSpec& spec) {
  Status status = CheckTensorSpecs(spec.name, "input", spec.inputs);
  if (!status.ok()) return status;
  status = CheckTensorSpecs(spec.name, "output", spec.outputs);
  if (!status.ok()) return status;
  for (const std::vector<int64_t>* grid : {&spec.bucket_batch_sizes, &spec.bucket_lengths}) {
    for (int64_t size : *grid) {
      if (size < 1) {
        return InvalidArgument("model '" + spec.name + "': bucket sizes must be positive, got " +
                               std::to_string(size));
      }
    }
  }
  if (spec.max_batch_tokens < 0) {
    return InvalidArgument("model '" + spec.name + "': max_batch_tokens must not be negative, got " +
                           std::to_string(spec.max_batch_tokens));
  }
  if (spec.ragged) return CheckRaggedSpec(spec);
  if (!spec.batch_inputs.empty()) {
    return InvalidArgument("model '" + spec.name + "': batch inputs need a ragged model");
  }
  return spec.has_sequence_length() ? Status::Ok() : CheckFixedShapeSpec(spec);
}

}  // namespace graphserve
