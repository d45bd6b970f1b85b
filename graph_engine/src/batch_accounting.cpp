#include "batch_accounting.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace graphserve {
namespace {

int64_t Product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t product = 1;
  for (size_t i = begin; i < end; ++i) product *= dims[i];
  return product;
}

}  // namespace

std::vector<OutputSlice> PlanOutputSlices(const ModelSpec& spec, const Batch& batch) {
  const BucketShape& padded_shape = batch.padded_shape;
  std::vector<OutputSlice> slices;
  int64_t first_row = 0;
  int64_t first_token = 0;  // ragged: where the item's tokens start
  for (size_t k = 0; k < batch.items.size(); ++k) {
    const InferenceItem& item = *batch.items[k];
    for (size_t o = 0; o < spec.outputs.size(); ++o) {
      if (!item.outputs_wanted[o]) continue;
      const TensorSpec& output = spec.outputs[o];
      const std::vector<int64_t> padded = PaddedShape(output, padded_shape);
      const int variable_dim = output.variable_dim();
      OutputSlice slice;
      slice.item = k;
      slice.output = o;
      slice.shape = ItemShape(output, item.rows, item.length);
      // A scattered output holds the item's tokens end to end: one run from its first token.
      slice.offset = (output.ragged ? first_token : first_row) * Product(padded, 1, padded.size());
      if (variable_dim < 0 || item.length == padded_shape.length || output.ragged) {
        slice.width = Product(slice.shape, 0, slice.shape.size());
        slice.pitch = slice.width;
        slice.height = 1;
      } else {
        // Rows of `outer` blocks, each holding padded-length × `inner` elements of which the item
        // owns the first item.length × inner.
        const int64_t outer = Product(padded, 1, variable_dim + 1);
        const int64_t inner = Product(padded, variable_dim + 2, padded.size());
        slice.width = item.length * inner;
        slice.pitch = padded_shape.length * inner;
        slice.height = item.rows * outer;
      }
      slices.push_back(std::move(slice));
    }
    first_row += item.rows;
    first_token += item.rows * item.length;
  }
  return slices;
}

std::vector<int64_t> RaggedRowLengths(const Batch& batch) {
  std::vector<int64_t> lengths;
  lengths.reserve(static_cast<size_t>(batch.padded_shape.batch));
  int64_t tokens = 0;
  for (const InferenceItem* item : batch.items) {
    lengths.insert(lengths.end(), static_cast<size_t>(item->rows), item->length);
    tokens += item->rows * item->length;
  }
  // The filler row takes the tail so that the last offset is the bucket's tokens, as the model's
  // fixed buffers need; no request reads its outputs.
  if (tokens < batch.padded_shape.length) lengths.push_back(batch.padded_shape.length - tokens);
  lengths.resize(std::max<size_t>(lengths.size(), static_cast<size_t>(batch.padded_shape.batch)), 0);
  return lengths;
}

std::vector<int64_t> BatchInputValues(BatchInputKind kind, const std::vector<int64_t>& lengths) {
  if (kind == BatchInputKind::kElementCount) return lengths;
  std::vector<int64_t> sums;
  sums.reserve(lengths.size() + 1);
  if (kind == BatchInputKind::kAccumulatedElementCountWithZero) sums.push_back(0);
  int64_t sum = 0;
  for (int64_t length : lengths) sums.push_back(sum += length);
  return sums;
}

int64_t NanosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
      .count();
}

void CopySlice(const OutputSlice& slice, size_t element_size, const char* padded, char* destination) {
  const size_t width = static_cast<size_t>(slice.width) * element_size;
  const char* source = padded + static_cast<size_t>(slice.offset) * element_size;
  for (int64_t run = 0; run < slice.height; ++run) {
    std::memcpy(destination + run * width, source + run * slice.pitch * element_size, width);
  }
}

std::vector<int64_t> PackedOffsets(const std::vector<OutputSlice>& slices, size_t output_count) {
  std::vector<int64_t> packed_end(output_count, 0);
  std::vector<int64_t> offsets;
  offsets.reserve(slices.size());
  for (const OutputSlice& slice : slices) {
    offsets.push_back(packed_end[slice.output]);
    packed_end[slice.output] += slice.width * slice.height;
  }
  return offsets;
}

std::vector<SliceCopy> MergedSliceCopies(const std::vector<OutputSlice>& slices, size_t output_count) {
  const std::vector<int64_t> packed = PackedOffsets(slices, output_count);
  std::vector<SliceCopy> copies;
  // Per output, the copy the next slice may extend: slices of one output are packed back to back,
  // so a slice that continues that copy's source continues its destination too.
  std::vector<size_t> open(output_count, SIZE_MAX);
  auto contiguous = [](int64_t width, int64_t pitch, int64_t height) {
    return width == pitch || height == 1;
  };
  for (size_t i = 0; i < slices.size(); ++i) {
    const OutputSlice& slice = slices[i];
    if (open[slice.output] != SIZE_MAX) {
      SliceCopy& copy = copies[open[slice.output]];
      const int64_t copy_elements = copy.width * copy.height;
      if (contiguous(copy.width, copy.pitch, copy.height) &&
          contiguous(slice.width, slice.pitch, slice.height) && slice.offset == copy.offset + copy_elements) {
        copy.width = copy_elements + slice.width * slice.height;
        copy.pitch = copy.width;
        copy.height = 1;
        continue;
      }
      if (slice.width == copy.width && slice.pitch == copy.pitch &&
          slice.offset == copy.offset + copy.height * copy.pitch) {
        copy.height += slice.height;
        continue;
      }
    }
    open[slice.output] = copies.size();
    copies.push_back(
        SliceCopy{slice.output, slice.offset, slice.width, slice.pitch, slice.height, packed[i]});
  }
  return copies;
}

void ExecutionCounter::RecordElements(const Batch& batch) {
  uint64_t real_elements = 0;
  for (const InferenceItem* item : batch.items) {
    real_elements += static_cast<uint64_t>(item->rows * item->length);
  }
  counters_.batches += 1;
  counters_.real_elements += real_elements;
  // A ragged bucket computes its tokens, not rows × tokens: its tail is the padding.
  counters_.padded_elements += static_cast<uint64_t>(
      ragged_ ? batch.padded_shape.length : batch.padded_shape.batch * batch.padded_shape.length);
}

void ExecutionCounter::RecordReplay(const Batch& batch) {
  std::lock_guard<std::mutex> lock(mutex_);
  RecordElements(batch);
  counters_.graph_replays[batch.padded_shape] += 1;
}

uint64_t ExecutionCounter::RecordEager(const Batch& batch, EagerReason reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  RecordElements(batch);
  counters_.eager_runs[static_cast<int>(reason)] += 1;
  return ++eager_total_;
}

ExecutionCounters ExecutionCounter::Snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

}  // namespace graphserve
