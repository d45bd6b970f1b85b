#pragma once
// What the BatchPlanner, ModelScheduler and metrics tests share: a small bucket grid, options, and requests
// whose inputs identify them.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graphserve/server/batching/scheduler.h"

namespace graphserve {
namespace scheduler_test {

// batch {1, 2, 4} × length {16, 32, 64}: small enough to reason about every decision by hand.
inline ModelSpec TestSpec(const std::string& name = "echo") {
  ModelSpec spec;
  spec.name = name;
  spec.platform = kPlatformBuiltinEncoder;
  spec.max_batch_size = 4;
  spec.max_sequence_length = 64;
  spec.inputs = {TensorSpec{"x", DataType::kInt64, {-1}, 0.0}};
  spec.outputs = {TensorSpec{"y", DataType::kInt64, {-1}, 0.0}};
  spec.sequence_mask_input = "x";  // lengths may be padded
  spec.bucket_batch_sizes = {1, 2, 4};
  spec.bucket_lengths = {16, 32, 64};
  return spec;
}

// TestSpec's lengths with a token budget: a request carries at most 4 rows, but batches of short
// requests grow up to 2048 tokens: 128 rows at length 16, 64 at 32, 32 at 64.
inline ModelSpec StaircaseTestSpec(const std::string& name = "echo") {
  ModelSpec spec = TestSpec(name);
  spec.bucket_batch_sizes = {1, 2, 4, 8, 16, 32, 64, 128};
  spec.max_batch_tokens = 2048;
  return spec;
}

// A fixed-shape model (no -1 anywhere): batch {1, 2, 4} × the one length kFixedShapeLength. Its
// fixed dim of 1 matches MakeRequest(rows, kFixedShapeLength)'s tensors.
inline ModelSpec FixedShapeTestSpec(const std::string& name = "cnn") {
  ModelSpec spec = TestSpec(name);
  spec.max_sequence_length = kFixedShapeLength;
  spec.inputs[0].dims = {1};
  spec.outputs[0].dims = {1};
  spec.sequence_mask_input.clear();
  spec.bucket_lengths = {kFixedShapeLength};
  return spec;
}

// A ragged model (Triton's ragged batching): buckets of rows {4, 8} × tokens {16, 32, 64}; a
// request row holds at most 32 tokens, a batch 64.
inline ModelSpec RaggedTestSpec(const std::string& name = "ragged") {
  ModelSpec spec = TestSpec(name);
  spec.ragged = true;
  spec.sequence_mask_input.clear();
  spec.inputs = {RaggedTokenInput("x", DataType::kInt64)};
  spec.outputs[0].dims = {4};
  spec.max_batch_size = 7;  // the largest bucket's eighth row is the spare for the tail
  spec.max_sequence_length = 32;
  spec.bucket_batch_sizes = {4, 8};
  spec.bucket_lengths = {16, 32, 64};
  spec.max_batch_tokens = 64;
  return spec;
}

inline SchedulerOptions Options(int64_t max_queue_delay_us, int64_t max_queue_size = 1024) {
  SchedulerOptions options;
  options.max_queue_delay_us = max_queue_delay_us;
  options.max_queue_size = max_queue_size;
  return options;
}

// An int64 [rows, length] tensor whose every element is `tag`, so that a result identifies its
// request.
inline HostTensor TaggedTensor(int64_t rows, int64_t length, int64_t tag) {
  HostTensor tensor;
  tensor.dtype = DataType::kInt64;
  tensor.shape = {rows, length};
  std::vector<int64_t> values(static_cast<size_t>(rows * length), tag);
  tensor.bytes.assign(reinterpret_cast<const char*>(values.data()),
                      values.size() * sizeof(int64_t));
  return tensor;
}

inline std::shared_ptr<PendingRequest> MakeRequest(int64_t rows, int64_t length, int64_t tag = 0) {
  auto request = std::make_shared<PendingRequest>();
  request->item.rows = rows;
  request->item.length = length;
  request->item.inputs.push_back(TaggedTensor(rows, length, tag));
  request->item.outputs_wanted = {true};
  return request;
}

}  // namespace scheduler_test
}  // namespace graphserve
