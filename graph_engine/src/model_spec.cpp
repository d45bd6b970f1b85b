#include "graphserve/engine/model_spec.h"

#include <limits>

namespace graphserve {
namespace {

// The smallest entry of `grid` that is >= `value`, or -1 when none is (an oversize value).
int64_t SmallestAtLeast(const std::vector<int64_t>& grid, int64_t value) {
  int64_t best = -1;
  for (int64_t entry : grid) {
    if (entry >= value && (best < 0 || entry < best)) best = entry;
  }
  return best;
}

}  // namespace

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

BucketShape ModelSpec::BucketFor(int64_t rows, int64_t length) const {
  const int64_t bucket_batch = SmallestAtLeast(bucket_batch_sizes, rows);
  const int64_t bucket_length = SmallestAtLeast(bucket_lengths, length);
  if (bucket_batch < 0 || bucket_length < 0) return BucketShape{rows, length};
  return BucketShape{bucket_batch, bucket_length};
}

bool ModelSpec::IsOversize(int64_t rows, int64_t length) const {
  return SmallestAtLeast(bucket_batch_sizes, rows) < 0 ||
         SmallestAtLeast(bucket_lengths, length) < 0;
}

std::vector<int64_t> DefaultBucketBatchSizes(int64_t max_batch_size) {
  std::vector<int64_t> sizes;
  if (max_batch_size < 1) return sizes;
  for (int64_t size = 1; size < max_batch_size; size *= 2) sizes.push_back(size);
  sizes.push_back(max_batch_size);
  return sizes;
}

std::vector<int64_t> DefaultBucketLengths(int64_t max_sequence_length) {
  std::vector<int64_t> lengths;
  if (max_sequence_length < 1) return lengths;
  // 16, then powers of two with their 1.5x midpoints (32, 48, 64, 96, ...): padding wastes at most
  // a third of a bucket while the number of buckets (one CUDA graph each) grows only
  // logarithmically. Below 32 a midpoint would save too little to be worth a graph.
  for (int64_t power = 16; power < max_sequence_length; power *= 2) {
    lengths.push_back(power);
    const int64_t midpoint = power + power / 2;
    if (power >= 32 && midpoint < max_sequence_length) lengths.push_back(midpoint);
    if (power > std::numeric_limits<int64_t>::max() / 4) break;
  }
  lengths.push_back(max_sequence_length);
  return lengths;
}

}  // namespace graphserve
