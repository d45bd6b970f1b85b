#pragma once
// What both executors share once a batch is padded: where each request's share of each output lies
// in the padded outputs (the one slicing geometry: the eager executor copies it on the host, the
// CUDA-graph executor off the device), the counting of executions and the timing of their stages.
// Torch-free.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "graphserve/engine/executor.h"
#include "graphserve/engine/model_spec.h"

namespace graphserve {

// One item's share of one output of a padded batch, as a 2-D copy out of that output's contiguous
// padded tensor (PaddedShape(output, batch.padded_shape)): `height` runs of `width` elements, each
// `pitch` elements after the previous, the first `offset` elements into the tensor. A share that
// is contiguous (no variable dimension, or the item's length is the padded length) is one run.
struct OutputSlice {
  size_t item = 0;
  size_t output = 0;
  std::vector<int64_t> shape;  // the item's own [rows, dims...], variable dimension = its length
  int64_t offset = 0;
  int64_t width = 0;
  int64_t pitch = 0;
  int64_t height = 0;
};

// The slices of every (item, output) the item wants, in item order, then output order. Assumes the
// batch is valid for the spec (ValidateBatch).
std::vector<OutputSlice> PlanOutputSlices(const ModelSpec& spec, const Batch& batch);

// The rows of a ragged batch (ModelSpec::ragged) padded to its bucket, as the model sees them: each
// item's rows of item.length tokens in item order, then one filler row of the bucket's remaining
// tokens (when there are any), then empty rows up to the bucket's rows. Assumes a valid batch.
std::vector<int64_t> RaggedRowLengths(const Batch& batch);

// What a batch input of `kind` holds for rows of `lengths` (kElementCount: the lengths; the
// accumulated kinds: their running sums, with or without a leading 0).
std::vector<int64_t> BatchInputValues(BatchInputKind kind, const std::vector<int64_t>& lengths);

// Copies one slice of a host buffer holding a padded output into `destination` (width × height
// elements of `element_size` bytes, packed).
void CopySlice(const OutputSlice& slice, size_t element_size, const char* padded, char* destination);

// Where each slice goes when an output's slices are packed one after another in slice order: its
// offset, in elements, into its output's packed buffer.
std::vector<int64_t> PackedOffsets(const std::vector<OutputSlice>& slices, size_t output_count);

// One 2-D copy out of a padded output into that output's packed buffer: `height` runs of `width`
// elements, `pitch` apart from `offset` in the padded output, packed from `packed_offset`.
struct SliceCopy {
  size_t output = 0;
  int64_t offset = 0;
  int64_t width = 0;
  int64_t pitch = 0;
  int64_t height = 0;
  int64_t packed_offset = 0;
};

// The copies that pack `slices` (PlanOutputSlices' order) as PackedOffsets says, with slices that
// continue each other in the padded output merged into one copy: one-row requests' pooled outputs
// become a single copy instead of one per request (each is a separate transfer on the device).
std::vector<SliceCopy> MergedSliceCopies(const std::vector<OutputSlice>& slices, size_t output_count);

// Nanoseconds on the host's steady clock since `start`: the host's share of a batch's stage.
int64_t NanosSince(std::chrono::steady_clock::time_point start);

// The ExecutionCounters of one executor. Thread-safe: the worker records, metrics read.
class ExecutionCounter {
 public:
  // `ragged`: the model is ragged (ModelSpec::ragged), so a batch's padded elements are its
  // bucket's tokens.
  explicit ExecutionCounter(bool ragged = false) : ragged_(ragged) {}

  // A batch run as a replay of the graph of its padded shape.
  void RecordReplay(const Batch& batch);
  // A batch run eagerly; returns how many eager runs this counter has recorded, this one included.
  uint64_t RecordEager(const Batch& batch, EagerReason reason);
  ExecutionCounters Snapshot() const;

 private:
  void RecordElements(const Batch& batch);  // requires mutex_

  const bool ragged_;
  mutable std::mutex mutex_;
  ExecutionCounters counters_;
  uint64_t eager_total_ = 0;
};

}  // namespace graphserve
